"""The contract as the runner needs it, read from the compiled descriptors.

The runner must work wherever the bindings are installed, without `profiles.yaml` next to it, so
it learns which RPC belongs to which profile (and since which version), the profiles' versions,
scopes and limit defaults from the custom options the generator put on the services and the
capability messages (`openengine.v1.options`). Nothing here repeats the catalogue by hand.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

CORE = "openengine.core"
HEALTH_SERVICE = "grpc.health.v1.Health"


@dataclass(frozen=True)
class RpcInfo:
    """One RPC of the contract."""

    service: str          # full service name, `openengine.v1.Observability`
    method: str           # `WatchLoad`
    profile: str
    since: tuple[int, int]
    request: Any          # request message class
    response: Any         # response message class
    server_streaming: bool

    @property
    def full_name(self) -> str:
        return f"{self.service}/{self.method}"

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.method}"


@dataclass(frozen=True)
class LimitInfo:
    name: str
    default: Any
    minimum: float | None
    maximum: float | None
    repeated: bool


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    version: tuple[int, int]
    scope: str
    roles: tuple[str, ...]
    capability_field: str | None
    rpcs: tuple[RpcInfo, ...] = ()
    limits: dict[str, LimitInfo] = field(default_factory=dict)

    @property
    def short(self) -> str:
        return self.name.split(".", 1)[1] if self.name.startswith("openengine.") else self.name

    @property
    def services(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.service for r in self.rpcs))


@dataclass(frozen=True)
class Contract:
    profiles: dict[str, ProfileInfo]

    def profile(self, name_or_short: str) -> ProfileInfo | None:
        if name_or_short in self.profiles:
            return self.profiles[name_or_short]
        return self.profiles.get(f"openengine.{name_or_short}")

    def services_of(self, profiles: set[str] | list[str]) -> list[str]:
        """Full names of the services holding at least one RPC of these profiles, sorted."""
        out: set[str] = set()
        for name in profiles:
            info = self.profiles.get(name)
            if info:
                out.update(info.services)
        return sorted(out)

    @property
    def all_services(self) -> list[str]:
        """Every OpenEngine service of the contract (not the standard health service)."""
        return [s for s in self.services_of(list(self.profiles)) if s != HEALTH_SERVICE]


def _version(text: str) -> tuple[int, int]:
    major, _, minor = (text or "0.0").partition(".")
    return int(major or 0), int(minor or 0)


def _parse_default(text: str, fd) -> Any:
    """A limit option's default (registry spelling) as a Python value."""
    import json

    if text == "":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value


def _number(text: str) -> float | None:
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


@lru_cache(maxsize=1)
def load_contract() -> Contract:
    """The contract of the installed bindings (`openengine.v1`)."""
    import openengine.v1 as v1
    from openengine.v1 import capabilities_pb2, options_pb2

    rpcs_by_profile: dict[str, list[RpcInfo]] = {}
    for module in sorted(m.name for m in pkgutil.iter_modules(v1.__path__)):
        if not module.endswith("_service_pb2"):
            continue
        mod = importlib.import_module(f"openengine.v1.{module}")
        from google.protobuf import symbol_database

        db = symbol_database.Default()
        for service in mod.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                opt = method.GetOptions().Extensions[options_pb2.method_profile]
                if not opt.profile:
                    continue
                rpcs_by_profile.setdefault(opt.profile, []).append(RpcInfo(
                    service=service.full_name, method=method.name, profile=opt.profile,
                    since=_version(opt.since),
                    request=db.GetSymbol(method.input_type.full_name),
                    response=db.GetSymbol(method.output_type.full_name),
                    server_streaming=method.server_streaming))

    # The standard health service is part of the core (the registry lists its two RPCs) but is
    # defined by grpc.health.v1, not by our protos, so it carries no profile option.
    from grpc_health.v1 import health_pb2

    rpcs_by_profile.setdefault(CORE, []).extend([
        RpcInfo(HEALTH_SERVICE, "Check", CORE, (1, 0), health_pb2.HealthCheckRequest,
                health_pb2.HealthCheckResponse, False),
        RpcInfo(HEALTH_SERVICE, "Watch", CORE, (1, 0), health_pb2.HealthCheckRequest,
                health_pb2.HealthCheckResponse, True),
    ])

    profiles: dict[str, ProfileInfo] = {}
    for fd in capabilities_pb2.Capabilities.DESCRIPTOR.fields:
        if fd.message_type is None:
            continue
        cap = fd.message_type.GetOptions().Extensions[options_pb2.capability_profile]
        if not cap.profile:
            continue
        limits = {}
        for lf in fd.message_type.fields:
            lo = lf.GetOptions().Extensions[options_pb2.limit]
            limits[lf.name] = LimitInfo(
                name=lf.name, default=_parse_default(lo.default, lf),
                minimum=_number(lo.minimum), maximum=_number(lo.maximum),
                repeated=lf.is_repeated)
        profiles[cap.profile] = ProfileInfo(
            name=cap.profile, version=_version(cap.version), scope=cap.scope or "engine",
            roles=tuple(cap.roles), capability_field=fd.name,
            rpcs=tuple(rpcs_by_profile.pop(cap.profile, [])), limits=limits)
    # Profiles without a capability message still have RPCs (and an unknown version).
    for name, rpcs in rpcs_by_profile.items():
        profiles[name] = ProfileInfo(name=name, version=(1, 0), scope="engine", roles=(),
                                     capability_field=None, rpcs=tuple(rpcs))
    ordered = dict(sorted(profiles.items(), key=lambda kv: (kv[0] != CORE, kv[0])))
    return Contract(ordered)
