"""The contract as the compiled descriptors describe it.

Everything the engine knows about profiles (names, versions, scopes, roles, which RPC belongs to
which profile, the typed limits with their defaults and ranges) is read here from the custom
options the generator put on the services and capability messages (`openengine.v1.options_pb2`),
so the engine follows the contract without a second copy of the catalogue and works when it is
installed without the repository. Prerequisites and incompatible combinations are not carried by
the descriptors; `combination_problems` takes them from the registry when one can be found.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor as _d

import openengine.v1 as _v1
from openengine.v1 import capabilities_pb2, common_pb2, options_pb2

STANDARD_PREFIX = "openengine."
HEALTH_SERVICE = "grpc.health.v1.Health"

ROLE_NAMES = {"aggregated": common_pb2.ROLE_AGGREGATED, "prefill": common_pb2.ROLE_PREFILL,
              "decode": common_pb2.ROLE_DECODE, "encoder": common_pb2.ROLE_ENCODER}


@dataclass(frozen=True)
class LimitInfo:
    """One typed limit: a field of a capability message and its registry declaration."""

    profile: str
    name: str
    field: _d.FieldDescriptor
    default: Any
    minimum: int | float | None
    maximum: int | float | None
    unit: str

    @property
    def reference(self) -> str:
        return f"{self.profile}.{self.name}"

    @property
    def repeated(self) -> bool:
        return self.field.is_repeated

    @property
    def enum(self) -> _d.EnumDescriptor | None:
        return self.field.enum_type

    @property
    def kind(self) -> str:
        t = self.field.type
        if self.enum is not None:
            base = "enum"
        elif t == _d.FieldDescriptor.TYPE_BOOL:
            base = "bool"
        elif t == _d.FieldDescriptor.TYPE_STRING:
            base = "string"
        elif t in (_d.FieldDescriptor.TYPE_DOUBLE, _d.FieldDescriptor.TYPE_FLOAT):
            base = "double"
        elif t in (_d.FieldDescriptor.TYPE_INT32, _d.FieldDescriptor.TYPE_INT64,
                   _d.FieldDescriptor.TYPE_SINT32, _d.FieldDescriptor.TYPE_SINT64):
            base = "int"
        else:
            base = "uint"
        return base

    def enum_spellings(self) -> dict[str, int]:
        """Registry spelling (`json_schema`) -> enum number, derived from the enum's value names."""
        if self.enum is None:
            return {}
        prefix = _enum_prefix(self.enum)
        return {v.name[len(prefix):].lower(): v.number for v in self.enum.values if v.number != 0}

    def coerce(self, value: Any) -> Any:
        """Check a configured value against the limit's type and range; return it normalised
        (enum values as registry spellings). Raises ValueError naming the problem."""
        if self.repeated:
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"{self.reference} takes a list, got {value!r}")
            return [self._coerce_one(v) for v in value]
        return self._coerce_one(value)

    def _coerce_one(self, value: Any) -> Any:
        kind = self.kind
        if kind == "bool":
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if not isinstance(value, bool):
                raise ValueError(f"{self.reference} takes true or false, got {value!r}")
            return value
        if kind in ("uint", "int"):
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{self.reference} takes an integer, got {value!r}")
            if kind == "uint" and value < 0:
                raise ValueError(f"{self.reference} takes a non-negative integer, got {value}")
            self._check_range(value)
            return value
        if kind == "double":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{self.reference} takes a number, got {value!r}")
            self._check_range(value)
            return float(value)
        if kind == "enum":
            spellings = self.enum_spellings()
            if value not in spellings:
                raise ValueError(f"{self.reference}: {value!r} is not one of {', '.join(spellings)}")
            return value
        if not isinstance(value, str):
            raise ValueError(f"{self.reference} takes a string, got {value!r}")
        return value

    def _check_range(self, value):
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{self.reference} = {value} is below its minimum {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"{self.reference} = {value} is above its maximum {self.maximum}")

    def to_wire(self, value: Any) -> Any:
        """A normalised value as the capability message field takes it."""
        if self.kind == "enum":
            spellings = self.enum_spellings()
            return [spellings[v] for v in value] if self.repeated else spellings[value]
        return value


@dataclass(frozen=True)
class RpcInfo:
    service: str          # full service name, e.g. openengine.v1.Observability
    method: _d.MethodDescriptor
    profile: str
    since: str

    @property
    def name(self) -> str:
        return f"{self.service}/{self.method.name}"


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    version: tuple[int, int]
    scope: str
    roles: tuple[str, ...]
    capability_field: str | None
    capability_message: _d.Descriptor | None
    limits: tuple[LimitInfo, ...]
    rpcs: tuple[RpcInfo, ...] = ()

    @property
    def short_name(self) -> str:
        return self.name[len(STANDARD_PREFIX):] if self.name.startswith(STANDARD_PREFIX) else self.name

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def limit(self, name: str) -> LimitInfo | None:
        return next((lim for lim in self.limits if lim.name == name), None)

    def allows_role(self, role: str) -> bool:
        return self.scope != "role" or role in self.roles

    def defaults(self) -> dict[str, Any]:
        return {lim.name: lim.default for lim in self.limits}


@dataclass(frozen=True)
class Catalogue:
    """Profiles in contract order, the services and RPCs that carry them."""

    profiles: tuple[ProfileInfo, ...]
    services: dict[str, _d.ServiceDescriptor] = field(default_factory=dict)
    rpcs: tuple[RpcInfo, ...] = ()
    core: str = ""

    def profile(self, name: str) -> ProfileInfo | None:
        return next((p for p in self.profiles if p.name == name), None)

    def lookup(self, spelled: str) -> ProfileInfo | None:
        """A profile by full name or short name (`load`, `runtime-events`)."""
        spelled = spelled.strip()
        return next((p for p in self.profiles if spelled in (p.name, p.short_name)), None)

    def rpc(self, service: str, method: str) -> RpcInfo | None:
        return next((r for r in self.rpcs if r.service == service and r.method.name == method), None)

    def services_of(self, profiles) -> list[str]:
        """Services carrying at least one RPC of the given profiles, in contract order."""
        wanted = set(profiles)
        return [s for s in self.services if any(r.profile in wanted for r in self.rpcs if r.service == s)]

    def limit(self, reference: str) -> LimitInfo | None:
        """`openengine.adapters.max_loras` -> that limit."""
        for p in self.profiles:
            if reference.startswith(p.name + "."):
                return p.limit(reference[len(p.name) + 1:])
        return None


def _enum_prefix(enum: _d.EnumDescriptor) -> str:
    """GuidedDecodingMode -> GUIDED_DECODING_MODE_ (the value-name prefix proto style uses)."""
    out = []
    for i, ch in enumerate(enum.name):
        if ch.isupper() and i and not enum.name[i - 1].isupper():
            out.append("_")
        out.append(ch.upper())
    return "".join(out) + "_"


def _parse_default(text: str, lim_field: _d.FieldDescriptor) -> Any:
    if text == "":
        return [] if lim_field.is_repeated else None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parse_bound(text: str):
    if text == "":
        return None
    return float(text) if any(c in text for c in ".eE") else int(text)


def _service_modules():
    for info in pkgutil.iter_modules(_v1.__path__):
        if info.name.endswith("_service_pb2"):
            yield importlib.import_module(f"{_v1.__name__}.{info.name}")


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """Read the catalogue from the compiled descriptors (once per process)."""
    cap_fields = {f.message_type.full_name: f.name for f in capabilities_pb2.Capabilities.DESCRIPTOR.fields
                  if f.message_type is not None and f.name != "profiles"}
    profiles: dict[str, dict] = {}
    for msg in capabilities_pb2.DESCRIPTOR.message_types_by_name.values():
        opts = msg.GetOptions()
        if not opts.HasExtension(options_pb2.capability_profile):
            continue
        cp = opts.Extensions[options_pb2.capability_profile]
        limits = []
        for f in msg.fields:
            fo = f.GetOptions()
            if not fo.HasExtension(options_pb2.limit):
                continue
            lo = fo.Extensions[options_pb2.limit]
            limits.append(LimitInfo(cp.profile, f.name, f, _parse_default(lo.default, f),
                                    _parse_bound(lo.minimum), _parse_bound(lo.maximum), lo.unit))
        major, minor = (int(x) for x in cp.version.split("."))
        profiles[cp.profile] = dict(name=cp.profile, version=(major, minor), scope=cp.scope,
                                    roles=tuple(cp.roles), capability_field=cap_fields.get(msg.full_name),
                                    capability_message=msg, limits=tuple(limits), rpcs=[])
    services: dict[str, _d.ServiceDescriptor] = {}
    rpcs: list[RpcInfo] = []
    for module in _service_modules():
        for svc in module.DESCRIPTOR.services_by_name.values():
            services[svc.full_name] = svc
            for method in svc.methods:
                mo = method.GetOptions()
                if not mo.HasExtension(options_pb2.method_profile):
                    continue
                mp = mo.Extensions[options_pb2.method_profile]
                rpc = RpcInfo(svc.full_name, method, mp.profile, mp.since)
                rpcs.append(rpc)
                entry = profiles.get(mp.profile)
                if entry is None:  # a profile without a capability message
                    since = tuple(int(x) for x in mp.since.split("."))
                    entry = profiles[mp.profile] = dict(
                        name=mp.profile, version=since, scope="engine", roles=(), capability_field=None,
                        capability_message=None, limits=(), rpcs=[])
                entry["rpcs"].append(rpc)
    built = []
    for entry in profiles.values():
        entry["rpcs"] = tuple(entry["rpcs"])
        built.append(ProfileInfo(**entry))
    # Contract order: the order of the Capabilities fields (registry order), then the rest.
    order = {name: i for i, name in enumerate(cap_fields.values())}
    built.sort(key=lambda p: order.get(p.capability_field, len(order)))
    ordered_services = dict(sorted(services.items(), key=lambda kv: _service_rank(kv[0], rpcs, built)))
    core = built[0].name if built else ""
    return Catalogue(tuple(built), ordered_services, tuple(rpcs), core)


def _service_rank(service, rpcs, profiles):
    names = [p.name for p in profiles]
    ranks = [names.index(r.profile) for r in rpcs if r.service == service and r.profile in names]
    return (min(ranks) if ranks else len(names), service)


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


def combination_problems(registry_path: Path, advertised: dict[str, tuple[int, int]],
                         limits: dict[str, dict[str, Any]]) -> list[str]:
    """Missing prerequisites and incompatible combinations among the advertised profiles and
    their effective limit values, as the registry declares them."""
    try:
        from codegen.registry import load_registry
        from codegen.registry.model import Version
    except ImportError:  # installed without the toolkit
        return []
    resolved = load_registry(str(registry_path))
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
            problems.append(f"{profile.name} cannot be served{other} while {what}: {inc.reason}")
    return problems
