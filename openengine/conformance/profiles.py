"""The contract as the runner needs it, read from the descriptors (`openengine.contract`), so it
works wherever the bindings are installed: the standard health RPCs counted in the core, and
profiles keyed by name with the core first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from openengine.contract import (  # noqa: F401  (re-exported: the runner's view of the contract)
    CORE, HEALTH_SERVICE, WORK_SERVICES, LimitInfo, ProfileInfo, RpcInfo, catalogue,
)


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


def _health_rpcs() -> tuple[RpcInfo, ...]:
    # The standard health service is part of the core (the registry lists its two RPCs) but is
    # defined by grpc.health.v1, not by our protos, so it carries no profile option.
    from grpc_health.v1 import health_pb2

    service = health_pb2.DESCRIPTOR.services_by_name["Health"]
    return tuple(RpcInfo(HEALTH_SERVICE, service.methods_by_name[name], CORE, "1.0")
                 for name in ("Check", "Watch"))


@lru_cache(maxsize=1)
def load_contract() -> Contract:
    """The contract of the installed bindings (`openengine.v1`)."""
    profiles = {p.name: p for p in catalogue().profiles}
    core = profiles.get(CORE)
    if core is None:
        core = ProfileInfo(name=CORE, version=(1, 0), scope="engine", roles=(), capability_field=None,
                           capability_message=None, limits=())
    profiles[CORE] = replace(core, rpcs=core.rpcs + _health_rpcs())
    ordered = dict(sorted(profiles.items(), key=lambda kv: (kv[0] != CORE, kv[0])))
    return Contract(ordered)
