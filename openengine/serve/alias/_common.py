"""What both aliases share: running a v1 RPC through the server's own path, and the
translations that do not depend on the earlier revision."""

from __future__ import annotations

from typing import Any

from openengine.contractkit.naming import enum_value_prefix
from openengine.serve.backend import Refusal, RefusalCode
from openengine.serve.runstate import DRAINING, SERVING
from openengine.v1 import common_pb2, generation_pb2


class AliasBase:
    """An alias service implementation. `self.unary` / `self.stream` run a v1 RPC exactly as a
    v1 call would run (the gate, the admin guard, admission), through the server's own path;
    `self.gate` is the gate they pass (the server's, unless a layer gave the alias another)."""

    service = ""

    def __init__(self, server: Any):
        self.server = server
        self.state = server.state
        self.gate = server.gate

    def _rpc(self, v1: str):
        service, method = v1.split("/")
        rpc = self.state.catalogue.rpc(service, method)
        if rpc is None:  # the contract lost an RPC an alias maps to: a build error, never a request's
            raise Refusal(RefusalCode.UNAVAILABLE, f"{v1}, which {self.service} maps to, is not in the contract")
        return rpc

    async def unary(self, v1: str, request, context):
        return await self.server.invoke_unary(self._rpc(v1), request, context, gate=self.gate)

    def stream(self, v1: str, request, context):
        return self.server.invoke_stream(self._rpc(v1), request, context, gate=self.gate)

    def check(self, v1: str, context) -> None:
        """Refuse exactly as a call of the v1 RPC would be refused before it runs."""
        refusal = self.gate.refusal(self._rpc(v1), context)
        if refusal is not None:
            raise refusal


def not_translated(field: str, replacement: str) -> Refusal:
    """An earlier request field the alias cannot carry over to v1: refused, never dropped."""
    return Refusal(RefusalCode.INVALID_ARGUMENT, f"{field}: not translated by the compatibility alias; {replacement}")


def enum_by_suffix(value: int, source, target) -> int:
    """Translate between two enums by the value's name without the enum's prefix
    (`ROLE_DECODE` -> `ENGINE_ROLE_DECODE`); 0 when the target has no such value."""
    name = source.Name(value)[len(enum_value_prefix(source.DESCRIPTOR.name)):]
    try:
        return target.Value(enum_value_prefix(target.DESCRIPTOR.name) + name)
    except ValueError:
        return 0


def health_state(state) -> str:
    """READY exactly when openengine.v1.Inference is SERVING (REQ-ALIAS-002), else why not."""
    if state.run.phase == SERVING:
        return "READY"
    if state.run.phase == DRAINING:
        return "DRAINING"
    return "NOT_READY"


def error_code(code: int, target) -> int:
    """v1 ErrorCode -> an earlier ErrorCode enum; the closest meaning, INTERNAL when none."""
    name = common_pb2.ErrorCode.Name(code)[len("ERROR_CODE_"):]
    closest = {"ABORTED": "CANCELLED", "RESOURCE_EXHAUSTED": "OVERLOADED", "UNAVAILABLE": "DRAINING",
               "NOT_FOUND": "MODEL_NOT_FOUND", "DEADLINE_EXCEEDED": "CANCELLED"}.get(name, name)
    try:
        return target.Value(f"ERROR_CODE_{closest}")
    except ValueError:
        return target.Value("ERROR_CODE_INTERNAL")


def finish_reason(reason: int, target) -> int:
    name = generation_pb2.FinishReason.Name(reason)[len("FINISH_REASON_"):]
    return target.Value(f"FINISH_REASON_{'CANCELLED' if name == 'ABORTED' else name}") \
        if name != "UNSPECIFIED" else 0
