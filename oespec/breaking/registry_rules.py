"""The registry breaking rules. Each handler gets one matched pair and yields `Change`s.

Severity is decided by the runner from the rule's `bump` and the bump the governing profile got;
a handler only says what changed, where, and which profile it belongs to.
"""

from __future__ import annotations

from typing import Callable

from oespec.breaking.rule import Change, Context, rule
from oespec.breaking.match import Pair, condition_key, contract_changes, fingerprint, type_name
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from oespec.registry import Limit, Profile

SCOPE_WIDTH = {"role": 0, "model": 1, "engine": 2}


def _removed_at(pair: Pair, ctx: Context) -> Loc:
    """A removal is reported at its parent in the current file: the profile that lost the element,
    or the registry's `profiles:` key for a removed profile."""
    parent = pair.cur_parent
    if parent is None:
        return ctx.current.at("profiles")
    return parent.loc


def _with(key: str) -> str:
    """An incompatibility is keyed by the profile it names, or by its conditions."""
    return key if key.startswith("when ") else f"with {key}"


def _owner(pair: Pair) -> str | None:
    parent = pair.cur_parent or pair.prev_parent
    return parent.name if parent else None


def _moved(pair: Pair) -> bool:
    """A kept element that now belongs to another profile."""
    return bool(pair.kept and pair.prev_parent and pair.cur_parent and pair.prev_parent.name != pair.cur_parent.name)


# Rules that differ only in what they say: `message(pair)` is the text of the finding.
def _when_added(message: Callable[[Pair], str]):
    def handler(pair: Pair, ctx: Context):
        if pair.added:
            yield Change(pair.current.loc, message(pair), _owner(pair))
    return handler


def _when_removed(message: Callable[[Pair], str]):
    def handler(pair: Pair, ctx: Context):
        if pair.removed:
            yield Change(_removed_at(pair, ctx), message(pair), _owner(pair), pair.previous.loc)
    return handler


def _when_changed(key: str, message: Callable[[Pair], str], value: Callable | None = None):
    """A kept element whose `value` (default: its attribute `key`) changed, reported at `key`."""
    value = value or (lambda element: getattr(element, key))

    def handler(pair: Pair, ctx: Context):
        if pair.kept and value(pair.previous) != value(pair.current):
            yield Change(pair.current.at(key), message(pair), _owner(pair), pair.previous.at(key))
    return handler


# --- registry and history ------------------------------------------------------------------------

@rule("OEB001", "revision-not-increased", requirement="REQ-VER-006", kinds="registry", category="registry",
      breaks="both", bump="none", severity=Severity.ERROR,
      purpose="any change to the registry increases `registry.revision`")
def revision_not_increased(pair: Pair, ctx: Context):
    prev, cur = pair.previous, pair.current
    if prev is None or cur.revision != prev.revision:
        return
    if fingerprint(prev, skip=frozenset({"path", "revision"})) != fingerprint(cur, skip=frozenset({"path", "revision"})):
        yield Change(cur.at("revision"), f"the registry changed but its revision did not (still {cur.revision})",
                     baseline=prev.at("revision"), hint=f"set registry.revision to {prev.revision + 1}")


@rule("OEB002", "revision-decreased", requirement="REQ-VER-006", kinds="registry", category="registry",
      breaks="both", bump="none", severity=Severity.ERROR,
      purpose="`registry.revision` never goes down")
def revision_decreased(pair: Pair, ctx: Context):
    prev, cur = pair.previous, pair.current
    if prev is not None and cur.revision < prev.revision:
        yield Change(cur.at("revision"), f"registry revision went down from {prev.revision} to {cur.revision}",
                     baseline=prev.at("revision"), hint=f"set registry.revision to {prev.revision + 1}")


@rule("OEB003", "version-decreased", requirement="REQ-VER-004", kinds="profile", category="history",
      breaks="both", bump="none", severity=Severity.ERROR,
      purpose="a profile's version never goes down")
def version_decreased(pair: Pair, ctx: Context):
    prev, cur = pair.previous, pair.current
    if pair.kept and cur.version < prev.version:
        yield Change(cur.at("version"), f"version of {cur.name} went down from {prev.version} to {cur.version}",
                     cur.name, prev.at("version"), hint=f"restore {prev.version} or move forward from it")


@rule("OEB004", "history-rewritten", requirement="REQ-VER-004", kinds="history", category="history",
      breaks="both", bump="none", severity=Severity.ERROR,
      purpose="published history entries are never removed or rewritten")
def history_rewritten(pair: Pair, ctx: Context):
    prev, cur = pair.previous, pair.current
    if pair.removed:
        yield Change(_removed_at(pair, ctx),
                     f"history entry {prev.version} of {pair.prev_parent.name} was removed",
                     _owner(pair), prev.loc, hint="restore the entry; history only grows")
    elif pair.kept and prev.changes.strip() != cur.changes.strip():
        yield Change(cur.at("changes"), f"history entry {cur.version} of {pair.cur_parent.name} was rewritten",
                     _owner(pair), prev.at("changes"),
                     hint="restore the published text; describe corrections in the next version's entry")


@rule("OEB005", "history-missing", requirement="REQ-VER-004", kinds="profile", category="history",
      breaks="both", bump="none", severity=Severity.ERROR,
      purpose="a new version (or a new profile) has a history entry for that version")
def history_missing(pair: Pair, ctx: Context):
    prev, cur = pair.previous, pair.current
    if cur is None or (prev is not None and prev.version == cur.version):
        return
    if not any(h.version == cur.version for h in cur.history):
        yield Change(cur.at("version"), f"{cur.name} {cur.version} has no history entry",
                     cur.name, hint=f"add `- version: \"{cur.version}\"` with its changes under history")


@rule("OEB006", "since-rewritten", requirement="REQ-VER-005", kinds=("rpc", "message", "limit"), category="history",
      breaks="both", bump="none", severity=Severity.ERROR,
      purpose="the `since` of an existing RPC, message or limit never changes")
def since_rewritten(pair: Pair, ctx: Context):
    # `since` is relative to the owning profile: an RPC that moved may say another
    if pair.kept and not (pair.kind == "rpc" and _moved(pair)) and pair.previous.since != pair.current.since:
        yield Change(pair.current.at("since"),
                     f"{pair.kind} {pair.key} changed `since` from {pair.previous.since} to {pair.current.since}",
                     _owner(pair), pair.previous.at("since"), hint=f"restore since: \"{pair.previous.since}\"")


@rule("OEB007", "since-not-new-version", requirement="REQ-VER-005", kinds=("rpc", "message", "limit"), category="history",
      breaks="both", bump="none", severity=Severity.ERROR,
      purpose="an RPC, message or limit added in a new version says `since` that version")
def since_not_new_version(pair: Pair, ctx: Context):
    cur, parent = pair.current, pair.cur_parent
    if not pair.added or parent is None or pair.prev_parent is None:
        return
    if ctx.bump(parent.name) in ("major", "minor") and cur.since != parent.version:
        yield Change(cur.at("since"), f"{pair.kind} {pair.key} is new in {parent.name} {parent.version} "
                     f"but says since {cur.since}", parent.name, hint=f"set since: \"{parent.version}\"")


@rule("OEB008", "changed-without-version", requirement="REQ-VER-001", kinds="profile", category="profile",
      breaks="both", bump="minor", fallback=True,
      purpose="any change to what a profile promises comes with a version bump (editorial text excepted)")
def changed_without_version(pair: Pair, ctx: Context):
    prev, cur = pair.previous, pair.current
    if not pair.kept or prev.version != cur.version:
        return
    changes = contract_changes(prev, cur, ctx.baseline.package if ctx.baseline else None, ctx.current.package)
    if changes:
        shown = "; ".join(changes[:4]) + (f"; and {len(changes) - 4} more" if len(changes) > 4 else "")
        yield Change(cur.at("version"), f"what {cur.name} promises changed: {shown}", cur.name,
                     prev.at("version"), details=(("changed", "; ".join(changes)),))


@rule("OEB009", "package-changed", requirement="REQ-VER-003", kinds="registry", category="registry",
      breaks="both", bump="major",
      purpose="`registry.package` names every service and message on the wire: changing it breaks every "
              "profile, so each needs a new major version")
def package_changed(pair: Pair, ctx: Context):
    prev, cur = pair.previous, pair.current
    if prev is None or prev.package == cur.package:
        return
    for profile in cur.profiles:
        if prev.profile(profile.name) is not None:
            yield Change(cur.at("package"), f"registry.package changed from {prev.package} to {cur.package}: "
                         f"every RPC and message of {profile.name} has a new wire name", profile.name,
                         prev.at("package"))


# --- profiles ------------------------------------------------------------------------------------

@rule("OEB010", "profile-removed", requirement="REQ-VER-009", kinds="profile", category="profile",
      breaks="both", bump="major",
      purpose="a profile disappears only after it was deprecated (its last major ends)")
def profile_removed(pair: Pair, ctx: Context):
    prev = pair.previous
    if pair.removed:
        deprecated = prev.deprecated is not None
        yield Change(_removed_at(pair, ctx), f"profile {prev.name} {prev.version} was removed",
                     prev.name, prev.loc,
                     hint="deprecate the profile first (`deprecated: <why, what replaces it>`) and remove it later",
                     severity=Severity.WARNING if deprecated else Severity.ERROR)


# What a new profile must write out, even when empty: absence would be ambiguous.
DECLARATION_KEYS = (("limits", "limits (each with its default)"), ("requires", "prerequisites (`requires`)"),
                    ("incompatible_with", "incompatible combinations (`incompatible_with`)"))


@rule("OEB012", "profile-incomplete", requirement="REQ-VER-007", kinds="profile", category="profile",
      breaks="both", bump="none", severity=Severity.ERROR,
      purpose="a new profile declares version, scope, limits, prerequisites and incompatibilities, "
              "even when a list is empty")
def profile_incomplete(pair: Pair, ctx: Context):
    cur = pair.current
    if not pair.added:
        return
    missing = [text for key, text in DECLARATION_KEYS if key not in cur.locs]
    if missing:
        yield Change(cur.loc, f"new profile {cur.name} does not declare {', '.join(missing)}", cur.name,
                     hint="write each missing key, `[]` when there is nothing to declare")


@rule("OEB013", "mandatory-changed", requirement="REQ-VER-003", kinds="profile", category="profile",
      breaks="both", bump="major",
      purpose="a profile never becomes mandatory or optional within a major")
def mandatory_changed(pair: Pair, ctx: Context):
    prev, cur = pair.previous, pair.current
    if pair.kept and prev.mandatory != cur.mandatory:
        state = "mandatory" if cur.mandatory else "optional"
        yield Change(cur.at("mandatory"),
                     f"{cur.name} became {state}", cur.name, prev.loc)


def _scope_change(prev: Profile, cur: Profile) -> tuple[bool, bool, set[str]]:
    """(narrowed, kind widened, roles added)."""
    before, after = SCOPE_WIDTH[prev.scope.kind], SCOPE_WIDTH[cur.scope.kind]
    lost_roles = prev.scope.kind == cur.scope.kind == "role" and bool(set(prev.scope.roles) - set(cur.scope.roles))
    gained = set(cur.scope.roles) - set(prev.scope.roles) if prev.scope.kind == cur.scope.kind == "role" else set()
    return after < before or lost_roles, after > before, gained


def _scope_moved(index: int, verb: str):
    def handler(pair: Pair, ctx: Context):
        prev, cur = pair.previous, pair.current
        if pair.kept and _scope_change(prev, cur)[index]:
            yield Change(cur.scope.loc, f"scope of {cur.name} {verb} from {prev.scope} to {cur.scope}", cur.name,
                         prev.scope.loc)
    return handler


@rule("OEB016", "roles-added", requirement="REQ-VER-002", kinds="profile", category="profile",
      breaks="clients", bump="minor",
      purpose="a role-scoped profile may gain roles in a minor version")
def roles_added(pair: Pair, ctx: Context):
    if pair.kept:
        gained = _scope_change(pair.previous, pair.current)[2]
        if gained:
            yield Change(pair.current.scope.loc, f"{pair.current.name} now applies to role "
                         f"{', '.join(sorted(gained))}", pair.current.name, pair.previous.scope.loc)


@rule("OEB017", "capability-changed", requirement="REQ-VER-003", kinds="capability", category="profile",
      breaks="both", bump="major",
      purpose="a profile's capability field, number and message never change within a major")
def capability_changed(pair: Pair, ctx: Context):
    if not pair.kept:
        return
    for key in ("field", "number", "message"):
        before, after = getattr(pair.previous, key), getattr(pair.current, key)
        if before != after:
            yield Change(pair.current.at(key), f"capability {key} of {pair.cur_parent.name} changed from "
                         f"{before} to {after}", _owner(pair), pair.previous.at(key))


# --- prerequisites and incompatibilities ---------------------------------------------------------

def _implies(a, b) -> bool:
    """Does condition `a` holding guarantee that condition `b` holds (same limit)?"""
    if a.reference != b.reference:
        return False
    if condition_key(a) == condition_key(b):
        return True
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    if not (number(a.value) and number(b.value)):
        return b.operator == "not_equals" and a.operator == "equals" and a.value != b.value
    if b.operator == "at_least":
        return a.operator in ("at_least", "equals") and a.value >= b.value
    if b.operator == "at_most":
        return a.operator in ("at_most", "equals") and a.value <= b.value
    if b.operator == "not_equals":
        return (a.operator == "equals" and a.value != b.value) or \
               (a.operator == "at_least" and a.value > b.value) or (a.operator == "at_most" and a.value < b.value)
    return False


def _forbids_less(before, after) -> bool:
    """Conditions are AND-ed: `after` forbids a subset of what `before` did when every old
    condition follows from the new ones."""
    return all(any(_implies(new, old) for new in after.when) for old in before.when)


def incompatibility_loosened(before, after) -> bool:
    same = {condition_key(c) for c in before.when} == {condition_key(c) for c in after.when}
    return not same and _forbids_less(before, after)


def _conditions(inc) -> str:
    return " and ".join(sorted(str(c) for c in inc.when)) or "always"


@rule("OEB024", "incompatibility-changed", requirement="REQ-VER-003", kinds="incompatibility", category="combination",
      breaks="both", bump="major",
      purpose="the conditions of an incompatibility never tighten or change within a major (their order "
              "does not matter: they are AND-ed)")
def incompatibility_changed(pair: Pair, ctx: Context):
    if not pair.kept:
        return
    before, after = pair.previous, pair.current
    if {condition_key(c) for c in before.when} == {condition_key(c) for c in after.when} \
            or _forbids_less(before, after):
        return  # unchanged, or loosened (OEB026)
    yield Change(after.loc, f"conditions of the incompatibility of {pair.cur_parent.name} "
                 f"{_with(pair.key)} changed from '{_conditions(before)}' to '{_conditions(after)}'",
                 _owner(pair), before.loc)


@rule("OEB026", "incompatibility-loosened", requirement="REQ-VER-002", kinds="incompatibility",
      category="combination", breaks="clients", bump="minor",
      purpose="an incompatibility whose conditions now forbid fewer combinations (a condition added, a "
              "threshold moved outward): like dropping it, it allows more, so servers stay conforming and "
              "only clients that relied on the combination never occurring notice; a minor version")
def incompatibility_loosened_rule(pair: Pair, ctx: Context):
    if pair.kept and incompatibility_loosened(pair.previous, pair.current):
        yield Change(pair.current.loc, f"the incompatibility of {pair.cur_parent.name} "
                     f"{_with(pair.key)} was loosened from '{_conditions(pair.previous)}' to "
                     f"'{_conditions(pair.current)}'", _owner(pair), pair.previous.loc)


# --- RPCs and messages ---------------------------------------------------------------------------

@rule("OEB031", "rpc-added", requirement="REQ-VER-002", kinds="rpc", category="rpc",
      breaks="servers", bump="minor",
      purpose="a profile may gain an RPC in a minor version")
def rpc_added(pair: Pair, ctx: Context):
    if (pair.added or _moved(pair)) and ctx.baseline is not None and ctx.baseline.profile(pair.cur_parent.name):
        yield Change(pair.current.loc, f"RPC {pair.key} was added to {pair.cur_parent.name}", pair.cur_parent.name)


@rule("OEB032", "rpc-moved", requirement="REQ-VER-003", kinds="rpc", category="rpc",
      breaks="both", bump="major",
      purpose="an RPC never moves to another profile within the major of the profile it leaves")
def rpc_moved(pair: Pair, ctx: Context):
    if _moved(pair):
        yield Change(pair.current.loc, f"RPC {pair.key} moved from {pair.prev_parent.name} to "
                     f"{pair.cur_parent.name}", pair.prev_parent.name, pair.previous.loc)


@rule("OEB033", "rpc-signature-changed", requirement="REQ-VER-003", kinds="rpc", category="rpc",
      breaks="both", bump="major",
      purpose="an RPC's request, response and streaming shape never change within a major")
def rpc_signature_changed(pair: Pair, ctx: Context):
    if not pair.kept:
        return
    packages = (ctx.baseline.package if ctx.baseline else None, ctx.current.package)
    for key in ("request", "response", "streaming"):
        before, after = getattr(pair.previous, key), getattr(pair.current, key)
        if key != "streaming":  # the short and the package-qualified spelling name one message
            before, after = type_name(before, packages[0]), type_name(after, packages[1])
        if before != after:
            yield Change(pair.current.at(key), f"{key} of RPC {pair.key} changed from {before} to {after}",
                         pair.prev_parent.name if pair.prev_parent else _owner(pair), pair.previous.at(key))


# --- limits --------------------------------------------------------------------------------------

def _type_shape(lim: Limit):
    return (lim.type.base, lim.type.repeated, lim.type.enum_name)


@rule("OEB052", "limit-type-changed", requirement="REQ-VER-003", kinds="limit", category="limit",
      breaks="both", bump="major",
      purpose="a limit's type (scalar, repeated, enum name) never changes within a major")
def limit_type_changed(pair: Pair, ctx: Context):
    if pair.kept and _type_shape(pair.previous) != _type_shape(pair.current):
        before, after = pair.previous.type, pair.current.type
        name = lambda t: f"{t} {t.enum_name}" if t.enum_name else str(t)  # noqa: E731
        yield Change(pair.current.at("type"), f"type of limit {pair.key} changed from {name(before)} to "
                     f"{name(after)}", _owner(pair), pair.previous.at("type"))


@rule("OEB054", "limit-unit-changed", requirement="REQ-VER-003", kinds="limit", category="limit",
      breaks="both", bump="major",
      purpose="a limit's unit never changes within a major")
def limit_unit_changed(pair: Pair, ctx: Context):
    if pair.kept and pair.previous.unit != pair.current.unit:
        loc = pair.current.at("unit")
        yield Change(loc, f"unit of limit {pair.key} changed from {pair.previous.unit or '(none)'} to "
                     f"{pair.current.unit or '(none)'}", _owner(pair), pair.previous.loc)


def _bound_moves(prev: Limit, cur: Limit) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(narrowings, widenings) as (key, description) lists."""
    narrow, wide = [], []
    for key, tighter in (("minimum", lambda a, b: b > a), ("maximum", lambda a, b: b < a)):
        a, b = getattr(prev, key), getattr(cur, key)
        if a == b:
            continue
        if a is None:
            narrow.append((key, f"gained {key} {b}"))
        elif b is None:
            wide.append((key, f"dropped {key} {a}"))
        elif tighter(a, b):
            narrow.append((key, f"{key} {a} -> {b}"))
        else:
            wide.append((key, f"{key} {a} -> {b}"))
    lost = [v for v in prev.type.enum_values if v not in cur.type.enum_values]
    gained = [v for v in cur.type.enum_values if v not in prev.type.enum_values]
    if lost and _type_shape(prev) == _type_shape(cur):
        narrow.append(("values", f"lost value{'s' if len(lost) > 1 else ''} {', '.join(lost)}"))
    if gained and _type_shape(prev) == _type_shape(cur):
        wide.append(("values", f"gained value{'s' if len(gained) > 1 else ''} {', '.join(gained)}"))
    return narrow, wide


def _range_moved(index: int, verb: str):
    def handler(pair: Pair, ctx: Context):
        if pair.kept:
            for key, text in _bound_moves(pair.previous, pair.current)[index]:
                yield Change(pair.current.at(key), f"range of limit {pair.key} {verb}: {text}", _owner(pair),
                             pair.previous.at(key))
    return handler


@rule("OEB058", "limit-enum-renumbered", requirement="REQ-VER-012", kinds="limit", category="limit",
      breaks="both", bump="major",
      purpose="an enum value keeps its wire number (a major may change it); a number once used never names "
              "another value (an error no bump can make legal)")
def limit_enum_renumbered(pair: Pair, ctx: Context):
    if not pair.kept or pair.previous.type.base != "enum" or pair.current.type.base != "enum":
        return
    before, after = pair.previous.type.enum_wire, pair.current.type.enum_wire
    owner_of = {number: value for value, number in before.items()}
    for index, (value, number) in enumerate(after.items()):
        loc = pair.current.at(f"values.{value}") if pair.current.type.numbered else \
            pair.current.at(f"values[{index}]")
        if value in before and before[value] != number:
            yield Change(loc, f"enum value {value} of limit {pair.key} changed its wire number from "
                         f"{before[value]} to {number}", _owner(pair), pair.previous.at("values"),
                         hint=f"give {value} its number {before[value]} back (write `values:` as a mapping "
                              "of value to number, so order never matters)")
        elif value not in before and number in owner_of:
            yield Change(loc, f"enum value {value} of limit {pair.key} reuses wire number {number}, which "
                         f"was {owner_of[number]}; old peers would read it as {owner_of[number]}", _owner(pair),
                         pair.previous.at("values"), severity=Severity.ERROR,
                         hint=f"give {value} a number never used before (above {max(owner_of)}); like proto enum "
                              "numbers, a number is never reused, not even in a new major")


# --- deprecation ---------------------------------------------------------------------------------

DEPRECATABLE = ("profile", "rpc", "message", "limit")


@rule("OEB060", "deprecated", requirement="REQ-VER-008", kinds=DEPRECATABLE, category="deprecation",
      breaks="none", bump="minor", severity=Severity.WARNING,
      purpose="deprecation is explicit and reported: an element that gains `deprecated:`")
def deprecated(pair: Pair, ctx: Context):
    if pair.kept and pair.previous.deprecated is None and pair.current.deprecated is not None:
        yield Change(pair.current.at("deprecated"), f"{pair.kind} {pair.key} is now deprecated: "
                     f"{pair.current.deprecated}", _owner(pair),
                     hint="clients should move off it before the next major removes it")


@rule("OEB061", "removed-without-deprecation", requirement="REQ-VER-008", kinds=DEPRECATABLE, category="deprecation",
      breaks="both", bump="major", severity=Severity.WARNING,
      purpose="nothing disappears silently: a removed element was deprecated in the baseline")
def removed_without_deprecation(pair: Pair, ctx: Context):
    if pair.removed and pair.previous.deprecated is None:
        if pair.kind == "rpc" and pair.prev_parent is None:
            return
        yield Change(_removed_at(pair, ctx), f"{pair.kind} {pair.key} was removed without "
                     "being deprecated first", _owner(pair), pair.previous.loc,
                     hint="deprecate it in a minor version (`deprecated: <why, what replaces it>`), "
                          "remove it in the next major")


@rule("OEB062", "undeprecated", requirement="REQ-VER-008", kinds=DEPRECATABLE, category="deprecation",
      breaks="none", bump="minor", severity=Severity.INFO,
      purpose="withdrawing a deprecation is reported")
def undeprecated(pair: Pair, ctx: Context):
    if pair.kept and pair.previous.deprecated is not None and pair.current.deprecated is None:
        yield Change(pair.current.loc, f"{pair.kind} {pair.key} is no longer deprecated", _owner(pair),
                     pair.previous.at("deprecated"))


# Rules that differ only in data. Each row: id, name, requirement, kinds, category, whom it breaks,
# the bump that makes it legal, purpose, and the handler (which change, and the text of the finding).
DATA_RULES = (
    ("OEB011", "profile-added", "REQ-VER-007", "profile", "profile", "none", "none",
     "a new profile is reported (it needs a registry revision bump, not a version bump)",
     _when_added(lambda p: f"new profile {p.current.name} {p.current.version}")),
    ("OEB014", "scope-narrowed", "REQ-VER-003", "profile", "profile", "both", "major",
     "the scope never narrows within a major (engine -> model/role, model -> role, roles removed)",
     _scope_moved(0, "narrowed")),
    ("OEB015", "scope-widened", "REQ-VER-003", "profile", "profile", "both", "major",
     "the scope kind never widens within a major (role -> model/engine, model -> engine): "
     "it moves where the capability is reported",
     _scope_moved(1, "widened")),
    ("OEB018", "capability-removed", "REQ-VER-003", "capability", "profile", "both", "major",
     "a profile keeps its capability message within a major",
     _when_removed(lambda p: f"{p.cur_parent.name} no longer has a capability message "
                             f"({p.previous.message})")),
    ("OEB019", "capability-added", "REQ-VER-002", "capability", "profile", "servers", "minor",
     "a profile may gain a capability message in a minor version",
     _when_added(lambda p: f"{p.cur_parent.name} gained capability message {p.current.message}")),
    ("OEB020", "prerequisite-added", "REQ-VER-003", "requirement", "combination", "servers", "major",
     "no new prerequisite within a major: servers advertising the profile may lack it",
     _when_added(lambda p: f"{p.cur_parent.name} now requires {p.current.profile} {p.current.range}")),
    ("OEB021", "prerequisite-changed", "REQ-VER-003", "requirement", "combination", "both", "major",
     "a prerequisite's version range never changes within a major",
     _when_changed("version", lambda p: f"{p.cur_parent.name} requirement on {p.key} changed "
                   f"from '{p.previous.range}' to '{p.current.range}'", lambda req: req.range)),
    ("OEB022", "prerequisite-removed", "REQ-VER-002", "requirement", "combination", "clients", "minor",
     "dropping a prerequisite loosens what servers may advertise: a minor version",
     _when_removed(lambda p: f"{p.prev_parent.name} no longer requires {p.previous.profile}")),
    ("OEB023", "incompatibility-added", "REQ-VER-003", "incompatibility", "combination", "servers", "major",
     "no new incompatible combination within a major: servers may already advertise it",
     _when_added(lambda p: f"{p.cur_parent.name} is now incompatible {_with(p.key)}")),
    ("OEB025", "incompatibility-removed", "REQ-VER-002", "incompatibility", "combination", "clients", "minor",
     "dropping an incompatibility allows a new combination: a minor version",
     _when_removed(lambda p: f"{p.prev_parent.name} is no longer incompatible {_with(p.key)}")),
    ("OEB030", "rpc-removed", "REQ-VER-003", "rpc", "rpc", "clients", "major",
     "an RPC stays in its profile for the whole major",
     _when_removed(lambda p: f"RPC {p.key} was removed from {p.prev_parent.name}")),
    ("OEB040", "message-removed", "REQ-VER-003", "message", "message", "clients", "major",
     "a message stays in its profile for the whole major",
     _when_removed(lambda p: f"message {p.key} was removed from {p.prev_parent.name}")),
    ("OEB041", "message-added", "REQ-VER-002", "message", "message", "servers", "minor",
     "a profile may gain a message in a minor version",
     _when_added(lambda p: f"message {p.key} was added to {p.cur_parent.name}")),
    ("OEB050", "limit-removed", "REQ-VER-003", "limit", "limit", "clients", "major",
     "a limit stays in its profile for the whole major",
     _when_removed(lambda p: f"limit {p.key} was removed from {p.prev_parent.name}")),
    ("OEB051", "limit-added", "REQ-VER-002", "limit", "limit", "servers", "minor",
     "a profile may gain a limit (with a default) in a minor version",
     _when_added(lambda p: f"limit {p.key} was added to {p.cur_parent.name}")),
    ("OEB053", "limit-field-changed", "REQ-VER-003", "limit", "limit", "both", "major",
     "a limit's field number never changes within a major",
     _when_changed("field", lambda p: f"field number of limit {p.key} changed from {p.previous.field} to "
                   f"{p.current.field}")),
    ("OEB055", "limit-default-changed", "REQ-VER-003", "limit", "limit", "both", "major",
     "a limit's default (the meaning of absence) never changes within a major",
     _when_changed("default", lambda p: f"default of limit {p.key} changed from {p.previous.default!r} to "
                   f"{p.current.default!r}", lambda limit: fingerprint(limit.default))),
    ("OEB056", "limit-range-narrowed", "REQ-VER-003", "limit", "limit", "servers", "major",
     "a limit's range never narrows within a major (raised minimum, lowered maximum, a new bound, a removed "
     "enum value)",
     _range_moved(0, "narrowed")),
    ("OEB057", "limit-range-widened", "REQ-VER-002", "limit", "limit", "clients", "minor",
     "a limit's range may widen (lower minimum, higher maximum, a dropped bound, a new enum value) in a "
     "minor version",
     _range_moved(1, "widened")),
)

RULES = [revision_not_increased, revision_decreased, version_decreased, history_rewritten, history_missing,
         since_rewritten, since_not_new_version, changed_without_version, package_changed, profile_removed,
         profile_incomplete, mandatory_changed, roles_added, capability_changed, incompatibility_changed,
         incompatibility_loosened_rule, rpc_added, rpc_moved, rpc_signature_changed, limit_type_changed,
         limit_unit_changed, limit_enum_renumbered, deprecated, removed_without_deprecation, undeprecated,
         *(rule(id, name, requirement=requirement, kinds=kinds, category=category, breaks=breaks, bump=bump,
                purpose=purpose)(handler)
           for id, name, requirement, kinds, category, breaks, bump, purpose, handler in DATA_RULES)]
