"""What both aliases share: running a v1 RPC through the server's own path, and the
translations that do not depend on the earlier revision."""

from __future__ import annotations

from typing import Any

from openengine.contractkit.naming import enum_value_prefix
from openengine.serve.backend import Refusal, RefusalCode
from openengine.serve.runstate import DRAINING, SERVING
from openengine.v1 import common_pb2, discovery_pb2, generation_pb2, lifecycle_pb2, load_pb2


class AliasBase:
    """An alias service implementation. `self.unary` / `self.stream` run a v1 RPC exactly as a
    v1 call would run (the gate, the admin guard, admission), through the server's own path;
    `self.gate` is the gate they pass (the server's, unless a layer gave the alias another).
    GetLoad, Health and Abort translate alike in both revisions, given the revision's messages
    (`earlier`), how its AbortRequest names a target and its status for nothing aborted."""

    service = ""
    earlier: Any = None
    nothing_aborted = 0

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

    def abort_request(self, request) -> lifecycle_pb2.AbortRequest:
        raise NotImplementedError

    async def GetLoad(self, request, context):
        info = await self.unary("openengine.v1.Observability/GetLoad",
                                load_pb2.GetLoadRequest(per_rank=request.include_per_rank), context)
        return load_info(self.earlier, info)

    async def Health(self, request, context):
        if request.include_inference_probe:
            raise not_translated("include_inference_probe", "send a short openengine.v1.Inference/Generate instead")
        state = self.earlier.HealthState.Value(f"HEALTH_STATE_{health_state(self.state)}")
        return self.earlier.HealthResponse(state=state)

    async def Abort(self, request, context):
        answer = await self.unary("openengine.v1.Lifecycle/Abort", self.abort_request(request), context)
        if answer.aborted:
            return self.earlier.AbortResponse(status=self.earlier.ABORT_STATUS_ABORTED,
                                              message=f"{answer.aborted} aborted")
        return self.earlier.AbortResponse(status=self.nothing_aborted, message="no matching request in flight")


def load_info(earlier, info: load_pb2.LoadInfo):
    """v1 LoadInfo -> the earlier revision's (the same fields; the timestamp in nanoseconds)."""
    out = earlier.LoadInfo(
        instance_id=info.instance_id, timestamp_unix_nanos=info.timestamp.ToNanoseconds(),
        running_requests=info.running_requests, queued_requests=info.queued_requests,
        active_kv_sessions=info.active_kv_sessions, used_kv_blocks=info.used_kv_blocks,
        total_kv_blocks=info.total_kv_blocks, running_tokens=info.running_tokens,
        waiting_tokens=info.waiting_tokens, prefill_batch_size=info.prefill_batch_size,
        decode_batch_size=info.decode_batch_size)
    out.attributes.update(info.attributes)     # a string map in revision 2, a Struct in revision 3
    for rank in info.ranks:
        out.ranks.add(data_parallel_rank=rank.data_parallel_rank, running_requests=rank.running_requests,
                      queued_requests=rank.queued_requests, used_kv_blocks=rank.used_kv_blocks,
                      total_kv_blocks=rank.total_kv_blocks)
    return out


def model_info_fields(info: discovery_pb2.ModelInfo) -> dict[str, Any]:
    """v1 ModelInfo -> the fields revisions 2 and 3 both give their ModelInfo."""
    return dict(
        model_id=info.base_model or info.model, served_model_name=info.model,
        max_context_length=info.max_context_tokens, max_output_tokens=info.max_output_tokens,
        supports_text_input=info.tokenizer.text_input, supports_token_ids_input=True,
        supports_lora="openengine.adapters" in {p.name for p in info.capabilities.profiles},
        supports_multimodal=info.multimodal, reasoning_parser=info.reasoning_parser,
        tool_call_parser=info.tool_call_parser)


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
