"""Generate `openengine/validate/_generated.py`: straight-line validators for capability messages.

Everything the registry knows about limits (types, defaults, ranges, enum values), profile names,
versions and scopes is inlined as constants into one function per profile, so judging a
`Capabilities` message interprets nothing at run time. Prerequisites and incompatible
combinations are not inlined: the runtime judges them with `combination_problems` of the compiled
contract, the one function the reference engine also refuses configurations with. Enum numbers and
role numbers are read from the compiled contract, never guessed. The hand-written runtime in
`openengine/validate/` calls these functions; the view model here is computed by pure functions
and `templates/validators/` only prints it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codegen.generate import GenerationContext, GenerationError, Output, Problem, header
from codegen.generate.templating import environment, render
from contractkit.naming import enum_value_prefix
from codegen.registry.model import INTEGER_BOUNDS, Limit, Profile, Registry

OUTPUT = "openengine/validate/_generated.py"
PACKAGE = "openengine.v1"


@dataclass(frozen=True)
class LimitView:
    name: str
    repeated: bool
    base: str
    default: str                      # Python literal
    checks: tuple[tuple[str, str, str, str], ...]   # (failing condition on v, rule id, expected, message)
    enum_map: str | None              # name of the generated number -> value dict


@dataclass(frozen=True)
class ProfileView:
    name: str
    func: str
    var: str
    major: int
    minor: int
    field: str | None
    message: str | None
    model_scoped: bool
    roles: tuple[int, ...]
    role_names: tuple[str, ...]
    limits: tuple[LimitView, ...]


def identifier(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z_]", "_", name)


def _literal(value) -> str:
    return repr(value)


def _limit_view(profile: Profile, limit: Limit, enum_maps: dict[str, str]) -> LimitView:
    checks: list[tuple[str, str, str, str]] = []
    base = limit.type.base
    if base in INTEGER_BOUNDS or base == "double":
        lo_type, hi_type = INTEGER_BOUNDS.get(base, (None, None))
        lo = limit.minimum if limit.minimum is not None and (lo_type is None or limit.minimum > lo_type) else None
        hi = limit.maximum if limit.maximum is not None and (hi_type is None or limit.maximum < hi_type) else None
        expected = f"{'' if limit.minimum is None else limit.minimum}..{'' if limit.maximum is None else limit.maximum}"
        parts = []
        if lo is not None:
            parts.append(f"v < {lo!r}")
        if hi is not None:
            parts.append(f"v > {hi!r}")
        if parts:
            checks.append((" or ".join(parts), "OEV111", expected,
                           f"{profile.name}.{limit.name} must be within {expected}"))
    enum_map = None
    if base == "enum":
        enum_map = enum_maps[limit.type.enum_name]
    return LimitView(limit.name, limit.type.repeated, base, _literal(limit.default), tuple(checks), enum_map)


def profile_views(registry: Registry, enum_numbers: dict[str, dict[str, int]],
                  role_numbers: dict[str, int]) -> list[ProfileView]:
    enum_maps = {name: f"_ENUM_{identifier(name).upper()}" for name in enum_numbers}
    var_of = {p.name: f"e_{identifier(p.name)}" for p in registry.profiles}
    views = []
    for p in registry.profiles:
        roles = tuple(role_numbers[f"ROLE_{r.upper()}"] for r in p.scope.roles) if p.scope.kind == "role" else ()
        views.append(ProfileView(
            name=p.name, func=identifier(p.name), var=var_of[p.name], major=p.version.major,
            minor=p.version.minor, field=p.capability.field if p.capability else None,
            message=p.capability.message if p.capability else None,
            model_scoped=p.scope.kind == "model", roles=roles, role_names=p.scope.roles,
            limits=tuple(_limit_view(p, lim, enum_maps) for lim in p.limits)))
    return views


def _enums(registry: Registry, fds) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Registry enum value -> wire number, per limit enum; and Role value name -> number."""
    wire: dict[str, dict[str, int]] = {}
    declared_in: dict[str, str] = {}
    for f in fds.file:
        if f.package != PACKAGE:
            continue
        for e in f.enum_type:
            wire[e.name] = {v.name: v.number for v in e.value}
            declared_in[e.name] = f"proto/{f.name}"
    numbers: dict[str, dict[str, int]] = {}
    problems: list[Problem] = []
    for p in registry.profiles:
        for lim in p.limits:
            if lim.type.base != "enum":
                continue
            values = wire.get(lim.type.enum_name)
            if values is None:
                problems.append(Problem(registry.path, lim.locs.get("values", lim.loc),
                                        f"enum {lim.type.enum_name} of {p.name}.{lim.name} is not in the compiled "
                                        "contract", "run the proto generator too (oespec generate without --only)"))
                continue
            prefix = enum_value_prefix(lim.type.enum_name)
            mapping = {}
            for value in lim.type.enum_values:
                number = values.get(prefix + value.upper())
                if number is None:
                    problems.append(Problem(registry.path, lim.locs.get("values", lim.loc),
                                            f"{lim.type.enum_name} has no value {prefix + value.upper()}",
                                            "run the proto generator too (oespec generate without --only)"))
                    continue
                mapping[value] = number
            numbers[lim.type.enum_name] = mapping
    roles = wire.get("Role")
    if roles is None:
        problems.append(Problem(registry.path, registry.loc, "enum Role (the engine roles that role-scoped "
                                "profiles name) is not declared by any proto of openengine.v1",
                                "declare enum Role with ROLE_<NAME> values in proto/openengine/v1/common.proto"))
    else:
        where = declared_in.get("Role", "proto")
        for p in registry.profiles:
            for index, role in enumerate(p.scope.roles if p.scope.kind == "role" else ()):
                if f"ROLE_{role.upper()}" not in roles:
                    problems.append(Problem(
                        registry.path, p.locs.get(f"roles[{index}]", p.locs.get("roles", p.loc)),
                        f"{p.name} names role {role}, but enum Role in {where} has no ROLE_{role.upper()} "
                        f"(it has {', '.join(sorted(roles)) or 'no values'})",
                        f"restore ROLE_{role.upper()} in {where} (a wire value is never renamed or removed), "
                        "or stop naming the role here"))
    if problems:
        raise GenerationError("validators", "the registry names enum values the contract lacks", problems=problems)
    return numbers, roles


def descriptor_set(ctx: GenerationContext):
    """The compiled contract, shared by the generators that read descriptors."""
    return ctx.compiled("validators")[0]


def render_module(registry: Registry, enum_numbers, role_numbers) -> str:
    environment().filters.setdefault("pyrepr", repr)
    views = profile_views(registry, enum_numbers, role_numbers)
    enum_maps = {f"_ENUM_{identifier(name).upper()}": {num: value for value, num in mapping.items()}
                 for name, mapping in enum_numbers.items()}
    return render("validators/_generated.py.j2", header=header("#"), registry=registry, profiles=views,
                  enum_maps=enum_maps,
                  model_profiles=[v for v in views if v.model_scoped and v.field])


def generate(ctx: GenerationContext) -> list[Output]:
    fds = descriptor_set(ctx)
    enum_numbers, role_numbers = _enums(ctx.registry, fds)
    return [Output(OUTPUT, render_module(ctx.registry, enum_numbers, role_numbers))]
