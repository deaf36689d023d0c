"""The gRPC status a refused call ends with (`Refusal` -> status), shared by every handler."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status

from openengine.serve.backend import Refusal, RefusalCode
from openengine.v1 import common_pb2


def refusal_status(refusal: Refusal) -> grpc.Status:
    """The status a refused call ends with. A retryable refusal carries its `EngineError` (code,
    message, `retryable`) in the standard status details (`google.rpc.Status.details`, the
    `grpc-status-details-bin` trailer), which every gRPC language can read; any other refusal is
    its code and message alone, so its size is the message's."""
    code = grpc.StatusCode[refusal.code.value]
    if not refusal.retryable:
        return PlainStatus(code, refusal.message)
    error = common_pb2.EngineError(code=_ERROR_CODES.get(refusal.code, common_pb2.ERROR_CODE_INTERNAL),
                                   message=refusal.message, retryable=True)
    packed = any_pb2.Any()
    packed.Pack(error)
    return rpc_status.to_status(status_pb2.Status(code=code.value[0], message=refusal.message, details=[packed]))


@dataclass(frozen=True)
class PlainStatus(grpc.Status):
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple = ()


_ERROR_CODES = {RefusalCode.RESOURCE_EXHAUSTED: common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED,
                RefusalCode.UNAVAILABLE: common_pb2.ERROR_CODE_UNAVAILABLE,
                RefusalCode.ABORTED: common_pb2.ERROR_CODE_ABORTED}


async def refuse(refusal: Refusal, context) -> None:
    """End the call with the refusal's status (`refusal_status`)."""
    status = refusal_status(refusal)
    await context.abort(status.code, status.details, status.trailing_metadata)
