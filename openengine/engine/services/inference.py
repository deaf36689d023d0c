"""Inference: Generate, with admission against the advertised limits."""

from __future__ import annotations

import asyncio
import uuid
import zlib

from openengine.engine import model as lm
from openengine.engine.runtime import Request
from openengine.engine.services._base import Base, Code, Refused, _error, invalid
from openengine.v1 import common_pb2, generation_pb2, kv_pb2


class _Sequence:
    def __init__(self, index, sampler, stops, stop_ids, include_stop, min_tokens):
        self.index = index
        self.sampler = sampler
        self.stops = [s.encode() for s in stops if s]
        self.stop_ids = set(stop_ids)
        self.include_stop = include_stop
        self.min_tokens = min_tokens
        self.tokens: list[int] = []
        self.sent = 0
        self.finished = False
        self.reason = 0
        self.stop_reason = ""
        self.logprobs: list = []

    def holdback(self) -> int:
        """Tokens at the end that could start a stop string: kept until it is decided."""
        if not self.stops:
            return 0
        data = bytes(t & 0xFF for t in self.tokens[self.sent:])
        best = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(data)), 0, -1):
                if data.endswith(stop[:k]):
                    best = max(best, k)
                    break
        return best


class Inference(Base):
    def validate(self, request: generation_pb2.GenerateRequest) -> dict:
        """Admit a request: everything the engine's capabilities say goes through the shared
        preflight (`Base.admit`); what follows is what only this engine knows (its vocabulary,
        the room left in the context, which adapters and sessions exist) and the shape of the
        request itself. Returns the plan the generation loop runs."""
        rt = self.rt
        model = self.model(request.model)
        self.admit(request, model)
        m = rt.models[model].config
        s = request.sampling
        kind = request.WhichOneof("prompt")
        if kind is None:
            raise invalid("prompt", "set text or token_ids")
        if kind == "token_ids":
            bad = [t for t in request.token_ids.ids if t >= lm.VOCAB_SIZE]
            if bad:
                raise invalid("token_ids", f"token id {bad[0]} is outside the vocabulary (size {lm.VOCAB_SIZE})")
            prompt = list(request.token_ids.ids)
        else:
            prompt = lm.tokenize(request.text)
        if not prompt:
            raise invalid("prompt", "the prompt is empty")
        extra_tokens = sum(h.num_tokens for h in request.encoder_inputs)
        if len(prompt) + extra_tokens >= m.max_context_tokens:
            raise invalid("prompt", f"{len(prompt) + extra_tokens} tokens leave no room in the context "
                          f"(ModelInfo.max_context_tokens = {m.max_context_tokens})")
        n = s.n if s.HasField("n") else 1
        if n < 1:
            raise invalid("sampling.n", "must be at least 1")
        guided = s.guided.WhichOneof("constraint") if s.HasField("guided") else None
        if guided == "json_object" and not s.guided.json_object:
            raise invalid("sampling.guided.json_object", "must be true when set")
        if guided == "choice" and not s.guided.choice.values:
            raise invalid("sampling.guided.choice", "needs at least one choice")
        room = m.max_context_tokens - len(prompt) - extra_tokens
        if s.HasField("max_tokens"):
            if s.max_tokens < 1:
                raise invalid("sampling.max_tokens", "must be at least 1")
            if s.max_tokens > room:
                raise invalid("sampling.max_tokens", f"prompt plus {s.max_tokens} tokens exceed "
                              f"ModelInfo.max_context_tokens = {m.max_context_tokens}")
            max_tokens = s.max_tokens
        else:
            max_tokens = min(m.max_output_tokens, room)
        if s.HasField("min_tokens") and s.min_tokens > max_tokens:
            raise invalid("sampling.min_tokens", f"{s.min_tokens} exceeds max_tokens {max_tokens}")
        if request.HasField("adapter"):
            loaded = rt.adapters.get(request.adapter)
            if loaded is None:
                raise Refused(Code.NOT_FOUND, f"adapter: no loaded adapter {request.adapter!r}")
            if loaded.model != model:
                raise invalid("adapter", f"{request.adapter!r} is loaded for model {loaded.model!r}, not {model!r}")
        if request.HasField("session_id"):
            rt.expire_sessions()
            if request.session_id not in rt.sessions:
                raise Refused(Code.NOT_FOUND, f"session_id: no open session {request.session_id!r}")
        kv = request.kv_transfer if request.HasField("kv_transfer") else None
        if kv is not None and kv.role == kv_pb2.KV_TRANSFER_ROLE_UNSPECIFIED:
            raise invalid("kv_transfer.role", "set KV_TRANSFER_ROLE_PRODUCER or KV_TRANSFER_ROLE_CONSUMER")
        return dict(prompt=prompt, n=n, max_tokens=max_tokens, guided=guided, kv=kv, extra_tokens=extra_tokens,
                    model=model)

    async def Generate(self, request: generation_pb2.GenerateRequest, context):
        rt = self.rt
        self.serving_work("openengine.v1.Inference")
        plan = rt.hooks.at("generate.admission", self.validate, rt=rt)(request)
        request_id = request.request_id or f"req-{uuid.uuid4().hex[:16]}"
        if rt.scheduler.find(request_id) is not None:
            raise Refused(Code.ALREADY_EXISTS, f"request_id: {request_id!r} is already in flight")
        prompt = plan["prompt"]
        s = request.sampling
        role = rt.config.role
        kv = plan["kv"]
        max_tokens = plan["max_tokens"]
        producer = role == "prefill" or (kv is not None and kv.role == kv_pb2.KV_TRANSFER_ROLE_PRODUCER)
        if producer:
            max_tokens = 1  # a KV producer computes the prompt and the first token only
        req = Request(request_id, len(prompt) + plan["extra_tokens"], priority=request.priority,
                      kv_session=kv.session_id if kv is not None else "",
                      rank=zlib.crc32(request_id.encode()) % rt.config.data_parallel_size)
        rt.scheduler.submit(req)
        ended = False
        try:
            async for message in self._run(req, request, plan, prompt, max_tokens, producer, context):
                yield message
            ended = True
        finally:
            if ended or req.aborted is not None:
                rt.scheduler.release(req)
            else:
                # The client cancelled (REQ-CORE-011): free what the request holds at once.
                rt.hooks.at("generate.client-cancelled", rt.scheduler.release, rt=rt,
                            max_tokens=max_tokens)(req)

    async def _run(self, req, request, plan, prompt, max_tokens, producer, context):
        rt = self.rt
        s = request.sampling
        await req.scheduled.wait()
        if req.aborted is not None:
            for terminal in _terminal(rt, req):
                yield terminal
            return
        adapter = request.adapter if request.HasField("adapter") else ""
        # Models do not share cached blocks: any but the default model keys them by its name too.
        salt = request.cache_salt if plan["model"] == rt.model_name else f"{plan['model']}\x00{request.cache_salt}"
        hashes = lm.block_hashes(prompt, rt.kv_block_size, salt=salt, adapter=adapter)
        kv = plan["kv"]
        if kv is not None and kv.role == kv_pb2.KV_TRANSFER_ROLE_CONSUMER:
            cached = len(prompt)
        elif request.HasField("session_id"):
            session = rt.sessions[request.session_id]
            cached = min(session.retained_tokens, len(prompt))
        elif request.bypass_prefix_cache:
            cached = 0
        else:
            cached = min(rt.cached_prefix_tokens(hashes), len(prompt))
        temperature = s.temperature if s.HasField("temperature") else 1.0
        seed = s.seed if s.HasField("seed") else 0
        guided = plan["guided"]
        choice = tuple(s.guided.choice.values) if guided == "choice" else ()
        seqs = [_Sequence(i, lm.SequenceSampler.start(prompt, seed=seed, index=i, temperature=temperature,
                                                     adapter=adapter, choice=choice,
                                                     json_object=guided == "json_object"),
                          s.stop, s.stop_token_ids, s.include_stop_in_output,
                          s.min_tokens if s.HasField("min_tokens") else 0)
                for i in range(plan["n"])]
        want_logprobs = s.HasField("logprobs")
        top_k = s.logprobs if want_logprobs else 0
        first = True
        delay = rt.config.token_delay_ms / 1000.0
        while not all(q.finished for q in seqs):
            if delay:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            while rt.run.holds_requests and req.aborted is None:
                await asyncio.sleep(0.01)
            if req.aborted is not None:
                for terminal in _terminal(rt, req):
                    yield terminal
                return
            req.generated += 1
            for q in seqs:
                if q.finished:
                    continue
                token = q.sampler.next_token()
                if token == lm.EOS_TOKEN_ID and s.ignore_eos:
                    q.sampler.forced = None
                    token = q.sampler.next_token()
                q.tokens.append(token)
                if want_logprobs:
                    top = q.sampler.top(max(top_k, 1), token)[:top_k] if top_k else []
                    q.logprobs.append(generation_pb2.TokenLogprobs(
                        token_id=token, logprob=q.sampler.logprob(token), rank=1,
                        top=[generation_pb2.TopLogprob(token_id=t, logprob=lp, token=lm.detokenize([t]))
                             for t, lp in top]))
                self._check_stop(q, max_tokens)
                if q.finished:
                    yield self._final(q, request, prompt, cached, producer)
                    continue
                upto = len(q.tokens) - q.holdback()
                if upto > q.sent:
                    chunk = generation_pb2.GenerateChunk(index=q.index, token_ids=q.tokens[q.sent:upto])
                    if not request.skip_detokenize:
                        chunk.text = lm.detokenize(q.tokens[q.sent:upto])
                    if want_logprobs:
                        chunk.logprobs.extend(q.logprobs[q.sent:upto])
                    if first and s.HasField("prompt_logprobs"):
                        chunk.prompt_logprobs.extend(_prompt_logprobs(prompt, s.prompt_logprobs))
                    q.sent = upto
                    yield generation_pb2.GenerateResponse(chunk=chunk)
            first = False
        # The request completed: its blocks join the prefix cache, a session retains them.
        all_tokens = prompt + seqs[0].tokens
        rt.store_blocks(lm.block_hashes(all_tokens, rt.kv_block_size, salt=salt, adapter=adapter),
                        all_tokens, adapter)
        if request.HasField("session_id") and request.session_id in rt.sessions:
            session = rt.sessions[request.session_id]
            cap = session.capacity_tokens or rt.models[session.model].config.max_context_tokens
            session.retained_tokens = min(cap, len(all_tokens))
            session.expires_ns = rt.clock.now_ns() + session.ttl_ms * 1_000_000

    def _check_stop(self, q: _Sequence, max_tokens: int) -> None:
        token = q.tokens[-1]
        allowed = len(q.tokens) > q.min_tokens
        if allowed and token == lm.EOS_TOKEN_ID:
            q.finished, q.reason = True, generation_pb2.FINISH_REASON_STOP
            q.tokens.pop()
            q.logprobs = q.logprobs[:len(q.tokens)]
            return
        if allowed and token in q.stop_ids:
            q.finished, q.reason, q.stop_reason = True, generation_pb2.FINISH_REASON_STOP, str(token)
            if not q.include_stop:
                q.tokens.pop()
                q.logprobs = q.logprobs[:len(q.tokens)]
            return
        if allowed and q.stops:
            data = bytes(t & 0xFF for t in q.tokens)
            for stop in q.stops:
                at = data.find(stop, max(0, q.sent - len(stop)))
                if at >= 0:
                    cut = at + len(stop) if q.include_stop else at
                    q.tokens = q.tokens[:cut]
                    q.logprobs = q.logprobs[:cut]
                    q.finished, q.reason, q.stop_reason = True, generation_pb2.FINISH_REASON_STOP, stop.decode()
                    return
        if len(q.tokens) >= max_tokens:
            q.finished, q.reason = True, generation_pb2.FINISH_REASON_LENGTH

    def _final(self, q: _Sequence, request, prompt, cached, producer) -> generation_pb2.GenerateResponse:
        rt = self.rt
        rest = q.tokens[q.sent:]
        final = generation_pb2.GenerateFinal(
            index=q.index, token_ids=rest, finish_reason=q.reason, stop_reason=q.stop_reason,
            usage=generation_pb2.Usage(prompt_tokens=len(prompt), completion_tokens=len(q.tokens),
                                       cached_prompt_tokens=cached))
        if not request.skip_detokenize:
            final.text = lm.detokenize(rest)
        if request.sampling.HasField("logprobs"):
            final.logprobs.extend(q.logprobs[q.sent:])
        q.sent = len(q.tokens)
        if producer and rt.has("openengine.kv"):
            kv = request.kv_transfer
            backends = rt.limit("openengine.kv", "kv_transfer_backends")
            final.kv_transfer.CopyFrom(kv_pb2.KvTransferParams(
                role=kv_pb2.KV_TRANSFER_ROLE_PRODUCER, session_id=kv.session_id,
                remote_engine_id=rt.instance_id, remote_address=rt.address,
                transfer_handle=f"kv-{uuid.uuid4().hex[:16]}",
                backend=kv.backend or (backends[0] if backends else ""),
                backend_params={"blocks": str(-(-len(prompt) // rt.kv_block_size))}))
        return generation_pb2.GenerateResponse(final=final)


def _terminal(rt, req) -> list[generation_pb2.GenerateResponse]:
    """The message an aborted stream ends with (REQ-SVC-002): its terminal EngineError."""
    error = _error(common_pb2.ERROR_CODE_ABORTED, f"aborted: {req.aborted[0]}", retryable=req.aborted[1])
    terminal = rt.hooks.at("generate.terminal", error)
    return [terminal] if terminal is not None else []


def _prompt_logprobs(prompt, k):
    out = []
    for tok, lp, top in lm.prompt_logprobs(prompt, max(k, 1)):
        out.append(generation_pb2.TokenLogprobs(
            token_id=tok, logprob=lp, rank=1,
            top=[generation_pb2.TopLogprob(token_id=t, logprob=v, token=lm.detokenize([t])) for t, v in top[:k]]))
    return out
