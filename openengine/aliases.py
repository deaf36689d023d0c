"""The compatibility aliases of earlier revisions: which earlier method maps to which v1 RPC.

One table for everyone who needs it: the reference engine answers each alias method with the v1
RPC named here (and refuses it exactly when that RPC's profile is not advertised, REQ-ALIAS-001),
the conformance runner calls alias and v1 side by side, the client helpers recognise an
earlier-layout server, and `tests/spec` checks spec/services.md's method tables against it and
against the alias protos (proto/openengine/legacy/), so the three cannot drift apart.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field

INFERENCE = "openengine.v1.Inference"
DISCOVERY = "openengine.v1.Discovery"
HEALTH_CHECK = "grpc.health.v1.Health/Check"

_REVISION = re.compile(r"^openengine\.legacy\.rev(\d+)\.")


@dataclass(frozen=True)
class AliasMethod:
    name: str
    v1: str                  # the v1 RPC that answers it (grpc.health.v1.Health/Check for Health)
    translated: bool = True  # False: answers UNIMPLEMENTED naming `v1` as the replacement


@dataclass(frozen=True)
class AliasService:
    name: str                # short name, what `oespec engine --alias` takes
    service: str             # full earlier service name, served unchanged
    health_as: str           # v1 service whose health status the alias reports (REQ-ALIAS-003)
    module: str              # generated module holding the service descriptor
    methods: dict[str, AliasMethod] = field(default_factory=dict)

    @property
    def descriptor(self):
        return importlib.import_module(self.module).DESCRIPTOR.services_by_name[self.service.rsplit(".", 1)[1]]

    @property
    def revision(self) -> int:
        """The earlier schema revision, read from the package of the alias's messages
        (`openengine.legacy.rev2.v1`), so it is written down once, in the protos."""
        found = {int(m.group(1)) for method in self.descriptor.methods
                 for m in [_REVISION.match(method.input_type.full_name)] if m}
        if len(found) != 1:
            raise ValueError(f"{self.service}: its messages name no single earlier revision")
        return found.pop()


def _methods(*items: AliasMethod) -> dict[str, AliasMethod]:
    return {m.name: m for m in items}


ALIASES: dict[str, AliasService] = {a.name: a for a in (
    AliasService("openengine", "openengine.v1.OpenEngine", INFERENCE,
                 "openengine.legacy.services.openengine_service_pb2", _methods(
                     AliasMethod("Generate", "openengine.v1.Inference/Generate"),
                     AliasMethod("GetEngineInfo", "openengine.v1.Discovery/GetEngineInfo"),
                     AliasMethod("GetModelInfo", "openengine.v1.Discovery/GetModelInfo"),
                     AliasMethod("GetLoad", "openengine.v1.Observability/GetLoad"),
                     AliasMethod("Health", HEALTH_CHECK),
                     AliasMethod("Abort", "openengine.v1.Lifecycle/Abort"),
                     AliasMethod("Drain", "openengine.v1.Admin/Drain"),
                     AliasMethod("GetKvConnectorInfo", "openengine.v1.Discovery/GetCapabilities", False),
                     AliasMethod("GetKvEventSources", "openengine.v1.Kv/GetKvEventSources"),
                     AliasMethod("SubscribeKvEvents", "openengine.v1.Kv/SubscribeKvEvents"),
                     AliasMethod("SubscribeRuntimeEvents", "openengine.v1.Observability/SubscribeRuntimeEvents",
                                 False))),
    AliasService("control", "openengine.v1.Control", DISCOVERY,
                 "openengine.legacy.services.control_service_pb2", _methods(
                     AliasMethod("GetServerInfo", "openengine.v1.Discovery/GetEngineInfo"),
                     AliasMethod("GetModelInfo", "openengine.v1.Discovery/GetModelInfo"),
                     AliasMethod("GetLoad", "openengine.v1.Observability/GetLoad"),
                     AliasMethod("Health", HEALTH_CHECK),
                     AliasMethod("Abort", "openengine.v1.Lifecycle/Abort"),
                     AliasMethod("LoadLora", "openengine.v1.Adapters/LoadAdapter"),
                     AliasMethod("UnloadLora", "openengine.v1.Adapters/UnloadAdapter"),
                     AliasMethod("ListLoras", "openengine.v1.Adapters/ListAdapters"),
                     AliasMethod("GetKvEventSources", "openengine.v1.Kv/GetKvEventSources"),
                     AliasMethod("SubscribeKvEvents", "openengine.v1.Kv/SubscribeKvEvents"))),
)}


def lookup(name: str) -> AliasService | None:
    """An alias by short name (`openengine`) or full service name."""
    name = name.strip()
    return next((a for a in ALIASES.values() if name in (a.name, a.service)), None)
