"""The one adapter between two registries: every breaking rule sees them through the pairs it hands out.

Elements are matched by kind and key (`PROFILE_PARTS`; an RPC by full name across the whole registry, so a
move is one pair). Order in the YAML never matters, nor the spelling of a message name (short or
package-qualified). An unmatched element is a removal or an addition; when a removed and an added
element differ only in name (and editorial text), both sides get a `renamed` note.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable, Sequence

from oespec.registry import Profile, Registry

# Text that explains but never changes the contract: editing it needs no version bump.
EDITORIAL_FIELDS = frozenset({"description", "summary", "reason", "changes"})
# The wording of `deprecated:` is editorial too; only whether an element is deprecated counts.
_POSITION_FIELDS = frozenset({"loc", "locs"})


def fingerprint(value: Any, *, skip: frozenset[str] = frozenset()) -> Any:
    """A comparable, location-free rendering of model data; `skip` names fields left out at any depth."""
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,) + tuple(
            (f.name, fingerprint(getattr(value, f.name), skip=skip))
            for f in fields(value) if f.name not in _POSITION_FIELDS and f.name not in skip)
    if isinstance(value, (list, tuple)):
        return tuple(fingerprint(v, skip=skip) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), fingerprint(v, skip=skip)) for k, v in value.items()))
    if isinstance(value, bool):
        return ("bool", value)  # so that `true` and `1` never compare equal
    return value


def type_name(name: str, package: str | None) -> str:
    """A message name as the registry means it: `openengine.v1.GetLoadRequest` and `GetLoadRequest`
    are the same message in package openengine.v1, so both become the short form."""
    if package and name.startswith(package + "."):
        return name[len(package) + 1:]
    return name


def condition_key(condition) -> tuple:
    """A condition of an incompatibility, as a comparable value (conditions are AND-ed: a set)."""
    return (condition.reference, condition.operator, fingerprint(condition.value))


def incompatibility_key(inc) -> str:
    """An incompatibility's identity: the profile it names, else the set of limits its conditions
    read (so a changed threshold is a change of the same incompatibility, not a new one)."""
    if inc.profile:
        return inc.profile
    return "when " + " and ".join(sorted({c.reference for c in inc.when}))


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(_show(v) for v in value)) + "}" if value else "{}"
    if isinstance(value, tuple) and value and value[0] == "bool" and len(value) == 2:
        return _show(value[1])
    if value is None:
        return "(none)"
    return str(value)


def contract(profile: Profile, package: str | None = None) -> dict[str, Any]:
    """What a profile promises, as a flat `{facet: value}` map keyed by identity, never position.

    Limits are keyed by name, RPCs by full name, messages by their resolved name; roles, the
    conditions of an incompatibility and the values of an enum are sets (enum values with their
    wire numbers). Version, history, `since` and editorial text (descriptions, summaries, reasons,
    and the wording of `deprecated:`, whose presence alone counts) are left out.
    """
    out: dict[str, Any] = {
        "mandatory": profile.mandatory,
        "scope": profile.scope.kind,
        "roles": frozenset(profile.scope.roles),
        "deprecated": profile.deprecated is not None,
    }
    cap = profile.capability
    if cap is not None:
        out.update({"capability.field": cap.field, "capability.number": cap.number,
                    "capability.message": type_name(cap.message, package)})
    for rpc in profile.rpcs:
        at = f"rpc {type_name(rpc.name, package)}"
        for key in ("request", "response"):
            out[f"{at}.{key}"] = type_name(getattr(rpc, key), package)
        out[f"{at}.streaming"] = rpc.streaming
        out[f"{at}.deprecated"] = rpc.deprecated is not None
    for msg in profile.messages:
        out[f"message {type_name(msg.name, package)}.deprecated"] = msg.deprecated is not None
    for lim in profile.limits:
        at = f"limit {lim.name}"
        out[f"{at}.type"] = str(lim.type) + (f" {lim.type.enum_name}" if lim.type.enum_name else "")
        if lim.type.base == "enum":
            out[f"{at}.values"] = frozenset(f"{v}={n}" for v, n in lim.type.enum_wire.items())
        out.update({f"{at}.field": lim.field, f"{at}.default": fingerprint(lim.default),
                    f"{at}.minimum": lim.minimum, f"{at}.maximum": lim.maximum, f"{at}.unit": lim.unit,
                    f"{at}.deprecated": lim.deprecated is not None})
    for req in profile.requires:
        out[f"requires {req.profile}"] = str(req.range)
    for inc in profile.incompatible_with:
        out[f"incompatible {incompatibility_key(inc)}"] = frozenset(str(c) for c in inc.when)
    return out


def contract_changes(before: Profile, after: Profile, package_before: str | None = None,
                     package_after: str | None = None) -> list[str]:
    """What changed between two promises, one `facet: old -> new` text per changed facet."""
    old, new = contract(before, package_before), contract(after, package_after)
    changes = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "(absent)"), new.get(key, "(absent)")
        if a != b:
            changes.append(f"{key}: {_show(a)} -> {_show(b)}")
    return changes


def _rename_key(element: Any) -> Any:
    """Everything but the element's own name (and text), to tell a rename from a real removal."""
    skip = EDITORIAL_FIELDS | {"since"}
    top_skip = {"name", "version", "history"} if isinstance(element, Profile) else {"name"}
    return tuple((f.name, fingerprint(getattr(element, f.name), skip=skip)) for f in fields(element)
                 if f.name not in _POSITION_FIELDS | skip | top_skip)


@dataclass(frozen=True)
class Pair:
    """One element as it was (`previous`) and as it is (`current`); either side may be missing.

    `prev_parent` / `cur_parent` are the owning profiles on each side (for a profile pair, the
    profiles themselves). For a removal `cur_parent` is the same-named profile in the current
    registry, if it still exists: that is where the removal is reported.
    """

    kind: str
    key: str
    previous: Any
    current: Any
    prev_parent: Profile | None = None
    cur_parent: Profile | None = None
    renamed: str | None = None

    @property
    def added(self) -> bool:
        return self.previous is None and self.current is not None

    @property
    def removed(self) -> bool:
        return self.previous is not None and self.current is None

    @property
    def kept(self) -> bool:
        return self.previous is not None and self.current is not None


def match(kind: str, previous: Sequence[Any], current: Sequence[Any], *,
          key: Callable[[Any], str] = lambda e: e.name, key_after: Callable[[Any], str] | None = None,
          prev_parent: Profile | None = None, cur_parent: Profile | None = None) -> list[Pair]:
    """Pair up two lists of elements by key (`key_after` for the current side, when the key
    depends on the side); unmatched ones become removals and additions."""
    before = {key(e): e for e in previous}
    after = {(key_after or key)(e): e for e in current}
    removed = [k for k in before if k not in after]
    added = [k for k in after if k not in before]
    renamed_to: dict[str, str] = {}
    for old in removed:
        shape = _rename_key(before[old])
        candidates = [new for new in added if new not in renamed_to.values()
                      and _rename_key(after[new]) == shape]
        if len(candidates) == 1:
            renamed_to[old] = candidates[0]
    renamed_from = {new: old for old, new in renamed_to.items()}
    return [Pair(kind, k, before.get(k), after.get(k), prev_parent, cur_parent,
                 renamed_to.get(k) or renamed_from.get(k))
            for k in list(before) + added]


# A profile's elements other than messages, RPCs and its capability: (kind, attribute, key).
PROFILE_PARTS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("limit", "limits", lambda lim: lim.name),
    ("requirement", "requires", lambda r: r.profile),
    ("incompatibility", "incompatible_with", incompatibility_key),
    ("history", "history", lambda h: str(h.version)),
)


def _rpc_pairs(baseline: Registry, current: Registry) -> list[Pair]:
    """RPCs are matched across the whole registry, so a move between profiles is one kept pair."""
    # Keyed relative to each side's package, so a changed `registry.package` (OEB009) is not also
    # a removal and an addition of every RPC; the pair still shows the full name.
    before = {type_name(rpc.name, baseline.package): (owner, rpc) for owner, rpc in baseline.all_rpcs()}
    after = {type_name(rpc.name, current.package): (owner, rpc) for owner, rpc in current.all_rpcs()}
    out = []
    for pair in match("rpc", [r for _, r in before.values()], [r for _, r in after.values()],
                      key=lambda r: type_name(r.name, baseline.package),
                      key_after=lambda r: type_name(r.name, current.package)):
        prev_owner = before[pair.key][0] if pair.key in before else None
        cur_owner = after[pair.key][0] if pair.key in after else None
        if prev_owner is None:
            prev_owner = baseline.profile(cur_owner.name)
        if cur_owner is None:
            cur_owner = current.profile(prev_owner.name)
        name = (pair.current or pair.previous).name
        out.append(Pair("rpc", name, pair.previous, pair.current, prev_owner, cur_owner, pair.renamed))
    return out


def pairs(baseline: Registry | None, current: Registry) -> list[Pair]:
    """Every pair the rules look at: the registry, each profile, then each profile's elements.

    Elements of an added or removed profile are not paired: the profile-level rule speaks for them.
    """
    empty = Registry(path="", revision=0, package=current.package, profiles=())
    base = baseline or empty
    out = [Pair("registry", "registry", baseline, current)]
    profile_pairs = match("profile", base.profiles, current.profiles)
    for pp in profile_pairs:
        out.append(Pair("profile", pp.key, pp.previous, pp.current, pp.previous, pp.current, pp.renamed))
    for pp in profile_pairs:
        if not pp.kept:
            continue
        prev, cur = pp.previous, pp.current
        # Messages by resolved name: the short and the full spelling are one message.
        out += match("message", prev.messages, cur.messages, key=lambda m: type_name(m.name, base.package),
                     key_after=lambda m: type_name(m.name, current.package), prev_parent=prev, cur_parent=cur)
        for kind, attr, key in PROFILE_PARTS:
            out += match(kind, getattr(prev, attr), getattr(cur, attr), key=key, prev_parent=prev, cur_parent=cur)
        caps = [c for c in (prev.capability,) if c], [c for c in (cur.capability,) if c]
        out += match("capability", *caps, key=lambda c: "capability", prev_parent=prev, cur_parent=cur)
    for rp in _rpc_pairs(base, current):
        # An RPC of a removed profile is covered by the profile's removal; one of a new profile by
        # the new profile's declaration.
        if rp.prev_parent is not None and current.profile(rp.prev_parent.name) is None and not rp.added:
            continue
        if rp.cur_parent is not None and base.profile(rp.cur_parent.name) is None and rp.added:
            continue
        out.append(rp)
    return out
