"""Scope and the mandatory core."""

from __future__ import annotations

from oespec.check.rule import CheckContext, Finding, rule
from oespec.registry.model import ROLES, STANDARD_PREFIX

CORE_NAME = STANDARD_PREFIX + "core"


@rule("OE014", "scope-roles", requirements=("REQ-ADD-003",), category="scope",
      purpose="a role-scoped profile lists the roles it applies to (once each); other scopes list none")
def scope_roles(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        roles = profile.scope.roles
        if profile.scope.kind == "role" and not roles:
            yield Finding(profile.at("scope"), f"{profile.name}: role scope without roles",
                          f"add `roles:` with some of: {', '.join(ROLES)}")
        elif profile.scope.kind != "role" and roles:
            yield Finding(profile.at("roles"), f"{profile.name}: {profile.scope.kind} scope lists roles",
                          "remove `roles:`, or set `scope: role`")
        seen = set()
        for index, role in enumerate(roles):
            if role in seen:
                yield Finding(profile.at(f"roles[{index}]"), f"{profile.name}: role {role!r} is listed twice",
                              "list each role once")
            seen.add(role)


@rule("OE015", "single-core", requirements=("REQ-ADD-001",), category="scope",
      purpose=f"exactly one profile is mandatory, and it is {CORE_NAME}")
def single_core(ctx: CheckContext):
    registry = ctx.registry
    mandatory = [p for p in registry.profiles if p.mandatory]
    for profile in mandatory:
        if profile.name != CORE_NAME:
            yield Finding(profile.at("mandatory"), f"{profile.name} is mandatory; only {CORE_NAME} may be",
                          "remove `mandatory: true`; optional behaviour belongs in an optional profile")
    named = registry.profile(CORE_NAME)
    if named is not None and all(p.name != CORE_NAME for p in mandatory):
        yield Finding(named.at("name"), f"{CORE_NAME} is not marked mandatory",
                      "add `mandatory: true` to the core profile")
    elif named is None and not mandatory:
        yield Finding(registry.at("profiles"), f"the registry has no {CORE_NAME} profile",
                      f"add the mandatory core profile {CORE_NAME} with `mandatory: true`")


@rule("OE016", "core-shape", requirements=("REQ-ADD-001",), category="scope",
      purpose="the mandatory core is engine-scoped, requires nothing and is never deprecated")
def core_shape(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        # Another profile marked mandatory is OE015's finding, not a misshapen core.
        if profile.name != CORE_NAME:
            continue
        if profile.scope.kind != "engine":
            yield Finding(profile.at("scope"), f"{profile.name}: the core must be engine-scoped, not {profile.scope.kind}",
                          "set `scope: engine`; every engine serves the core as a whole")
        if profile.requires:
            yield Finding(profile.at("requires"), f"{profile.name}: the core cannot require other profiles",
                          "remove the requirement; whatever the core needs belongs in the core")
        if profile.deprecated is not None:
            yield Finding(profile.at("deprecated"), f"{profile.name}: the core cannot be deprecated",
                          "deprecate the RPCs, messages or limits inside it instead")


RULES = [scope_roles, single_core, core_shape]
