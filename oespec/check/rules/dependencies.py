"""Prerequisites (`requires`) and forbidden combinations (`incompatible_with`)."""

from __future__ import annotations

import math

from oespec.check.rule import CheckContext, Finding, rule
from oespec.check.rules._common import prerequisites, profiles_by_name, repeats
from oespec.check.rules.limits import NUMERIC, _show
from openengine.contractkit.rules import Severity
from oespec.registry.model import INTEGER_BOUNDS


def _required(ctx: CheckContext):
    """(profile, requirement, the required profile or None) for every `requires` entry."""
    by_name = profiles_by_name(ctx.registry)
    return [(p, req, by_name.get(req.profile)) for p in ctx.registry.profiles for req in p.requires]


@rule("OE035", "requires-known", requirements=("REQ-ADD-007",), category="dependencies",
      purpose="`requires` names existing profiles other than the profile itself")
def requires_known(ctx: CheckContext):
    for profile, req, target in _required(ctx):
        if req.profile == profile.name:
            yield Finding(req.at("profile"), f"{profile.name} requires itself", "remove the requirement")
        elif target is None:
            yield Finding(req.at("profile"), f"{profile.name} requires {req.profile!r}, which is not in the registry",
                          "name an existing profile by its canonical name, e.g. openengine.core")


@rule("OE036", "duplicate-requirement", requirements=("REQ-ADD-007",), category="dependencies",
      purpose="a profile requires each other profile at most once (one range says it all)")
def duplicate_requirement(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        for req, line in repeats(profile.requires, lambda r: r.profile, lambda r: r.at("profile").line):
            yield Finding(req.at("profile"),
                          f"{profile.name} requires {req.profile} again (first at line {line})",
                          "merge the ranges into one comparator list, e.g. '>= 1.2, < 2.0'")


@rule("OE037", "requires-satisfiable", requirements=("REQ-ADD-007",), category="dependencies",
      purpose="every required version range admits the required profile's current version")
def requires_satisfiable(ctx: CheckContext):
    for profile, req, target in _required(ctx):
        if target is not None and not req.range.contains(target.version):
            yield Finding(req.at("version"),
                          f"{profile.name} requires {req.profile} {req.range}, but {req.profile} is at {target.version}",
                          f"widen the range so it admits {target.version}, e.g. '>= {target.version.major}.0'")


@rule("OE038", "requires-cycle", requirements=("REQ-ADD-007",), category="dependencies",
      purpose="prerequisites form no cycle (a profile cannot, even indirectly, require itself)")
def requires_cycle(ctx: CheckContext):
    by_name = profiles_by_name(ctx.registry)
    state: dict[str, str] = {}     # name -> "open" while on the current path, "done" after
    # Depth-first, with an explicit stack so a long chain of prerequisites cannot exhaust recursion.
    for start in by_name:
        if start in state:
            continue
        path: list[str] = [start]
        pending = [iter(by_name[start].requires)]
        state[start] = "open"
        while pending:
            req = next(pending[-1], None)
            if req is None:
                pending.pop()
                state[path.pop()] = "done"
                continue
            # Self-requirements and unknown names are OE035's findings.
            if req.profile == path[-1] or req.profile not in by_name:
                continue
            if state.get(req.profile) == "open":
                cycle = path[path.index(req.profile):] + [req.profile]
                yield Finding(req.at("profile"), "prerequisites form a cycle: " + " -> ".join(cycle),
                              "remove one requirement of the cycle; shared needs belong in the lower profile")
            elif req.profile not in state:
                state[req.profile] = "open"
                path.append(req.profile)
                pending.append(iter(by_name[req.profile].requires))


@rule("OE039", "standard-requires-vendor", category="dependencies",
      purpose="a standard profile never requires a vendor profile")
def standard_requires_vendor(ctx: CheckContext):
    for profile, req, target in _required(ctx):
        if profile.standard and target is not None and not target.standard:
            yield Finding(req.at("profile"), f"standard profile {profile.name} requires vendor profile {req.profile}",
                          "standardise the prerequisite first, or make this a vendor profile")


@rule("OE040", "requires-deprecated", requirements=("REQ-VER-008",), severity=Severity.WARNING, category="dependencies",
      purpose="a profile that is not deprecated does not require a deprecated one")
def requires_deprecated(ctx: CheckContext):
    for profile, req, target in _required(ctx):
        if profile.deprecated is None and target is not None and target.deprecated is not None:
            yield Finding(req.at("profile"), f"{profile.name} requires deprecated profile {req.profile}",
                          f"move to what replaces it ({target.deprecated.strip()})")


@rule("OE041", "incompatible-known-profile", requirements=("REQ-ADD-008",), category="dependencies",
      purpose="`incompatible_with` names existing profiles other than the profile itself")
def incompatible_known_profile(ctx: CheckContext):
    by_name = profiles_by_name(ctx.registry)
    for profile in ctx.registry.profiles:
        for entry in profile.incompatible_with:
            if entry.profile is None:
                continue
            if entry.profile == profile.name:
                yield Finding(entry.at("profile"), f"{profile.name} is declared incompatible with itself",
                              "to forbid a combination of its own limits, omit `profile` and use `when`")
            elif entry.profile not in by_name:
                yield Finding(entry.at("profile"),
                              f"{profile.name} is incompatible with {entry.profile!r}, which is not in the registry",
                              "name an existing profile by its canonical name")


def _conditions(ctx: CheckContext):
    """(profile, condition, the profile and the limit it names, each None when unknown) for every
    `when` condition."""
    by_name = profiles_by_name(ctx.registry)
    for profile in ctx.registry.profiles:
        for entry in profile.incompatible_with:
            for condition in entry.when:
                target = by_name.get(condition.profile)
                limit = target.limit(condition.limit) if target is not None else None
                yield profile, condition, target, limit


@rule("OE042", "condition-known-limit", requirements=("REQ-ADD-008",), category="dependencies",
      purpose="every `when` condition names an existing limit as <profile>.<limit>")
def condition_known_limit(ctx: CheckContext):
    for profile, condition, target, limit in _conditions(ctx):
        if target is None:
            yield Finding(condition.at("limit"),
                          f"{profile.name}: condition on {condition.reference!r} names no profile of the registry",
                          "write the limit as <profile>.<limit>, e.g. openengine.core.speculative_decoding")
        elif limit is None:
            yield Finding(condition.at("limit"), f"{profile.name}: {condition.profile} has no limit {condition.limit!r}",
                          f"use one of: {', '.join(lim.name for lim in target.limits) or '(it has no limits)'}")


def _value_problem(limit, operator: str, value) -> str | None:
    ltype = limit.type
    if operator in ("equals", "not_equals"):
        if ltype.accepts(value):
            return None
        return f"{_show(value)} is not a {ltype}" + (" (write a list)" if ltype.repeated else "")
    if operator == "contains":
        if not ltype.repeated:
            return f"`contains` needs a repeated limit, and {limit.name} is {ltype}"
        return None if ltype.element_accepts(value) else f"{_show(value)} is not a {ltype.base}"
    # at_least / at_most
    if ltype.repeated or ltype.base not in NUMERIC:
        return f"`{operator}` needs a numeric limit, and {limit.name} is {ltype}"
    return None if ltype.element_accepts(value) else f"{_show(value)} is not a {ltype.base}"


@rule("OE043", "condition-value-type", requirements=("REQ-ADD-008",), category="dependencies",
      purpose="a condition's operator suits the limit and its value has the limit's type")
def condition_value_type(ctx: CheckContext):
    for profile, condition, _, limit in _conditions(ctx):
        if limit is None:
            continue  # OE042
        problem = _value_problem(limit, condition.operator, condition.value)
        if problem:
            values = f" (one of: {', '.join(limit.type.enum_values)})" if limit.type.base == "enum" else ""
            yield Finding(condition.at(condition.operator),
                          f"{profile.name}: condition on {condition.reference}: {problem}",
                          f"compare {condition.reference} with a {limit.type} value{values}")


@rule("OE044", "incompatible-contradicts-requires", requirements=("REQ-ADD-008",), category="dependencies",
      purpose="no profile is incompatible with a profile that it, or any profile needing both, requires "
              "(directly or through prerequisites; the core is always present)")
def incompatible_contradicts_requires(ctx: CheckContext):
    registry = ctx.registry
    by_name = profiles_by_name(registry)
    blocked: dict[int, tuple[object, str, list[str]]] = {}   # id(entry) -> (entry, owner, blocked profiles)
    for name in by_name:
        together = {name} | prerequisites(registry, name, by_name)
        for member in sorted(together):
            for entry in by_name[member].incompatible_with:
                # Conditional incompatibilities can be avoided by configuration, so they contradict nothing.
                if entry.profile is None or entry.when or entry.profile == member or entry.profile not in together:
                    continue
                blocked.setdefault(id(entry), (entry, member, []))[2].append(name)
    for entry, owner, names in blocked.values():
        yield Finding(entry.at("profile"),
                      f"{owner} is incompatible with {entry.profile}, yet {', '.join(sorted(names))} cannot be "
                      f"advertised without both (through requires; the core is always present)",
                      "remove the incompatibility, or the requirement that brings the two together")


def _domain(limit) -> tuple[float, float] | None:
    """The values a scalar numeric limit can take: its range, else what its type holds."""
    if limit.type.repeated or limit.type.base not in NUMERIC:
        return None
    lo_type, hi_type = INTEGER_BOUNDS.get(limit.type.base, (-math.inf, math.inf))
    lo = limit.minimum if limit.minimum is not None else lo_type
    hi = limit.maximum if limit.maximum is not None else hi_type
    return lo, hi


def _vacuity(limit, condition) -> str | None:
    """'never' or 'always' when the condition's truth does not depend on the engine, else None."""
    domain = _domain(limit)
    if domain is None or _value_problem(limit, condition.operator, condition.value):
        return None
    lo, hi = domain
    value, op = condition.value, condition.operator
    if op == "at_least":
        return "never" if value > hi else "always" if value <= lo else None
    if op == "at_most":
        return "never" if value < lo else "always" if value >= hi else None
    if op == "equals":
        return "never" if not lo <= value <= hi else None
    if op == "not_equals":
        return "always" if not lo <= value <= hi else None
    return None


def _vacuous(kind: str, verb: str, hint: str):
    """A rule reporting the conditions that hold `kind` ('never' or 'always'), whatever the engine says."""
    def handler(ctx: CheckContext):
        for profile, condition, _, limit in _conditions(ctx):
            if limit is not None and _vacuity(limit, condition) == kind:
                lo, hi = _domain(limit)
                yield Finding(condition.at(condition.operator), f"{profile.name}: condition {condition} {verb}: "
                              f"{condition.reference} lies in [{_show(lo)}, {_show(hi)}]", hint)
    return handler


condition_never_holds = rule(
    "OE047", "condition-never-holds", severity=Severity.WARNING, category="dependencies", requirements=("REQ-ADD-008",),
    purpose="a `when` condition can hold for some value of its limit (else the incompatibility never applies)",
)(_vacuous("never", "can never hold", "compare with a value inside the limit's range, or remove the incompatibility"))
condition_always_holds = rule(
    "OE048", "condition-always-holds", severity=Severity.WARNING, category="dependencies", requirements=("REQ-ADD-008",),
    purpose="a `when` condition does not hold for every value of its limit (else it is no condition)",
)(_vacuous("always", "always holds", "drop the condition (the rest of the incompatibility says the same), "
                                     "or compare with a value inside the range"))


RULES = [requires_known, duplicate_requirement, requires_satisfiable, requires_cycle,
         standard_requires_vendor, requires_deprecated, incompatible_known_profile, condition_known_limit,
         condition_value_type, incompatible_contradicts_requires, condition_never_holds, condition_always_holds]
