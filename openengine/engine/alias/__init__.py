"""Compatibility aliases: the earlier revisions' services, answered by the v1 RPCs they map to.

`--alias openengine,control` (config key `alias`) serves `openengine.v1.OpenEngine` (schema
revision 2) and `openengine.v1.Control` (revision 3) next to the v1 services. Each alias method
translates the earlier request into the v1 request, runs it through the server's own v1 path
(the same profile gate, admin guard, validation, scheduler, load accounting and cancellation),
and translates the v1 answer back (REQ-ALIAS-001, REQ-ALIAS-002). The alias is not a profile:
it is never advertised, and standard health reports it under its full name (REQ-ALIAS-003).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import descriptor as _d
from google.protobuf import message_factory

from openengine.engine.services._base import Refused

if TYPE_CHECKING:
    from openengine.engine.runtime import Runtime

INFERENCE = "openengine.v1.Inference"
DISCOVERY = "openengine.v1.Discovery"


@dataclass(frozen=True)
class Alias:
    name: str          # what --alias takes
    service: str       # the earlier full service name, served as is
    health_as: str     # the v1 service whose health status the alias reports (REQ-ALIAS-003)
    module: str        # the alias's generated service module

    @property
    def descriptor(self) -> _d.ServiceDescriptor:
        import importlib
        return importlib.import_module(self.module).DESCRIPTOR.services_by_name[self.service.rsplit(".", 1)[1]]

    @property
    def revision(self) -> int:
        """The earlier schema revision, read from the package of the alias's messages
        (`openengine.legacy.rev2.v1`), so it is written down once, in the protos."""
        return revision_of(self.descriptor)


ALIASES: dict[str, Alias] = {a.name: a for a in (
    Alias("openengine", "openengine.v1.OpenEngine", INFERENCE, "openengine.legacy.services.openengine_service_pb2"),
    Alias("control", "openengine.v1.Control", DISCOVERY, "openengine.legacy.services.control_service_pb2"),
)}

_REVISION = re.compile(r"^openengine\.legacy\.rev(\d+)\.")


def revision_of(service: _d.ServiceDescriptor) -> int:
    found = {int(m.group(1)) for method in service.methods
             for m in [_REVISION.match(method.input_type.full_name)] if m}
    if len(found) != 1:
        raise ValueError(f"{service.full_name}: its messages name no single earlier revision")
    return found.pop()


def lookup(name: str) -> Alias | None:
    """An alias by short name (`openengine`) or full service name."""
    name = name.strip()
    return next((a for a in ALIASES.values() if name in (a.name, a.service)), None)


def served(rt: "Runtime") -> list[Alias]:
    return [a for a in (lookup(n) for n in rt.config.aliases) if a is not None]


def health_statuses(rt: "Runtime", v1: dict[str, int]) -> dict[str, int]:
    """Standard health entries of the served aliases, given the v1 ones (REQ-ALIAS-003)."""
    if rt.fault("alias-not-in-health"):
        return {}
    return {a.service: v1[a.health_as] for a in served(rt) if a.health_as in v1}


def minimum_client_revision(rt: "Runtime", schema_revision: int) -> int:
    """The oldest schema revision whose clients this engine serves: the earliest alias it serves,
    else its own revision."""
    return min([schema_revision, *(a.revision for a in served(rt))])


def handlers(invoker: Any, rt: "Runtime") -> list:
    """gRPC generic handlers of every served alias. `invoker` runs v1 RPCs through the server's
    own path (`invoke_unary` / `invoke_stream`)."""
    from openengine.engine.alias.control import ControlAlias
    from openengine.engine.alias.openengine import OpenEngineAlias

    impls = {"openengine": OpenEngineAlias, "control": ControlAlias}
    out = []
    for alias in served(rt):
        impl = impls[alias.name](invoker, rt)
        methods = {m.name: _method_handler(getattr(impl, m.name), m) for m in alias.descriptor.methods}
        out.append(grpc.method_handlers_generic_handler(alias.service, methods))
    return out


def _method_handler(fn, method: _d.MethodDescriptor):
    req_cls = message_factory.GetMessageClass(method.input_type)
    resp_cls = message_factory.GetMessageClass(method.output_type)
    if method.server_streaming:
        async def stream(request, context):
            try:
                async for message in fn(request, context):
                    yield message
            except Refused as refused:
                await context.abort(refused.code, refused.message)
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString)

    async def unary(request, context):
        try:
            return await fn(request, context)
        except Refused as refused:
            await context.abort(refused.code, refused.message)
    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString)
