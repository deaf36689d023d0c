"""`openengine.v1.OpenEngine`, the combined service of schema revision 2, answered by v1.

Field by field as spec/services.md's translation table says; an earlier field the alias cannot
carry over is refused with INVALID_ARGUMENT naming it and its v1 replacement, never dropped.
"""

from __future__ import annotations

from openengine.serve.alias import kv
from openengine.serve.alias._common import (AliasBase, enum_by_suffix, error_code, finish_reason,
                                             model_info_fields, not_translated)
from openengine.serve.backend import Refusal, RefusalCode
from openengine.legacy.rev2.v1 import openengine_pb2 as r2
from openengine.v1 import (admin_pb2, common_pb2, discovery_pb2, generation_pb2, kv_pb2, lifecycle_pb2)


def generate_request(req: r2.GenerateRequest) -> generation_pb2.GenerateRequest:
    """Revision 2 GenerateRequest -> v1 (plain scalars: zero means "not set")."""
    if req.media:
        raise not_translated("media", "send media to openengine.v1.Encoder/Encode and pass the handles in "
                                      "Inference/Generate encoder_inputs")
    if req.HasField("kv_session"):
        raise not_translated("kv_session", "use openengine.v1.Inference/Generate kv_transfer")
    if req.HasField("data_parallel_rank"):
        raise not_translated("data_parallel_rank", "v1 places requests itself; route by engine instead")
    if req.logprob_start_len > 0:
        raise not_translated("logprob_start_len", "use openengine.v1.Inference/Generate sampling.prompt_logprobs")
    if req.guided.backend:
        raise not_translated("guided.backend", "v1 requests cannot choose a grammar backend")
    out = generation_pb2.GenerateRequest(request_id=req.request_id, model=req.model)
    if req.WhichOneof("input") == "prompt":
        out.text = req.prompt
    elif req.WhichOneof("input") == "token_ids":
        out.token_ids.ids.extend(req.token_ids.ids)
    asked, sampling = req.sampling, out.sampling
    if asked.temperature:
        sampling.temperature = asked.temperature
    if asked.top_p:
        sampling.top_p = asked.top_p
    if asked.top_k > 0:
        sampling.top_k = asked.top_k
    if asked.frequency_penalty:
        sampling.frequency_penalty = asked.frequency_penalty
    if asked.presence_penalty:
        sampling.presence_penalty = asked.presence_penalty
    if asked.max_tokens:
        sampling.max_tokens = asked.max_tokens
    if asked.seed:
        sampling.seed = asked.seed
    sampling.ignore_eos = asked.ignore_eos
    for stop in req.stop:
        if stop.WhichOneof("condition") == "stop_text":
            sampling.stop.append(stop.stop_text)
        elif stop.WhichOneof("condition") == "stop_token_id":
            sampling.stop_token_ids.append(stop.stop_token_id)
    guide = req.guided.WhichOneof("guide")
    if guide is not None:
        setattr(sampling.guided, guide, getattr(req.guided, guide))
    if req.lora_name:
        out.adapter = req.lora_name
    if req.return_logprobs:
        sampling.logprobs = req.top_logprobs
    return out


def _token_output(request_id, token_ids, text, logprobs) -> r2.GenerateResponse:
    token = r2.TokenOutput(token_ids=token_ids, text=text)
    for lp in logprobs:
        token.logprobs.add(token_id=lp.token_id, logprob=lp.logprob, rank=lp.rank)
        if lp.top:
            token.top_logprobs.add(entries=[r2.LogProb(token_id=t.token_id, logprob=t.logprob, token=t.token)
                                            for t in lp.top])
    return r2.GenerateResponse(request_id=request_id, token=token)


def generate_responses(request_id: str, message: generation_pb2.GenerateResponse) -> list[r2.GenerateResponse]:
    """One v1 GenerateResponse -> the revision 2 events it stands for."""
    kind = message.WhichOneof("kind")
    if kind == "chunk":
        chunk = message.chunk
        return [_token_output(request_id, chunk.token_ids, chunk.text, chunk.logprobs)]
    if kind == "final":
        final = message.final
        out = [_token_output(request_id, final.token_ids, final.text, final.logprobs)] \
            if (final.token_ids or final.text) else []
        usage = r2.Usage(prompt_tokens=final.usage.prompt_tokens, completion_tokens=final.usage.completion_tokens,
                         total_tokens=final.usage.prompt_tokens + final.usage.completion_tokens)
        out.append(r2.GenerateResponse(
            request_id=request_id, usage=usage,
            finished=r2.GenerationFinished(reason=finish_reason(final.finish_reason, r2.FinishReason),
                                           message=final.stop_reason)))
        return out
    if kind == "error":
        error = message.error
        return [r2.GenerateResponse(request_id=request_id, error=r2.EngineError(
            code=error_code(error.code, r2.ErrorCode), message=error.message,
            retry_hint="retryable" if error.retryable else ""))]
    return []


def model_info(info: discovery_pb2.ModelInfo, state) -> r2.ModelInfo:
    core = state.selection.limits.get("openengine.core", {})
    return r2.ModelInfo(**model_info_fields(info), max_running_requests=int(core.get("max_running_requests") or 0),
                        supports_logprobs=bool(core.get("max_logprobs")),
                        supports_guided_decoding=bool(core.get("guided_decoding_modes")))


class OpenEngineAlias(AliasBase):
    service = "openengine.v1.OpenEngine"
    earlier = r2
    nothing_aborted = r2.ABORT_STATUS_NOT_FOUND

    async def Generate(self, request: r2.GenerateRequest, context):
        v1 = generate_request(request)
        request_id = request.request_id
        async for message in self.stream("openengine.v1.Inference/Generate", v1, context):
            for out in generate_responses(request_id, message):
                yield out

    async def GetEngineInfo(self, request, context):
        info = await self.unary("openengine.v1.Discovery/GetEngineInfo", discovery_pb2.GetEngineInfoRequest(), context)
        parallel = info.parallelism
        return r2.EngineInfo(
            engine_name=info.engine_name, engine_version=info.engine_version, api_version="openengine.v1",
            role=enum_by_suffix(info.role, common_pb2.Role, r2.EngineRole), instance_id=info.instance_id,
            supported_models=info.served_models,
            parallelism=r2.ParallelismInfo(tensor_parallel_size=parallel.tensor_parallel_size,
                                           pipeline_parallel_size=parallel.pipeline_parallel_size,
                                           data_parallel_size=parallel.data_parallel_size,
                                           data_parallel_rank=parallel.data_parallel_rank))

    async def GetModelInfo(self, request, context):
        info = await self.unary("openengine.v1.Discovery/GetModelInfo", discovery_pb2.GetModelInfoRequest(), context)
        return model_info(info, self.state)

    def abort_request(self, request: r2.AbortRequest) -> lifecycle_pb2.AbortRequest:
        v1 = lifecycle_pb2.AbortRequest()
        if request.abort_all:
            v1.all = True
        elif request.HasField("kv_session"):
            v1.kv_session_id = request.kv_session.session_id
        elif request.request_id:
            v1.request_ids.values.append(request.request_id)
        return v1

    async def Drain(self, request: r2.DrainRequest, context):
        if not request.stop_accepting_new_requests:
            raise not_translated("stop_accepting_new_requests",
                                 "a v1 drain always stops new work; set it to true, or use Admin/PauseGeneration")
        v1 = admin_pb2.DrainRequest()
        if request.deadline_ms:
            if not request.abort_after_deadline:
                raise not_translated("abort_after_deadline",
                                     "a v1 drain with a deadline aborts what is left; set it to true")
            v1.deadline_ms = request.deadline_ms
        started = False
        async for progress in self.stream("openengine.v1.Admin/Drain", v1, context):
            if not started:
                started = True
                yield r2.DrainResponse(state=r2.DRAIN_STATE_STARTED, in_flight_requests=progress.remaining_requests)
            state = r2.DRAIN_STATE_COMPLETE if progress.done else r2.DRAIN_STATE_IN_PROGRESS
            yield r2.DrainResponse(state=state, in_flight_requests=progress.remaining_requests,
                                   open_kv_sessions=self.state.backend.load().active_kv_sessions)

    async def GetKvEventSources(self, request: r2.GetKvEventSourcesRequest, context):
        answer = await self.unary("openengine.v1.Kv/GetKvEventSources", kv_pb2.GetKvEventSourcesRequest(), context)
        return kv.event_sources(r2, request, answer)

    async def SubscribeKvEvents(self, request: r2.SubscribeKvEventsRequest, context):
        async for batch in self.stream("openengine.v1.Kv/SubscribeKvEvents", kv.subscribe_request(request), context):
            if batch.dropped:
                # Revision 2 streams batches bare, with no terminal error message: end with a status.
                raise Refusal(RefusalCode.ABORTED, kv.DROPPED.format(n=batch.dropped))
            yield kv.event_batch(r2, batch)
