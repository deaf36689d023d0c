"""The per-profile capability rules, applied to the contract as `openengine.contract` reads it.

Limits (type, default, range, enum values), profile names, versions, scopes and roles come from
the compiled descriptors (`contract.catalogue()`); prerequisites and incompatible combinations are
judged afterwards by the contract's `combination_problems` (`_capabilities`), so nothing here
repeats the registry. The per-message loop is one `ListFields()` call, a dictionary lookup and one
comparison per set limit (bench/results.md, Validators).
"""

from __future__ import annotations

import re
from typing import Any

from openengine.contractkit import naming
from openengine import contract
from openengine.v1 import capabilities_pb2
from openengine.validate._rules import violation

_CAT = contract.catalogue()
REGISTRY_REVISION: int = _CAT.registry_revision
_WITH_FIELD = tuple(p for p in _CAT.profiles if p.capability_field)
_CAPABILITY_FIELDS = capabilities_pb2.Capabilities.DESCRIPTOR.fields_by_name
# Capabilities field descriptor -> its profile; a capability message's field descriptor -> its limit.
_PROFILE_OF_FIELD = {_CAPABILITY_FIELDS[p.capability_field]: p for p in _WITH_FIELD}
_LIMIT_OF_FIELD = {lim.field: lim for p in _CAT.profiles for lim in p.limits}
# Enum limit -> wire number -> registry spelling, read once so the per-message loop is a lookup.
_SPELLED = {lim.field: {n: s for s, n in lim.enum_spellings().items()}
            for lim in _LIMIT_OF_FIELD.values() if lim.enum is not None}
MODEL_SCOPED: frozenset[str] = frozenset(p.name for p in _CAT.profiles if p.scope == "model")
DEFAULTS: dict[str, dict[str, Any]] = {p.name: p.defaults() for p in _CAT.profiles}


# -- limits ---------------------------------------------------------------------------------------

def effective_limits(profile: contract.ProfileInfo, msg, path: str, out: list) -> dict[str, Any]:
    """Effective limits of one capability message (None: every default), reporting OEV111/OEV112.

    One `ListFields()` call yields exactly the limits the message sets (proto3 presence), so the
    cost follows what an engine advertises, not how many limits the profile declares."""
    effective = profile.defaults()
    if msg is None:
        return effective
    for field, v in msg.ListFields():
        lim = _LIMIT_OF_FIELD.get(field)
        if lim is None:
            continue
        spelled = _SPELLED.get(field)
        if spelled is not None:
            effective[lim.name] = _spell(lim, spelled, v, path, out)
        elif lim.repeated:
            effective[lim.name] = list(v)
        else:
            effective[lim.name] = v
            if (lim.minimum is not None and v < lim.minimum) or (lim.maximum is not None and v > lim.maximum):
                low, high = ("" if bound is None else bound for bound in (lim.minimum, lim.maximum))
                expected = f"{low}..{high}"
                out.append(violation("OEV111", f"{path}.{lim.name}", v, expected,
                                     f"{lim.reference} must be within {expected}"))
    return effective


def _spell(lim: contract.LimitInfo, spelled: dict[int, str], value, path: str, out: list):
    """An enum limit (or list of them) as registry spellings, reporting numbers the registry lacks."""
    names = []
    for i, number in enumerate(value if lim.repeated else [value]):
        if number in spelled:
            names.append(spelled[number])
        else:
            where = f"{path}.{lim.name}[{i}]" if lim.repeated else f"{path}.{lim.name}"
            out.append(violation("OEV112", where, number, "one of " + ", ".join(spelled.values()),
                                 f"{lim.reference} holds a value the registry does not define"))
    if lim.repeated:
        return names
    return names[0] if names else lim.default   # an unknown number leaves the default in place


# -- the profile list -----------------------------------------------------------------------------

def check_profiles(profiles, path: str, out: list) -> dict[str, list[tuple[int, int]]]:
    """Advertised profile name -> list of (major, minor), checking names, majors and duplicates.
    An entry's findings come in the order a reader meets them: its form, a repeat, then the registry."""
    advertised: dict[str, list[tuple[int, int]]] = {}
    seen = set()
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
            known = _CAT.profile(name)
            if known is None:
                out.append(violation("OEV105", f"{path}[{i}].name", name,
                                     f"a profile of registry revision {REGISTRY_REVISION}",
                                     f"{name} is not a standard profile this validator knows "
                                     "(a typo, or a newer profile)"))
            elif major != known.version[0] and major >= 1:
                out.append(violation("OEV106", f"{path}[{i}].major", major, str(known.version[0]),
                                     f"{name} has no major version {major} in the registry "
                                     f"(known: {known.version_text})"))
        advertised.setdefault(name, []).append((major, minor))
    return advertised


_canonical = re.compile(naming.CANONICAL_NAME).match


# -- whole messages --------------------------------------------------------------------------------

def check_capabilities(caps, out: list, *, complete: bool = True):
    """Judge a Capabilities message. Returns (advertised profiles, effective limits per profile).
    One `ListFields()` call finds the capability messages that are set. With `complete` false the
    limits hold only the profiles whose message is set: enough for `combination_problems`, which
    takes a left-out limit as its default, and for callers that only want the violations."""
    advertised = check_profiles(caps.profiles, "profiles", out)
    if contract.CORE not in advertised:
        out.append(violation("OEV101", "profiles", None, contract.CORE, f"{contract.CORE} is not advertised"))
    limits = {}
    for field, msg in caps.ListFields():     # field-number order, which is contract order
        profile = _PROFILE_OF_FIELD.get(field)
        if profile is None:
            continue
        if profile.name not in advertised:
            out.append(violation("OEV110", profile.capability_field, None, f"{profile.name} in profiles",
                                 f"{profile.capability_field} is set but {profile.name} is not advertised"))
        limits[profile.name] = effective_limits(profile, msg, profile.capability_field, out)
    if complete:
        limits = {p.name: limits[p.name] if p.name in limits else p.defaults() for p in _WITH_FIELD}
    return advertised, limits


def check_model_capabilities(model_capabilities, path: str, advertised, out: list):
    """Judge one Capabilities.models entry against the engine's advertised profiles. Returns
    (profiles the model lists, effective limits of the model-scoped messages it sets)."""
    model_advertised = check_profiles(model_capabilities.profiles, path + ".profiles", out)
    for i, p in enumerate(model_capabilities.profiles):
        name = p.name
        known = _CAT.profile(name)
        if known is not None and known.scope != "model":
            out.append(violation("OEV133", f"{path}.profiles[{i}].name", name, "a model-scoped profile",
                                 f"{name} is not model-scoped and belongs in Capabilities only"))
        if name not in advertised:
            out.append(violation("OEV131", f"{path}.profiles[{i}].name", name, "also in Capabilities.profiles",
                                 f"the model lists {name} but the engine does not advertise it"))
    effective = {}
    for profile in _WITH_FIELD:
        field = profile.capability_field
        if profile.scope != "model" or not model_capabilities.HasField(field):
            continue
        if profile.name not in model_advertised:
            out.append(violation("OEV132", f"{path}.{field}", None, f"{profile.name} in the model's profiles",
                                 f"{field} is set but the model does not list {profile.name}"))
        effective[profile.name] = effective_limits(profile, getattr(model_capabilities, field),
                                                   f"{path}.{field}", out)
    return model_advertised, effective


def check_role(advertised, role: int, role_name: str, out: list) -> None:
    """Role-scoped profiles advertised by an engine whose ServerInfo.engine_role does not allow them."""
    numbers = contract.role_numbers()
    for p in _CAT.profiles:
        if p.scope == "role" and p.name in advertised and role not in {numbers[r] for r in p.roles}:
            out.append(violation("OEV130", "profiles", role_name, "role " + " or ".join(p.roles),
                                 f"{p.name} is advertised by an engine whose role is {role_name}"))
