"""How a call ends when it is refused (`Refusal` -> gRPC status), and how the SDK reports a
backend that breaks the protocol (a load figure or a usage count that cannot be true)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status

from openengine.serve.backend import Refusal, RefusalCode
from openengine.v1 import error_pb2
from openengine.validate import Severity

log = logging.getLogger("openengine.serve")


def refuse_errors(violations) -> None:
    """Refuse with INVALID_ARGUMENT naming every error among `violations` (openengine.validate),
    each with its field, the rule and the requirement."""
    errors = list(dict.fromkeys(
        f"{v.message} (expected {v.expected}; {v.requirement})" for v in violations if v.severity is Severity.ERROR))
    if errors:
        raise Refusal(RefusalCode.INVALID_ARGUMENT, "; ".join(errors))


async def refuse(refusal: Refusal, context) -> None:
    """End the call with the refusal's status. A retryable refusal carries its `EngineError` (code,
    message, `retryable`) in the standard status details (`google.rpc.Status.details`, the
    `grpc-status-details-bin` trailer), which every gRPC language can read; any other refusal is
    its code and message alone."""
    code = grpc.StatusCode[refusal.code.value]
    if not refusal.retryable:
        await context.abort(code, refusal.message)
    packed = any_pb2.Any()
    packed.Pack(error_pb2.EngineError(code=int(refusal.error), message=refusal.message, retryable=True))
    status = rpc_status.to_status(status_pb2.Status(code=code.value[0], message=refusal.message, details=[packed]))
    await context.abort(status.code, status.details, status.trailing_metadata)


@dataclass
class BackendErrors:
    """What the backend got wrong, each logged once per backend method and field (one line, no
    traceback: the same mistake repeats on every call)."""

    seen: set[tuple[str, str]] = field(default_factory=set)

    def report(self, method: str, where: str, what: str, *, exc_info: BaseException | None = None) -> str:
        """Log `Backend.<method>`'s `where` being `what` the first time (with the traceback of
        `exc_info`, when the backend raised); the text for the client."""
        text = f"engine error in Backend.{method}: {where} {what}"
        if (method, where) not in self.seen:
            self.seen.add((method, where))
            log.error("%s (logged once; every call it affects answers INTERNAL)", text, exc_info=exc_info)
        return text

    def refusal(self, method: str, where: str, what: str) -> Refusal:
        return Refusal(RefusalCode.INTERNAL, self.report(method, where, what))
