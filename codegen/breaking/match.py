"""The one adapter between two registries: it matches elements by name and hands out pairs.

Every breaking rule sees the registries through this module only. An element is matched with the
element of the same kind and key on the other side (a profile by name, an RPC by full name anywhere
in the registry, a limit or message by name within its profile, a prerequisite by the profile it
names, a history entry by version). An element with no partner is a removal or an addition; there
is no fuzzy matching, so a rename is a removal plus an addition. When the removed and the added
element are identical apart from the name (and editorial text), both sides get a `renamed` note so
the report can say "looks like a rename".
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable, Sequence

from codegen.registry import Profile, Registry

# Text that explains but never changes the contract: editing it needs no version bump.
EDITORIAL_FIELDS = frozenset({"description", "summary", "reason", "changes"})
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


def contract(profile: Profile) -> Any:
    """What a profile promises, without its version, history, editorial text or `since` markers."""
    return fingerprint(profile, skip=EDITORIAL_FIELDS | {"version", "history", "since"})


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
          key: Callable[[Any], str] = lambda e: e.name,
          prev_parent: Profile | None = None, cur_parent: Profile | None = None) -> list[Pair]:
    """Pair up two lists of elements by key; unmatched ones become removals and additions."""
    before = {key(e): e for e in previous}
    after = {key(e): e for e in current}
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
    pairs = [Pair(kind, k, before.get(k), after.get(k), prev_parent, cur_parent,
                  renamed_to.get(k) or renamed_from.get(k))
             for k in list(before) + added]
    return pairs


def _incompatibility_key(inc) -> str:
    if inc.profile:
        return inc.profile
    return "when " + " and ".join(str(c) for c in inc.when)


KEYS: dict[str, Callable[[Any], str]] = {
    "message": lambda m: m.name,
    "limit": lambda lim: lim.name,
    "requirement": lambda r: r.profile,
    "incompatibility": _incompatibility_key,
    "history": lambda h: str(h.version),
}

_PROFILE_PARTS = (("message", "messages"), ("limit", "limits"), ("requirement", "requires"),
                  ("incompatibility", "incompatible_with"), ("history", "history"))


def _rpc_pairs(baseline: Registry, current: Registry) -> list[Pair]:
    """RPCs are matched across the whole registry, so a move between profiles is one kept pair."""
    before = {rpc.name: (owner, rpc) for owner, rpc in baseline.all_rpcs()}
    after = {rpc.name: (owner, rpc) for owner, rpc in current.all_rpcs()}
    out = []
    for pair in match("rpc", [r for _, r in before.values()], [r for _, r in after.values()]):
        prev_owner = before[pair.key][0] if pair.key in before else None
        cur_owner = after[pair.key][0] if pair.key in after else None
        if prev_owner is None:
            prev_owner = baseline.profile(cur_owner.name)
        if cur_owner is None:
            cur_owner = current.profile(prev_owner.name)
        out.append(Pair("rpc", pair.key, pair.previous, pair.current, prev_owner, cur_owner, pair.renamed))
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
        for kind, attr in _PROFILE_PARTS:
            out += match(kind, getattr(prev, attr), getattr(cur, attr), key=KEYS[kind],
                         prev_parent=prev, cur_parent=cur)
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
