"""Compatibility aliases: the earlier revisions' services, answered by the v1 RPCs they map to.

`--alias openengine,control` (config key `alias`) serves `openengine.v1.OpenEngine` (schema
revision 2) and `openengine.v1.Control` (revision 3) next to the v1 services. Each alias method
translates the earlier request into the v1 request, runs it through the server's own v1 path
(the same profile gate, admin guard, validation, scheduler, load accounting and cancellation),
and translates the v1 answer back (REQ-ALIAS-001, REQ-ALIAS-002). The alias is not a profile:
it is never advertised, and standard health reports it under its full name (REQ-ALIAS-003).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor as _d
from google.protobuf import message_factory

from openengine.aliases import ALIASES, HEALTH_CHECK, AliasMethod, AliasService, lookup
from openengine.engine.contract import ADMIN
from openengine.engine.refusal import Refused

__all__ = ["ALIASES", "lookup", "served", "handlers", "health_statuses", "minimum_client_revision"]


def served(rt) -> list[AliasService]:
    return [a for a in (lookup(n) for n in rt.config.aliases) if a is not None]


def health_statuses(rt, v1: dict[str, int]) -> dict[str, int]:
    """Standard health entries of the served aliases, given the v1 ones (REQ-ALIAS-003)."""
    return rt.hooks.at("health.aliases", {a.service: v1[a.health_as] for a in served(rt) if a.health_as in v1})


def minimum_client_revision(rt, schema_revision: int) -> int:
    """The oldest schema revision whose clients this engine serves: the earliest alias it serves,
    else its own revision."""
    return min([schema_revision, *(a.revision for a in served(rt))])


def handlers(invoker: Any, rt) -> list:
    """gRPC generic handlers of every served alias. `invoker` runs v1 RPCs through the server's
    own path (`gate`, `invoke_unary`, `invoke_stream`)."""
    from openengine.engine.alias.control import ControlAlias
    from openengine.engine.alias.openengine import OpenEngineAlias

    impls = {"openengine": OpenEngineAlias, "control": ControlAlias}
    out = []
    for alias in served(rt):
        impl = impls[alias.name](invoker, rt)
        methods = {m.name: _method_handler(impl, alias.methods[m.name], m) for m in alias.descriptor.methods}
        out.append(grpc.method_handlers_generic_handler(alias.service, methods))
    return out


def _method_handler(impl, mapped: AliasMethod, method: _d.MethodDescriptor):
    """Every alias method is refused first exactly as its v1 RPC would be (an unadvertised
    profile, missing admin credentials: REQ-ALIAS-001/002); a method without a translation then
    answers UNIMPLEMENTED naming its replacement."""
    req_cls = message_factory.GetMessageClass(method.input_type)
    resp_cls = message_factory.GetMessageClass(method.output_type)
    fn = getattr(impl, method.name) if mapped.translated else None

    def before(context) -> None:
        if mapped.v1.startswith(ADMIN + "/") and impl.rt.admin_separate:
            # Admin lives on its own address; the main address does not answer it, under any name.
            raise Refused(grpc.StatusCode.UNIMPLEMENTED,
                          f"{mapped.v1}, which {impl.service}/{method.name} maps to, is served on the admin "
                          f"address only; call it there")
        if mapped.v1 != HEALTH_CHECK:
            impl.gate(mapped.v1, context)
        if fn is None:
            raise impl.replaced(method.name, mapped.v1)

    if method.server_streaming:
        async def stream(request, context):
            try:
                before(context)
                async for message in fn(request, context):
                    yield message
            except Refused as refused:
                await context.abort(refused.code, refused.message)
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString)

    async def unary(request, context):
        try:
            before(context)
            return await fn(request, context)
        except Refused as refused:
            await context.abort(refused.code, refused.message)
    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString)
