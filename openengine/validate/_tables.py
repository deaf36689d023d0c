"""The capability rules as data, and the small interpreter that applies them.

Limits (type, default, range, enum values), profile names, versions, scopes and roles are read
once from the compiled descriptors (`openengine.contract`); prerequisites and incompatible
combinations are judged afterwards by the contract's `combination_problems` (`_capabilities`), so
nothing here is generated and nothing repeats the registry. Everything the interpreter needs per
limit (its kind, bounds, enum map) is decided once when the tables are built, so the per-message
loop is a presence test and one comparison per set limit (bench/results.md, Validators).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from openengine.contractkit import naming
from openengine import contract
from openengine.v1 import capabilities_pb2
from openengine.validate._rules import violation

_INF = float("inf")
# Limit kinds, decided once per field so the per-message loop is one comparison.
_PLAIN, _RANGE, _ENUM, _LIST, _ENUM_LIST = range(5)


@dataclass(frozen=True, slots=True)
class LimitRule:
    """How one limit field is judged and turned into its effective value."""

    name: str
    reference: str                 # openengine.core.max_logprobs
    kind: int
    default: Any
    low: float                     # -inf / inf when unbounded (or bounded by the type itself)
    high: float
    expected: str                  # `1..1024`, or the enum's `one of ...`
    enum: Mapping[int, str] | None  # wire number -> registry spelling


@dataclass(frozen=True, slots=True)
class ProfileRule:
    name: str
    version: tuple[int, int]
    field: str | None              # its field in Capabilities (and ModelCapabilities)
    model_scoped: bool
    roles: tuple[int, ...]         # EngineRole numbers that may advertise it (role-scoped profiles only)
    role_text: str                 # `role prefill or decode`
    limits: Mapping[str, LimitRule]
    defaults: Mapping[str, Any]
    list_limits: tuple[str, ...]   # defaults that are lists, copied per use so callers may mutate
    by_field: Mapping[Any, LimitRule]   # field descriptor -> its rule, for what ListFields returns

    def fresh_defaults(self) -> dict[str, Any]:
        effective = dict(self.defaults)
        for name in self.list_limits:
            effective[name] = list(effective[name])
        return effective


@dataclass(frozen=True, slots=True)
class Tables:
    profiles: tuple[ProfileRule, ...]
    by_name: Mapping[str, ProfileRule]
    with_field: tuple[ProfileRule, ...]
    model_fields: tuple[ProfileRule, ...]
    by_capability_field: Mapping[Any, ProfileRule]   # Capabilities field descriptor -> its profile


def _limit_rule(lim: contract.LimitInfo) -> LimitRule:
    default = lim.default if lim.default is not None or lim.repeated else None
    if lim.enum is not None:
        enum = {number: spelling for spelling, number in lim.enum_spellings().items()}
        text = "one of " + ", ".join(enum.values())
        return LimitRule(lim.name, lim.reference, _ENUM_LIST if lim.repeated else _ENUM, default,
                         -_INF, _INF, text, enum)
    if lim.repeated:
        return LimitRule(lim.name, lim.reference, _LIST, default, -_INF, _INF, "", None)
    if lim.kind in ("int", "uint", "double") and (lim.minimum is not None or lim.maximum is not None):
        expected = f"{'' if lim.minimum is None else lim.minimum}..{'' if lim.maximum is None else lim.maximum}"
        low = -_INF if lim.minimum is None else lim.minimum
        high = _INF if lim.maximum is None else lim.maximum
        return LimitRule(lim.name, lim.reference, _RANGE, default, low, high, expected, None)
    return LimitRule(lim.name, lim.reference, _PLAIN, default, -_INF, _INF, "", None)


@lru_cache(maxsize=1)
def tables() -> Tables:
    """Every profile's rule, read from the descriptors once per process."""
    roles = contract.role_numbers()
    built = []
    for p in contract.catalogue().profiles:
        limits = {lim.name: _limit_rule(lim) for lim in p.limits}
        defaults = {name: rule.default for name, rule in limits.items()}
        role_numbers = tuple(roles[r] for r in p.roles) if p.scope == "role" else ()
        built.append(ProfileRule(
            p.name, p.version, p.capability_field, p.scope == "model", role_numbers,
            "role " + " or ".join(p.roles), limits, defaults,
            tuple(n for n, rule in limits.items() if rule.kind in (_LIST, _ENUM_LIST)),
            {lim.field: limits[lim.name] for lim in p.limits}))
    by_name = {p.name: p for p in built}
    with_field = tuple(p for p in built if p.field)
    fields = capabilities_pb2.Capabilities.DESCRIPTOR.fields_by_name
    return Tables(tuple(built), by_name, with_field, tuple(p for p in with_field if p.model_scoped),
                  {fields[p.field]: p for p in with_field})


# -- limits ---------------------------------------------------------------------------------------

def effective_limits(rule: ProfileRule, msg, path: str, out: list, *, fresh: bool = True) -> dict[str, Any]:
    """Effective limits of one capability message (None: every default), reporting OEV111/OEV112.

    One `ListFields()` call yields exactly the limits the message sets (proto3 presence), so the
    cost follows what an engine advertises, not how many limits the profile declares. With
    `fresh` false the defaults of an unset message are the shared table itself and list defaults
    are not copied: for callers that only read the result (`check_capabilities`)."""
    if msg is None:
        return rule.fresh_defaults() if fresh else rule.defaults
    effective = rule.fresh_defaults() if fresh else dict(rule.defaults)
    by_field = rule.by_field
    for field, v in msg.ListFields():
        lim = by_field.get(field)
        if lim is None:
            continue
        kind = lim.kind
        if kind == _PLAIN:
            effective[lim.name] = v
        elif kind == _RANGE:
            effective[lim.name] = v
            if v < lim.low or v > lim.high:
                out.append(violation("OEV111", f"{path}.{lim.name}", v, lim.expected,
                                     f"{lim.reference} must be within {lim.expected}"))
        elif kind == _LIST:
            effective[lim.name] = list(v)
        elif kind == _ENUM:
            spelled = lim.enum.get(v)
            if spelled is None:
                out.append(violation("OEV112", f"{path}.{lim.name}", v, lim.expected,
                                     f"{lim.reference} holds a value the registry does not define"))
            else:
                effective[lim.name] = spelled
        else:
            effective[lim.name] = _enum_list(lim, v, path, out)
    return effective


def _enum_list(lim: LimitRule, numbers, path: str, out: list) -> list[str]:
    names = []
    enum = lim.enum
    for i, number in enumerate(numbers):
        spelled = enum.get(number)
        if spelled is None:
            out.append(violation("OEV112", f"{path}.{lim.name}[{i}]", number, lim.expected,
                                 f"{lim.reference} holds a value the registry does not define"))
        else:
            names.append(spelled)
    return names


REGISTRY_REVISION: int = contract.catalogue().registry_revision


# -- the profile list -----------------------------------------------------------------------------

def check_profiles(profiles, path: str, out: list) -> dict[str, list[tuple[int, int]]]:
    """Advertised profile name -> list of (major, minor), checking names, majors and duplicates.
    An entry's findings come in the order a reader meets them: its form, a repeat, then the registry."""
    advertised: dict[str, list[tuple[int, int]]] = {}
    seen = set()
    known = tables().by_name
    for i, p in enumerate(profiles):
        name, major, minor = p.name, p.major, p.minor
        if _canonical(name) is None:
            out.append(violation("OEV102", f"{path}[{i}].name", name, "lower-case dotted name such as openengine.load",
                                 "profile name is empty or not canonical"))
        if major < 1:
            out.append(violation("OEV103", f"{path}[{i}].major", major, ">= 1", "major version must be at least 1"))
        key = (name, major)
        if key in seen:
            out.append(violation("OEV104", f"{path}[{i}]", f"{name} {major}", "each (name, major) once",
                                 f"{name} major {major} is advertised more than once"))
        else:
            seen.add(key)
        if name.startswith(contract.STANDARD_PREFIX):
            rule = known.get(name)
            if rule is None:
                out.append(violation("OEV105", f"{path}[{i}].name", name,
                                     f"a profile of registry revision {REGISTRY_REVISION}",
                                     f"{name} is not a standard profile this validator knows "
                                     "(a typo, or a newer profile)"))
            elif major != rule.version[0] and major >= 1:
                out.append(violation("OEV106", f"{path}[{i}].major", major, str(rule.version[0]),
                                     f"{name} has no major version {major} in the registry "
                                     f"(known: {rule.version[0]}.{rule.version[1]})"))
        advertised.setdefault(name, []).append((major, minor))
    return advertised


_canonical = re.compile(naming.CANONICAL_NAME).match


# -- whole messages --------------------------------------------------------------------------------

def check_capabilities(caps, out: list, *, complete: bool = True):
    """Judge a Capabilities message. Returns (advertised profiles, effective limits per profile).
    One `ListFields()` call finds the capability messages that are set. With `complete` false the
    limits hold only the profiles whose message is set, with list defaults shared, not copied:
    enough for `combination_problems`, which takes a left-out limit as its default, and for
    callers that only want the violations."""
    table = tables()
    advertised = check_profiles(caps.profiles, "profiles", out)
    if contract.CORE not in advertised:
        out.append(violation("OEV101", "profiles", None, contract.CORE, f"{contract.CORE} is not advertised"))
    by_field = table.by_capability_field
    limits = {}
    for field, msg in caps.ListFields():     # field-number order, which is contract order
        rule = by_field.get(field)
        if rule is None:
            continue
        if rule.name not in advertised:
            out.append(violation("OEV110", rule.field, None, f"{rule.name} in profiles",
                                 f"{rule.field} is set but {rule.name} is not advertised"))
        limits[rule.name] = effective_limits(rule, msg, rule.field, out, fresh=complete)
    if complete:
        limits = {rule.name: limits[rule.name] if rule.name in limits else rule.fresh_defaults()
                  for rule in table.with_field}
    return advertised, limits


def check_model_capabilities(model_capabilities, path: str, advertised, out: list):
    """Judge one Capabilities.models entry against the engine's advertised profiles. Returns
    (profiles the model lists, effective limits of the model-scoped messages it sets)."""
    table = tables()
    model_advertised = check_profiles(model_capabilities.profiles, path + ".profiles", out)
    for i, p in enumerate(model_capabilities.profiles):
        name = p.name
        rule = table.by_name.get(name)
        if rule is not None and not rule.model_scoped:
            out.append(violation("OEV133", f"{path}.profiles[{i}].name", name, "a model-scoped profile",
                                 f"{name} is not model-scoped and belongs in Capabilities only"))
        if name not in advertised:
            out.append(violation("OEV131", f"{path}.profiles[{i}].name", name, "also in Capabilities.profiles",
                                 f"the model lists {name} but the engine does not advertise it"))
    effective = {}
    for rule in table.model_fields:
        if not model_capabilities.HasField(rule.field):
            continue
        if rule.name not in model_advertised:
            out.append(violation("OEV132", f"{path}.{rule.field}", None, f"{rule.name} in the model's profiles",
                                 f"{rule.field} is set but the model does not list {rule.name}"))
        effective[rule.name] = effective_limits(rule, getattr(model_capabilities, rule.field),
                                                f"{path}.{rule.field}", out)
    return model_advertised, effective


def check_role(advertised, role: int, role_name: str, out: list) -> None:
    """Role-scoped profiles advertised by an engine whose ServerInfo.engine_role does not allow them."""
    for rule in tables().profiles:
        if rule.roles and rule.name in advertised and role not in rule.roles:
            out.append(violation("OEV130", "profiles", role_name, rule.role_text,
                                 f"{rule.name} is advertised by an engine whose role is {role_name}"))


# -- the public constants, derived from the same tables -------------------------------------------

_TABLES = tables()
MODEL_SCOPED: frozenset[str] = frozenset(p.name for p in _TABLES.profiles if p.model_scoped)
DEFAULTS: dict[str, dict[str, Any]] = {p.name: p.fresh_defaults() for p in _TABLES.profiles}
