"""The capability rules as data, and the small interpreter that applies them.

Limits (type, default, range, enum values), profile names, versions, scopes and roles are read
once from the compiled descriptors (`openengine.contract`); prerequisites and incompatible
combinations are judged afterwards by the contract's `combination_problems` (`_capabilities`), so
nothing here is generated and nothing repeats the registry. Everything the interpreter needs per limit (its kind, bounds,
enum map) is decided once when the tables are built, so the per-message loop is a presence test
and one comparison per set limit, close to the unrolled per-profile code it replaces
(bench/results.md, Validators).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from contractkit import naming
from openengine import contract
from openengine.validate._rules import violation as _v

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
    field: str | None              # its field in Capabilities / ModelInfo.capabilities
    model_scoped: bool
    roles: tuple[int, ...]         # Role numbers that may advertise it (role-scoped profiles only)
    role_text: str                 # `role prefill or decode`
    limits: Mapping[str, LimitRule]
    plain: tuple[str, ...]          # the limits grouped by how they are judged
    ranged: tuple[LimitRule, ...]
    lists: tuple[str, ...]
    enums: tuple[LimitRule, ...]
    defaults: Mapping[str, Any]
    list_limits: tuple[str, ...]   # defaults that are lists, copied per use so callers may mutate

    def fresh_defaults(self) -> dict[str, Any]:
        eff = dict(self.defaults)
        for name in self.list_limits:
            eff[name] = list(eff[name])
        return eff


@dataclass(frozen=True, slots=True)
class Tables:
    profiles: tuple[ProfileRule, ...]
    by_name: Mapping[str, ProfileRule]
    with_field: tuple[ProfileRule, ...]
    model_fields: tuple[ProfileRule, ...]


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
            "role " + " or ".join(p.roles), limits,
            tuple(n for n, r in limits.items() if r.kind == _PLAIN),
            tuple(r for r in limits.values() if r.kind == _RANGE),
            tuple(n for n, r in limits.items() if r.kind == _LIST),
            tuple(r for r in limits.values() if r.kind in (_ENUM, _ENUM_LIST)), defaults,
            tuple(n for n, rule in limits.items() if rule.kind in (_LIST, _ENUM_LIST))))
    by_name = {p.name: p for p in built}
    with_field = tuple(p for p in built if p.field)
    return Tables(tuple(built), by_name, with_field, tuple(p for p in with_field if p.model_scoped))


# -- limits ---------------------------------------------------------------------------------------

def effective_limits(rule: ProfileRule, msg, path: str, out: list) -> dict[str, Any]:
    """Effective limits of one capability message (None: every default), reporting OEV111/OEV112.
    Limits are grouped by kind when the tables are built, so each loop below does one presence
    test (HasField, or a non-empty list) and at most one comparison per limit."""
    eff = rule.fresh_defaults()
    if msg is None:
        return eff
    has = msg.HasField
    for name in rule.plain:
        if has(name):
            eff[name] = getattr(msg, name)
    for lim in rule.ranged:
        name = lim.name
        if has(name):
            v = eff[name] = getattr(msg, name)
            if v < lim.low or v > lim.high:
                out.append(_v("OEV111", f"{path}.{name}", v, lim.expected,
                              f"{lim.reference} must be within {lim.expected}"))
    for name in rule.lists:
        v = getattr(msg, name)
        if v:
            eff[name] = list(v)
    for lim in rule.enums:
        name = lim.name
        if lim.kind == _ENUM:
            if has(name):
                v = getattr(msg, name)
                spelled = lim.enum.get(v)
                if spelled is None:
                    out.append(_v("OEV112", f"{path}.{name}", v, lim.expected,
                                  f"{lim.reference} holds a value the registry does not define"))
                else:
                    eff[name] = spelled
            continue
        v = getattr(msg, name)
        if not v:
            continue
        names = []
        for i, number in enumerate(v):
            spelled = lim.enum.get(number)
            if spelled is None:
                out.append(_v("OEV112", f"{path}.{name}[{i}]", number, lim.expected,
                              f"{lim.reference} holds a value the registry does not define"))
            else:
                names.append(spelled)
        eff[name] = names
    return eff


REGISTRY_REVISION: int = contract.catalogue().registry_revision


# -- the profile list -----------------------------------------------------------------------------

def check_profiles(profiles, path: str, out: list) -> dict[str, list[tuple[int, int]]]:
    """Advertised profile name -> list of (major, minor), checking names, majors and duplicates."""
    known = tables().by_name
    canonical = _canonical
    adv: dict[str, list[tuple[int, int]]] = {}
    seen = set()
    for i, p in enumerate(profiles):
        name, major, minor = p.name, p.major, p.minor
        if canonical(name) is None:
            out.append(_v("OEV102", f"{path}[{i}].name", name, "lower-case dotted name such as openengine.load",
                          "profile name is empty or not canonical"))
        if major < 1:
            out.append(_v("OEV103", f"{path}[{i}].major", major, ">= 1", "major version must be at least 1"))
        key = (name, major)
        if key in seen:
            out.append(_v("OEV104", f"{path}[{i}]", f"{name} {major}", "each (name, major) once",
                          f"{name} major {major} is advertised more than once"))
        seen.add(key)
        adv.setdefault(name, []).append((major, minor))
        if name.startswith(contract.STANDARD_PREFIX):
            rule = known.get(name)
            if rule is None:
                out.append(_v("OEV105", f"{path}[{i}].name", name,
                              f"a profile of registry revision {REGISTRY_REVISION}",
                              f"{name} is not a standard profile this validator knows (a typo, or a newer profile)"))
            elif major != rule.version[0] and major >= 1:
                out.append(_v("OEV106", f"{path}[{i}].major", major, str(rule.version[0]),
                              f"{name} has no major version {major} in the registry "
                              f"(known: {rule.version[0]}.{rule.version[1]})"))
    return adv


_canonical = re.compile(naming.CANONICAL_NAME).match


# -- whole messages --------------------------------------------------------------------------------

def check_capabilities(caps, out: list):
    """Judge a Capabilities message. Returns (advertised profiles, effective limits per profile)."""
    t = tables()
    adv = check_profiles(caps.profiles, "profiles", out)
    if contract.CORE not in adv:
        out.append(_v("OEV101", "profiles", None, contract.CORE, f"{contract.CORE} is not advertised"))
    has = caps.HasField
    limits = {}
    for rule in t.with_field:
        msg = getattr(caps, rule.field) if has(rule.field) else None
        if msg is not None and rule.name not in adv:
            out.append(_v("OEV110", rule.field, None, f"{rule.name} in profiles",
                          f"{rule.field} is set but {rule.name} is not advertised"))
        limits[rule.name] = effective_limits(rule, msg, rule.field, out)
    return adv, limits


def check_model_capabilities(mc, path: str, adv, out: list):
    """Judge one ModelInfo.capabilities against the engine's advertised profiles. Returns (profiles
    the model lists, effective limits of the model-scoped messages it sets)."""
    t = tables()
    madv = check_profiles(mc.profiles, path + ".profiles", out)
    for i, p in enumerate(mc.profiles):
        name = p.name
        rule = t.by_name.get(name)
        if rule is not None and not rule.model_scoped:
            out.append(_v("OEV133", f"{path}.profiles[{i}].name", name, "a model-scoped profile",
                          f"{name} is not model-scoped and belongs in Capabilities only"))
        if name not in adv:
            out.append(_v("OEV131", f"{path}.profiles[{i}].name", name, "also in Capabilities.profiles",
                          f"the model lists {name} but the engine does not advertise it"))
    eff = {}
    for rule in t.model_fields:
        if not mc.HasField(rule.field):
            continue
        if rule.name not in madv:
            out.append(_v("OEV132", f"{path}.{rule.field}", None, f"{rule.name} in the model's profiles",
                          f"{rule.field} is set but the model does not list {rule.name}"))
        eff[rule.name] = effective_limits(rule, getattr(mc, rule.field), f"{path}.{rule.field}", out)
    return madv, eff


def check_role(adv, role: int, role_name: str, out: list) -> None:
    """Role-scoped profiles advertised by an engine whose EngineInfo.role does not allow them."""
    for rule in tables().profiles:
        if rule.roles and rule.name in adv and role not in rule.roles:
            out.append(_v("OEV130", "profiles", role_name, rule.role_text,
                          f"{rule.name} is advertised by an engine whose role is {role_name}"))


# -- the public constants, derived from the same tables -------------------------------------------

_T = tables()
KNOWN_PROFILES: dict[str, tuple[int, int]] = {p.name: p.version for p in _T.profiles}
CAPABILITY_FIELDS: dict[str, str] = {p.name: p.field for p in _T.with_field}
MODEL_SCOPED: frozenset[str] = frozenset(p.name for p in _T.profiles if p.model_scoped)
ROLE_SCOPED: dict[str, tuple[int, ...]] = {p.name: p.roles for p in _T.profiles if p.roles}
DEFAULTS: dict[str, dict[str, Any]] = {p.name: p.fresh_defaults() for p in _T.profiles}
