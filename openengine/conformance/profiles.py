"""The contract as the runner needs it, read from the descriptors (`openengine.contract`), so it
works wherever the bindings are installed: the standard health RPCs counted in the core, and
profiles keyed by name with the core first.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from openengine.contract import CORE, HEALTH_SERVICE, ProfileInfo, RpcInfo, catalogue

Contract = dict[str, ProfileInfo]     # full profile name -> profile, the core first


def services_of(contract: Contract, profiles) -> list[str]:
    """Full names of the services holding at least one RPC of these profiles, sorted."""
    return sorted({s for name in profiles if name in contract for s in contract[name].services})


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
    return dict(sorted(profiles.items(), key=lambda kv: (kv[0] != CORE, kv[0])))
