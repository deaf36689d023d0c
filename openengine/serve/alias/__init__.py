"""Compatibility aliases: the earlier revisions' services, answered by the v1 RPCs they map to.

`ServeConfig(aliases=("openengine", "control"))` serves `openengine.v1.OpenEngine` (schema
revision 2) and `openengine.v1.Control` (revision 3) next to the v1 services. Each alias method
translates the earlier request into the v1 request, runs it through the server's own v1 path (the
same gate, admin guard, admission, load accounting and cancellation), and translates the v1 answer
back (REQ-ALIAS-001, REQ-ALIAS-002). An alias is not a profile: it is never advertised, and
standard health reports it under its full name (REQ-ALIAS-003, `Server.desired_health`).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor as _d
from google.protobuf import message_factory

from openengine.aliases import HEALTH_CHECK, AliasMethod, AliasService
from openengine.serve.backend import Refusal, RefusalCode
from openengine.serve.status import refuse

ADMIN = "openengine.v1.Admin"

__all__ = ["handlers", "implementation"]


def implementation(alias: AliasService, server: Any):
    """The object answering `alias`'s methods on `server` (one of the server's implementations)."""
    from openengine.serve.alias.control import ControlAlias
    from openengine.serve.alias.openengine import OpenEngineAlias

    return {"openengine": OpenEngineAlias, "control": ControlAlias}[alias.name](server)


def handlers(server: Any) -> list:
    """gRPC generic handlers of every alias `server` serves."""
    out = []
    for alias in server.aliases:
        impl = server.implementations[alias.service]
        methods = {m.name: _method_handler(server, impl, alias, alias.methods[m.name], m)
                   for m in alias.descriptor.methods}
        out.append(grpc.method_handlers_generic_handler(alias.service, methods))
    return out


def _method_handler(server: Any, impl, alias: AliasService, mapped: AliasMethod, method: _d.MethodDescriptor):
    """Every alias method is refused first exactly as its v1 RPC would be (an unadvertised
    profile, missing admin credentials: REQ-ALIAS-001/002); a method without a translation then
    answers UNIMPLEMENTED naming its replacement."""
    req_cls = message_factory.GetMessageClass(method.input_type)
    resp_cls = message_factory.GetMessageClass(method.output_type)

    def before(context) -> None:
        if mapped.v1.startswith(ADMIN + "/") and server.config.admin.port is not None:
            # Admin lives on its own address; the main address does not answer it, under any name.
            raise Refusal(RefusalCode.UNIMPLEMENTED,
                          f"{mapped.v1}, which {alias.service}/{method.name} maps to, is served on the admin "
                          f"address only; call it there")
        if mapped.v1 != HEALTH_CHECK:
            impl.check(mapped.v1, context)
        if not mapped.translated:
            raise Refusal(RefusalCode.UNIMPLEMENTED, f"{alias.service}/{method.name} is not translated by this "
                                                     f"alias; use {mapped.v1} instead")

    if method.server_streaming:
        async def stream(request, context):
            try:
                before(context)
                async for message in getattr(impl, method.name)(request, context):
                    yield message
            except Refusal as refused:
                await refuse(refused, context)
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString)

    async def unary(request, context):
        try:
            before(context)
            return await getattr(impl, method.name)(request, context)
        except Refusal as refused:
            await refuse(refused, context)
    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString)
