"""The contract as the reference engine uses it.

The catalogue itself (profiles, RPCs, typed limits) is read from the compiled descriptors by
`openengine.contract`, shared with the conformance runner; this module adds what only the engine
needs: turning configured values into checked limit values and capability message fields, and the
prerequisites and incompatible combinations, which the descriptors do not carry and
`combination_problems` takes from the registry when one can be found.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from openengine.contract import (  # noqa: F401  (re-exported: the engine's view of the contract)
    HEALTH_SERVICE, STANDARD_PREFIX, Catalogue, LimitInfo, ProfileInfo, RpcInfo, catalogue,
)
from openengine.v1 import common_pb2

ROLE_NAMES = {"aggregated": common_pb2.ROLE_AGGREGATED, "prefill": common_pb2.ROLE_PREFILL,
              "decode": common_pb2.ROLE_DECODE, "encoder": common_pb2.ROLE_ENCODER}


# --- configured values -------------------------------------------------------------------------

def coerce(lim: LimitInfo, value: Any) -> Any:
    """Check a configured value against the limit's type and range; return it normalised
    (enum values as registry spellings). Raises ValueError naming the problem."""
    if lim.repeated:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{lim.reference} takes a list, got {value!r}")
        return [_coerce_one(lim, v) for v in value]
    return _coerce_one(lim, value)


def _coerce_one(lim: LimitInfo, value: Any) -> Any:
    kind = lim.kind
    if kind == "bool":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise ValueError(f"{lim.reference} takes true or false, got {value!r}")
        return value
    if kind in ("uint", "int"):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{lim.reference} takes an integer, got {value!r}")
        if kind == "uint" and value < 0:
            raise ValueError(f"{lim.reference} takes a non-negative integer, got {value}")
        _check_range(lim, value)
        return value
    if kind == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{lim.reference} takes a number, got {value!r}")
        _check_range(lim, value)
        return float(value)
    if kind == "enum":
        spellings = lim.enum_spellings()
        if value not in spellings:
            raise ValueError(f"{lim.reference}: {value!r} is not one of {', '.join(spellings)}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{lim.reference} takes a string, got {value!r}")
    return value


def _check_range(lim: LimitInfo, value) -> None:
    if lim.minimum is not None and value < lim.minimum:
        raise ValueError(f"{lim.reference} = {value} is below its minimum {lim.minimum}")
    if lim.maximum is not None and value > lim.maximum:
        raise ValueError(f"{lim.reference} = {value} is above its maximum {lim.maximum}")


def to_wire(lim: LimitInfo, value: Any) -> Any:
    """A normalised value as the capability message field takes it."""
    if lim.kind == "enum":
        spellings = lim.enum_spellings()
        return [spellings[v] for v in value] if lim.repeated else spellings[value]
    return value


# --- prerequisites and incompatibilities (registry) -------------------------------------------

def find_registry(explicit: str | None = None) -> Path | None:
    """The registry file to read prerequisites and incompatibilities from, if any: the explicit
    path, $OPENENGINE_REGISTRY, ./profiles.yaml, or the repository the package was loaded from."""
    candidates = [explicit, os.environ.get("OPENENGINE_REGISTRY"), "profiles.yaml",
                  Path(__file__).resolve().parents[2] / "profiles.yaml"]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    return None


@lru_cache(maxsize=4)
def _load_registry(path: str, mtime_ns: int, load):
    """One parse per registry file version: profile selection asks many times per start."""
    return load(path)


def combination_problems(registry_path: Path, advertised: dict[str, tuple[int, int]],
                         limits: dict[str, dict[str, Any]]) -> list[str]:
    """Missing prerequisites and incompatible combinations among the advertised profiles and
    their effective limit values, as the registry declares them."""
    try:
        from codegen.registry import load_registry
        from codegen.registry.model import Version
    except ImportError:  # installed without the toolkit
        return []
    resolved = _load_registry(str(registry_path), Path(registry_path).stat().st_mtime_ns, load_registry)
    if resolved.registry is None:
        return [f"{registry_path}: the registry does not resolve; run `oespec check`"]
    problems = []

    def effective(ref_profile: str, ref_limit: str):
        return limits.get(ref_profile, {}).get(ref_limit)

    for profile in resolved.registry.profiles:
        if profile.name not in advertised:
            continue
        for req in profile.requires:
            have = advertised.get(req.profile)
            if have is None:
                problems.append(f"{profile.name} requires {req.profile} ({req.range}), which is not enabled")
            elif not req.range.contains(Version(*have)):
                problems.append(f"{profile.name} requires {req.profile} {req.range}, "
                                f"but {req.profile} {have[0]}.{have[1]} is served")
        for inc in profile.incompatible_with:
            if inc.profile is not None and inc.profile not in advertised:
                continue
            if not all(c.profile in advertised and c.holds(effective(c.profile, c.limit)) for c in inc.when):
                continue
            what = " and ".join(str(c) for c in inc.when)
            other = f" with {inc.profile}" if inc.profile and inc.profile != profile.name else ""
            condition = f" while {what}" if what else ""
            problems.append(f"{profile.name} cannot be served{other}{condition}: {inc.reason}")
    return problems
