"""The RPC implementations, one class per service, named as the contract names them.

Which RPCs exist and which profile each belongs to is not decided here: `server.py` routes every
method of the compiled services to the method of the same name below and refuses it with
UNIMPLEMENTED when its profile (from the descriptor's `method_profile` option) is not advertised.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import zlib

import grpc

from openengine.engine import model as lm
from openengine.engine.contract import coerce, to_wire
from openengine.engine.runtime import Adapter, Request, Runtime, Session
from openengine.v1 import (
    adapters_pb2, admin_pb2, capabilities_pb2, common_pb2, discovery_pb2, encoder_pb2, events_pb2,
    generation_pb2, kv_pb2, lifecycle_pb2, load_pb2, sessions_pb2, tasks_pb2,
)

log = logging.getLogger("openengine.engine")
ES = events_pb2
Code = grpc.StatusCode


class Refused(Exception):
    """A request refused before acceptance: its status and a message naming field and limit."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(field: str, message: str) -> Refused:
    return Refused(Code.INVALID_ARGUMENT, f"{field}: {message}")


def _error(code, message, *, retryable=False, **details) -> generation_pb2.GenerateResponse:
    return generation_pb2.GenerateResponse(error=common_pb2.EngineError(
        code=code, message=message, retryable=retryable, details={k: str(v) for k, v in details.items()}))


class Base:
    def __init__(self, rt: Runtime):
        self.rt = rt

    def model(self, name: str, field: str = "model") -> str:
        """The served model a request names (empty: the default model), else NOT_FOUND."""
        if not name:
            return self.rt.model_name
        if name not in self.rt.models:
            raise Refused(Code.NOT_FOUND, f"{field}: no served model {name!r}; served: {', '.join(self.rt.models)}")
        return name

    def model_config(self, name: str):
        return self.rt.models[self.model(name)].config

    def model_lists(self, model: str, profile: str, field: str = "model") -> None:
        """REQ-CAP-013 / REQ-TASKS-001: a model-scoped RPC for a model that does not list the profile."""
        if not self.rt.lists(model, profile):
            raise invalid(field, f"model {model!r} does not list {profile} (see its ModelInfo.capabilities.profiles)")

    def serving_work(self, service: str) -> None:
        if not self.rt.accepting():
            state = ES.EngineState.Name(self.rt.state)
            raise Refused(Code.UNAVAILABLE, f"{service} is not serving ({state}); retry later or elsewhere")


# ------------------------------------------------------------------------------------------------
# Discovery
# ------------------------------------------------------------------------------------------------

class Discovery(Base):
    def engine_info(self) -> discovery_pb2.EngineInfo:
        rt = self.rt
        cfg = rt.config
        role = cfg.role
        if rt.fault("capabilities-role-mismatch"):
            role_scoped = [p for p in rt.advertised if p.scope == "role"]
            allowed = set(role_scoped[0].roles) if role_scoped else {cfg.role}
            role = next(r for r in ("aggregated", "prefill", "decode", "encoder") if r not in allowed)
        from openengine.engine.contract import ROLE_NAMES
        return discovery_pb2.EngineInfo(
            instance_id=rt.instance_id, engine_name=cfg.engine_name, engine_version=_engine_version(),
            role=ROLE_NAMES[role], capability_revision=rt.revision, schema_revision=_schema_revision(),
            minimum_client_revision=1,
            parallelism=discovery_pb2.Parallelism(
                tensor_parallel_size=1,
                pipeline_parallel_size=int(rt.limit("openengine.core", "pipeline_parallel_size")),
                data_parallel_size=cfg.data_parallel_size, decode_context_parallel_size=1),
            served_models=list(rt.models))

    def capabilities(self) -> capabilities_pb2.Capabilities:
        rt = self.rt
        caps = capabilities_pb2.Capabilities(revision=rt.revision)
        for p in rt.advertised:
            caps.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
            if p.capability_field:
                fill_capability(getattr(caps, p.capability_field), p, rt.limits[p.name])
        if rt.fault("capabilities-missing-core"):
            kept = [p for p in caps.profiles if p.name != rt.catalogue.core]
            del caps.profiles[:]
            caps.profiles.extend(kept)
        if rt.fault("capabilities-duplicate-profile"):
            last = capabilities_pb2.Capabilities().profiles.add()
            last.CopyFrom(caps.profiles[-1])
            caps.profiles.append(last)
        if rt.fault("capabilities-unadvertised-submessage"):
            missing = next((p for p in rt.catalogue.profiles if p.capability_field and not rt.has(p.name)), None)
            if missing is not None:
                getattr(caps, missing.capability_field).SetInParent()
        if rt.fault("capabilities-limit-out-of-range"):
            caps.generation.max_sequences = 0
        if rt.fault("capabilities-revision-mismatch"):
            caps.revision = rt.revision + 1
        return caps

    def model_info(self, name: str = "") -> discovery_pb2.ModelInfo:
        rt = self.rt
        name = name or rt.model_name
        m = rt.models[name].config
        info = discovery_pb2.ModelInfo(
            model=m.name, max_context_tokens=m.max_context_tokens, max_output_tokens=m.max_output_tokens,
            tokenizer=discovery_pb2.TokenizerInfo(name=lm.TOKENIZER_NAME, vocab_size=lm.VOCAB_SIZE,
                                                  eos_token_id=lm.EOS_TOKEN_ID, text_input=True, text_output=True),
            multimodal=rt.has("openengine.encoder"))
        mc = info.capabilities
        for p in rt.advertised:
            if p.scope != "model" or not rt.lists(name, p.name):
                continue
            mc.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
            field = next((f.name for f in capabilities_pb2.ModelCapabilities.DESCRIPTOR.fields
                          if f.message_type is p.capability_message), None)
            if field:
                fill_capability(getattr(mc, field), p, rt.model_limit_values(name, p.name))
        return info

    def model_infos(self) -> list[discovery_pb2.ModelInfo]:
        return [self.model_info(name) for name in self.rt.models]

    async def GetEngineInfo(self, request, context):
        return self.engine_info()

    async def GetCapabilities(self, request, context):
        return self.capabilities()

    async def GetModelInfo(self, request, context):
        return self.model_info(self.model(request.model))


def fill_capability(message, profile, values) -> None:
    """Set every limit field of a capability message from effective values."""
    message.SetInParent()
    for lim in profile.limits:
        value = to_wire(lim, values[lim.name])
        if lim.repeated:
            getattr(message, lim.name).extend(value)
        else:
            setattr(message, lim.name, value)


def _engine_version() -> str:
    try:
        from importlib.metadata import version
        return version("openengine-profiles")
    except Exception:
        return "0"


def _schema_revision() -> int:
    """The registry revision the contract was generated from (carried by the generated validators)."""
    try:
        from openengine.validate._generated import REGISTRY_REVISION
        return int(REGISTRY_REVISION)
    except (ImportError, AttributeError, ValueError):
        return 1  # the first revision; never zero (EngineInfo.schema_revision)


# ------------------------------------------------------------------------------------------------
# Inference
# ------------------------------------------------------------------------------------------------

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
        """Check a request against the advertised limits (REQ-CAP-009, REQ-SVC-003)."""
        rt = self.rt
        lim = lambda name: rt.limit("openengine.core", name)  # noqa: E731
        model = self.model(request.model)
        m = rt.models[model].config
        s = request.sampling
        kind = request.WhichOneof("prompt")
        if kind is None:
            raise invalid("prompt", "set text or token_ids")
        if kind == "token_ids":
            if not lim("token_ids_input"):
                raise invalid("token_ids", "pre-tokenized prompts are off (openengine.core.token_ids_input = false)")
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
        if n > lim("max_sequences"):
            raise invalid("sampling.n", f"{n} exceeds openengine.core.max_sequences = {lim('max_sequences')}")
        if s.HasField("logprobs") and s.logprobs > lim("max_logprobs"):
            raise invalid("sampling.logprobs", f"{s.logprobs} exceeds openengine.core.max_logprobs = {lim('max_logprobs')}")
        if s.HasField("prompt_logprobs"):
            if not lim("prompt_logprobs"):
                raise invalid("sampling.prompt_logprobs", "prompt log-probabilities are off (openengine.core.prompt_logprobs = false)")
            if s.prompt_logprobs > lim("max_logprobs"):
                raise invalid("sampling.prompt_logprobs", f"{s.prompt_logprobs} exceeds openengine.core.max_logprobs = {lim('max_logprobs')}")
        if s.HasField("min_p") and not lim("min_p"):
            raise invalid("sampling.min_p", "min-p sampling is off (openengine.core.min_p = false)")
        if s.logit_bias and not lim("logit_bias"):
            raise invalid("sampling.logit_bias", "logit bias is off (openengine.core.logit_bias = false)")
        guided = s.guided.WhichOneof("constraint") if s.HasField("guided") else None
        if guided is not None and guided not in lim("guided_decoding_modes"):
            modes = ", ".join(lim("guided_decoding_modes")) or "none"
            raise invalid(f"sampling.guided.{guided}",
                          f"mode not in openengine.core.guided_decoding_modes ({modes})")
        if guided == "json_object" and not s.guided.json_object:
            raise invalid("sampling.guided.json_object", "must be true when set")
        if guided == "choice" and not s.guided.choice.values:
            raise invalid("sampling.guided.choice", "needs at least one choice")
        if s.HasField("temperature") and s.temperature < 0:
            raise invalid("sampling.temperature", "must not be negative")
        if s.HasField("top_p") and not (0 < s.top_p <= 1):
            raise invalid("sampling.top_p", "must be in (0, 1]")
        room = m.max_context_tokens - len(prompt) - extra_tokens
        if s.HasField("max_tokens"):
            if s.max_tokens < 1:
                raise invalid("sampling.max_tokens", "must be at least 1")
            if s.max_tokens > m.max_output_tokens:
                raise invalid("sampling.max_tokens", f"{s.max_tokens} exceeds ModelInfo.max_output_tokens = {m.max_output_tokens}")
            if s.max_tokens > room:
                raise invalid("sampling.max_tokens", f"prompt plus {s.max_tokens} tokens exceed ModelInfo.max_context_tokens = {m.max_context_tokens}")
            max_tokens = s.max_tokens
        else:
            max_tokens = min(m.max_output_tokens, room)
        if s.HasField("min_tokens") and s.min_tokens > max_tokens:
            raise invalid("sampling.min_tokens", f"{s.min_tokens} exceeds max_tokens {max_tokens}")
        if request.HasField("adapter"):
            if not rt.has("openengine.adapters"):
                raise invalid("adapter", "openengine.adapters is not advertised")
            self.model_lists(model, "openengine.adapters", "adapter")
            loaded = rt.adapters.get(request.adapter)
            if loaded is None:
                raise Refused(Code.NOT_FOUND, f"adapter: no loaded adapter {request.adapter!r}")
            if loaded.model != model:
                raise invalid("adapter", f"{request.adapter!r} is loaded for model {loaded.model!r}, not {model!r}")
        if request.HasField("session_id"):
            if not rt.has("openengine.sessions"):
                raise invalid("session_id", "openengine.sessions is not advertised")
            rt.expire_sessions()
            if request.session_id not in rt.sessions:
                raise Refused(Code.NOT_FOUND, f"session_id: no open session {request.session_id!r}")
        kv = None
        if request.HasField("kv_transfer"):
            if not rt.has("openengine.kv"):
                raise invalid("kv_transfer", "openengine.kv is not advertised")
            kv = request.kv_transfer
            if kv.role == kv_pb2.KV_TRANSFER_ROLE_UNSPECIFIED:
                raise invalid("kv_transfer.role", "set KV_TRANSFER_ROLE_PRODUCER or KV_TRANSFER_ROLE_CONSUMER")
            backends = rt.limit("openengine.kv", "kv_transfer_backends")
            if kv.backend and kv.backend not in backends:
                raise invalid("kv_transfer.backend", f"{kv.backend!r} is not in openengine.kv.kv_transfer_backends "
                              f"({', '.join(backends) or 'none'})")
        return dict(prompt=prompt, n=n, max_tokens=max_tokens, guided=guided, kv=kv, extra_tokens=extra_tokens,
                    model=model)

    def validate_loosely(self, request) -> dict:
        """For the limits-not-enforced fault: only what the stand-in model needs to run."""
        prompt = list(request.token_ids.ids) if request.WhichOneof("prompt") == "token_ids" else lm.tokenize(request.text)
        s = request.sampling
        return dict(prompt=prompt or [0], n=max(1, min(s.n if s.HasField("n") else 1, 64)),
                    max_tokens=max(1, min(s.max_tokens if s.HasField("max_tokens") else 16, 4096)),
                    guided=None, kv=request.kv_transfer if request.HasField("kv_transfer") else None,
                    extra_tokens=0, model=self.rt.model_name)

    async def Generate(self, request: generation_pb2.GenerateRequest, context):
        rt = self.rt
        self.serving_work("openengine.v1.Inference")
        if rt.fault("limits-not-enforced"):
            plan = self.validate_loosely(request)
        else:
            plan = self.validate(request)
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
        try:
            async for message in self._run(req, request, plan, prompt, max_tokens, producer, context):
                yield message
        finally:
            rt.scheduler.release(req)

    async def _run(self, req, request, plan, prompt, max_tokens, producer, context):
        rt = self.rt
        s = request.sampling
        await req.scheduled.wait()
        if req.aborted is not None:
            if not rt.fault("generate-no-terminal"):
                yield _error(common_pb2.ERROR_CODE_ABORTED, f"aborted: {req.aborted[0]}", retryable=req.aborted[1])
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
            while rt.keep_paused and req.aborted is None:
                await asyncio.sleep(0.01)
            if req.aborted is not None and not rt.fault("abort-ignored"):
                if not rt.fault("generate-no-terminal"):
                    yield _error(common_pb2.ERROR_CODE_ABORTED, f"aborted: {req.aborted[0]}", retryable=req.aborted[1])
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


def _prompt_logprobs(prompt, k):
    out = []
    for tok, lp, top in lm.prompt_logprobs(prompt, max(k, 1)):
        out.append(generation_pb2.TokenLogprobs(
            token_id=tok, logprob=lp, rank=1,
            top=[generation_pb2.TopLogprob(token_id=t, logprob=v, token=lm.detokenize([t])) for t, v in top[:k]]))
    return out


# ------------------------------------------------------------------------------------------------
# Lifecycle
# ------------------------------------------------------------------------------------------------

class Lifecycle(Base):
    async def Abort(self, request: lifecycle_pb2.AbortRequest, context):
        rt = self.rt
        target = request.WhichOneof("target")
        if target is None:
            raise invalid("target", "set request_ids, kv_session_id or all")
        if target == "request_ids":
            ids = set(request.request_ids.values)
            match = lambda r: r.request_id in ids  # noqa: E731
        elif target == "kv_session_id":
            if not request.kv_session_id:
                raise invalid("kv_session_id", "must not be empty")
            match = lambda r: r.kv_session == request.kv_session_id  # noqa: E731
        else:
            if not request.all:
                raise invalid("all", "must be true when set")
            match = lambda r: True  # noqa: E731
        if rt.fault("abort-ignored"):
            count = sum(1 for r in rt.scheduler.in_flight() if match(r))
        else:
            count = rt.scheduler.abort(match, "cancelled by Abort", retryable=False)
        return lifecycle_pb2.AbortResponse(aborted=count)


# ------------------------------------------------------------------------------------------------
# Observability: load and runtime events
# ------------------------------------------------------------------------------------------------

class Observability(Base):
    def settings(self, request: load_pb2.WatchLoadRequest) -> tuple[int, int, bool, bool]:
        rt = self.rt
        lim = lambda name: rt.limit("openengine.load", name)  # noqa: E731
        lo, hi = lim("min_watch_interval_ms"), lim("max_watch_interval_ms")
        clamp = (lambda v: v) if rt.fault("watch-interval-not-clamped") else (lambda v: max(lo, min(hi, v)))
        if not request.HasField("interval_ms"):
            interval = lim("default_watch_interval_ms")
        elif request.interval_ms == 0:
            interval = 0 if lim("change_driven") else lo
        else:
            interval = clamp(request.interval_ms)
        if not request.HasField("heartbeat_ms"):
            heartbeat = lim("default_heartbeat_ms")
        elif request.heartbeat_ms == 0:
            heartbeat = 0
        else:
            heartbeat = clamp(request.heartbeat_ms)
        initial = request.initial_snapshot if request.HasField("initial_snapshot") else True
        per_rank = bool(request.per_rank and lim("per_rank"))
        return interval, heartbeat, initial, per_rank

    async def GetLoad(self, request: load_pb2.GetLoadRequest, context):
        info = self.rt.build_load(per_rank=request.per_rank)
        if self.rt.fault("getload-instance-mismatch"):
            info.instance_id = "not-" + info.instance_id
        return info

    async def WatchLoad(self, request: load_pb2.WatchLoadRequest, context):
        from openengine.engine.load import Watcher

        rt = self.rt
        max_watchers = rt.limit("openengine.load", "max_watchers")
        if len(rt.load) >= max_watchers and not rt.fault("watch-max-watchers-ignored"):
            raise Refused(Code.RESOURCE_EXHAUSTED,
                          f"{len(rt.load)} WatchLoad streams are open, openengine.load.max_watchers = {max_watchers}")
        interval, heartbeat, initial, per_rank = self.settings(request)
        watcher = Watcher(interval, heartbeat, per_rank, rt.revision,
                          count_coalesced=not rt.fault("watch-silent-gap"))
        instance_id = ("not-" + rt.instance_id) if rt.fault("watch-instance-id-mismatch") else rt.instance_id
        sequence = 0
        back = rt.fault("watch-timestamp-backwards")
        stuck = rt.fault("watch-sequence-not-increasing")
        loop = asyncio.get_running_loop()
        last_sent = loop.time()

        def message(**kind) -> load_pb2.WatchLoadResponse:
            nonlocal sequence
            ts_ns = rt.clock.now_ns()
            if back and sequence % 2 == 1:
                ts_ns -= 1_000_000_000
            msg = load_pb2.WatchLoadResponse(sequence=sequence, **kind)
            msg.timestamp.seconds, msg.timestamp.nanos = divmod(ts_ns, 1_000_000_000)
            if not (stuck and sequence > 0 and sequence % 3 == 2):
                sequence += 1
            return msg

        def snapshot_message(info, coalesced):
            msg = message()
            snapshot = msg.snapshot
            snapshot.load.CopyFrom(info)   # the one copy: the mailbox keeps its own snapshot
            snapshot.load.instance_id = instance_id
            snapshot.coalesced = coalesced
            return msg

        settings = load_pb2.WatchLoadSettings(interval_ms=interval, heartbeat_ms=heartbeat,
                                              initial_snapshot=initial, per_rank=per_rank,
                                              instance_id=instance_id, capability_revision=rt.revision)
        rt.load.open(watcher)
        try:
            if rt.fault("watch-settings-not-first"):
                yield snapshot_message(rt.build_load(per_rank), 0)
                yield message(settings=settings)
            else:
                yield message(settings=settings)
                if initial and not rt.fault("watch-no-initial-snapshot"):
                    yield snapshot_message(rt.build_load(per_rank), 0)
            if rt.fault("watch-ends-ok"):
                return
            last_sent = loop.time()
            heartbeats = heartbeat > 0 and not rt.fault("watch-missing-heartbeat")
            while True:
                if watcher.closed_with is not None:
                    code, text = watcher.closed_with
                    raise Refused(code, text)
                taken = watcher.take(lambda: rt.build_load(per_rank))
                if taken is not None:
                    yield snapshot_message(*taken)
                    last_sent = loop.time()
                    continue
                watcher.wake.clear()
                if not heartbeats:
                    await watcher.wake.wait()
                    continue
                # A timer that sets the same event, not asyncio.wait_for: wait_for starts a task
                # per wait, which on this path would cost more than building the snapshot.
                due = last_sent + heartbeat / 1000.0
                alarm = loop.call_at(due, watcher.wake.set)
                try:
                    await watcher.wake.wait()
                finally:
                    alarm.cancel()
                if loop.time() >= due and watcher.pending is None and not watcher.dirty \
                        and watcher.closed_with is None:
                    yield message(heartbeat=load_pb2.Heartbeat())
                    last_sent = loop.time()
        except asyncio.CancelledError:
            if rt.fault("watch-cancel-aborts-requests"):
                rt.scheduler.abort(lambda r: True, "load watcher cancelled", retryable=True)
            raise
        finally:
            rt.load.close(watcher)

    async def SubscribeRuntimeEvents(self, request: events_pb2.SubscribeRuntimeEventsRequest, context):
        from openengine.engine.runtime import Subscriber

        rt = self.rt
        cap = rt.limit("openengine.runtime-events", "max_subscribers")
        if len(rt.runtime_events.subscribers) >= cap:
            raise Refused(Code.RESOURCE_EXHAUSTED,
                          f"{cap} runtime event streams are open, openengine.runtime-events.max_subscribers = {cap}")
        sub = Subscriber(rt.runtime_events.capacity)
        rt.runtime_events.subscribers.add(sub)
        sequence = 0 if rt.fault("events-sequence-from-zero") else 1
        try:
            if request.initial_state:
                sub.put((rt.clock.now_ns(), ES.RuntimeEvent(state_changed=ES.StateChanged(
                    previous=rt.state, state=rt.state, reason="current state"))))
            while True:
                while sub.items:
                    ts, event = sub.items.popleft()
                    yield ES.SubscribeRuntimeEventsResponse(sequence=sequence, timestamp=rt.clock.timestamp(ts),
                                                            event=event)
                    sequence += 1
                if sub.overflowed:
                    raise Refused(Code.RESOURCE_EXHAUSTED, "the subscriber fell too far behind; subscribe again")
                if sub.closed_with is not None:
                    raise Refused(*sub.closed_with)
                sub.wake.clear()
                await sub.wake.wait()
        finally:
            rt.runtime_events.subscribers.discard(sub)


# ------------------------------------------------------------------------------------------------
# KV
# ------------------------------------------------------------------------------------------------

class Kv(Base):
    async def GetKvEventSources(self, request, context):
        replay = self.rt.address if self.rt.limit("openengine.kv", "event_replay") else ""
        return kv_pb2.GetKvEventSourcesResponse(sources=[kv_pb2.KvEventSource(
            publisher="grpc", endpoint=self.rt.address, replay_endpoint=replay)])

    async def SubscribeKvEvents(self, request: kv_pb2.SubscribeKvEventsRequest, context):
        from openengine.engine.runtime import Subscriber

        rt = self.rt
        if request.HasField("from_sequence") and not rt.limit("openengine.kv", "event_replay"):
            raise invalid("from_sequence", "replay is off (openengine.kv.event_replay = false)")
        if request.HasField("data_parallel_rank") and request.data_parallel_rank >= rt.config.data_parallel_size:
            raise invalid("data_parallel_rank", f"the engine has {rt.config.data_parallel_size} rank(s)")
        sub = Subscriber(max(64, int(rt.limit("openengine.kv", "event_buffer_size") or 0)))
        rt.kv_events.subscribers.add(sub)
        try:
            if request.HasField("from_sequence"):
                for batch in list(rt.kv_buffer):
                    if batch.sequence >= request.from_sequence:
                        yield batch
            dropped = 0
            while True:
                while sub.items:
                    batch = sub.items.popleft()
                    if dropped:
                        batch = kv_pb2.SubscribeKvEventsResponse.FromString(batch.SerializeToString())
                        batch.dropped, dropped = dropped, 0
                    yield batch
                if sub.overflowed:
                    dropped += 1
                    sub.overflowed = False
                if sub.closed_with is not None:
                    raise Refused(*sub.closed_with)
                sub.wake.clear()
                await sub.wake.wait()
        finally:
            rt.kv_events.subscribers.discard(sub)


# ------------------------------------------------------------------------------------------------
# Tasks and encoder
# ------------------------------------------------------------------------------------------------

class Tasks(Base):
    def _check(self, family: str, model: str, count: int, field: str) -> str:
        rt = self.rt
        self.serving_work("openengine.v1.Tasks")
        model = self.model(model)
        self.model_lists(model, "openengine.tasks")
        families = rt.model_limit(model, "openengine.tasks", "supported_tasks")
        if family not in families:
            raise invalid("model", f"model {model!r} does not serve {family} (openengine.tasks.supported_tasks: "
                          f"{', '.join(families) or 'none'})")
        cap = rt.model_limit(model, "openengine.tasks", "max_inputs_per_request")
        if count == 0:
            raise invalid(field, "needs at least one input")
        if count > cap:
            raise invalid(field, f"{count} inputs exceed openengine.tasks.max_inputs_per_request = {cap}")
        return model

    def _ids(self, model: str, item: tasks_pb2.TaskInput, field: str, truncate: int | None) -> list[int]:
        kind = item.WhichOneof("input")
        if kind is None:
            raise invalid(field, "set text or token_ids")
        ids = list(item.token_ids.ids) if kind == "token_ids" else lm.tokenize(item.text)
        limit = self.rt.models[model].config.max_context_tokens
        if truncate is not None:
            ids = ids[-truncate:] if truncate else []
        elif len(ids) > limit:
            raise invalid(field, f"{len(ids)} tokens exceed ModelInfo.max_context_tokens = {limit}; set truncate_tokens")
        return ids

    async def Embed(self, request: tasks_pb2.EmbedRequest, context):
        rt = self.rt
        model = self._check("embed", request.model, len(request.inputs), "inputs")
        size = int(rt.model_limit(model, "openengine.tasks", "embedding_size"))
        if size == 0:
            raise invalid("model", "the model does not embed (openengine.tasks.embedding_size = 0)")
        if request.HasField("dimensions"):
            if not rt.model_limit(model, "openengine.tasks", "matryoshka") and request.dimensions != size:
                raise invalid("dimensions", "reduced dimensions are off (openengine.tasks.matryoshka = false)")
            if not 1 <= request.dimensions <= size:
                raise invalid("dimensions", f"must be in 1..{size} (openengine.tasks.embedding_size)")
            size = request.dimensions
        truncate = request.truncate_tokens if request.HasField("truncate_tokens") else None
        normalize = request.normalize if request.HasField("normalize") else True
        out = tasks_pb2.EmbedResponse()
        tokens = 0
        for i, item in enumerate(request.inputs):
            ids = self._ids(model, item, f"inputs[{i}]", truncate)
            tokens += len(ids)
            out.embeddings.add(index=i, values=lm.embed(ids, size, normalize=normalize))
        out.usage.prompt_tokens = tokens
        return out

    async def Classify(self, request: tasks_pb2.ClassifyRequest, context):
        model = self._check("classify", request.model, len(request.inputs), "inputs")
        truncate = request.truncate_tokens if request.HasField("truncate_tokens") else None
        out = tasks_pb2.ClassifyResponse()
        tokens = 0
        for i, item in enumerate(request.inputs):
            ids = self._ids(model, item, f"inputs[{i}]", truncate)
            tokens += len(ids)
            c = out.classifications.add(index=i)
            for label, p in lm.classify(ids):
                c.labels.add(label=label, probability=p)
        out.usage.prompt_tokens = tokens
        return out

    async def Score(self, request: tasks_pb2.ScoreRequest, context):
        model = self._check("score", request.model, len(request.documents), "documents")
        truncate = request.truncate_tokens if request.HasField("truncate_tokens") else None
        query = self._ids(model, request.query, "query", truncate)
        out = tasks_pb2.ScoreResponse()
        tokens = len(query)
        for i, doc in enumerate(request.documents):
            ids = self._ids(model, doc, f"documents[{i}]", truncate)
            tokens += len(ids)
            out.scores.add(index=i, score=lm.score(query, ids))
        out.usage.prompt_tokens = tokens
        return out


class Encoder(Base):
    async def Encode(self, request: encoder_pb2.EncodeRequest, context):
        rt = self.rt
        self.serving_work("openengine.v1.Encoder")
        self.model(request.model)
        cap = rt.limit("openengine.encoder", "max_items_per_request")
        if not request.items:
            raise invalid("items", "needs at least one item")
        if len(request.items) > cap:
            raise invalid("items", f"{len(request.items)} items exceed openengine.encoder.max_items_per_request = {cap}")
        modalities = rt.limit("openengine.encoder", "modalities")
        ttl = int(rt.limit("openengine.encoder", "handle_ttl_ms"))
        now = rt.clock.now_ns()
        for handle in [h for h, (_, exp) in rt.encoder_cache.items() if exp <= now]:
            del rt.encoder_cache[handle]
        out = encoder_pb2.EncodeResponse()
        for i, item in enumerate(request.items):
            kind = item.WhichOneof("item")
            if kind is None:
                raise invalid(f"items[{i}]", "set image, audio or video")
            if kind not in modalities:
                raise invalid(f"items[{i}].{kind}", f"modality not in openengine.encoder.modalities "
                              f"({', '.join(modalities) or 'none'})")
            media = getattr(item, kind)
            payload = media.data if media.WhichOneof("source") == "data" else media.url.encode()
            if not payload:
                raise invalid(f"items[{i}].{kind}", "set data or url")
            handle, tokens = lm.encode_item(payload)
            expires = now + ttl * 1_000_000
            rt.encoder_cache[handle] = (tokens, expires)
            out.handles.add(handle=handle, encoder_instance_id=rt.instance_id, transfer_address=rt.address,
                            item_id=item.item_id, num_tokens=tokens, expires_at=rt.clock.timestamp(expires))
        return out


# ------------------------------------------------------------------------------------------------
# Sessions and adapters
# ------------------------------------------------------------------------------------------------

class Sessions(Base):
    def _info(self, s: Session) -> sessions_pb2.SessionInfo:
        return sessions_pb2.SessionInfo(session_id=s.session_id, model=s.model, capacity_tokens=s.capacity_tokens,
                                        ttl_ms=s.ttl_ms, retained_tokens=s.retained_tokens,
                                        expires_at=self.rt.clock.timestamp(s.expires_ns))

    async def OpenSession(self, request: sessions_pb2.OpenSessionRequest, context):
        rt = self.rt
        model = self.model(request.model)
        rt.expire_sessions()
        lim = lambda name: rt.limit("openengine.sessions", name)  # noqa: E731
        if len(rt.sessions) >= lim("max_sessions"):
            raise Refused(Code.RESOURCE_EXHAUSTED, f"{len(rt.sessions)} sessions are open, "
                          f"openengine.sessions.max_sessions = {lim('max_sessions')}")
        sid = request.session_id or f"sess-{uuid.uuid4().hex[:12]}"
        if sid in rt.sessions:
            raise Refused(Code.ALREADY_EXISTS, f"session_id: {sid!r} is already open")
        max_tokens = lim("max_session_tokens")
        bound = max_tokens or rt.models[model].config.max_context_tokens
        if request.HasField("capacity_tokens"):
            if request.capacity_tokens > bound:
                raise invalid("capacity_tokens", f"{request.capacity_tokens} exceeds "
                              f"{'openengine.sessions.max_session_tokens' if max_tokens else 'ModelInfo.max_context_tokens'} = {bound}")
            capacity = request.capacity_tokens
        else:
            capacity = bound
        if request.HasField("ttl_ms"):
            ttl = request.ttl_ms if rt.fault("session-ttl-not-clamped") else min(request.ttl_ms, lim("max_session_ttl_ms"))
            if ttl == 0:
                raise invalid("ttl_ms", "must be positive")
        else:
            ttl = lim("default_session_ttl_ms")
        session = Session(sid, model, capacity, ttl, expires_ns=rt.clock.now_ns() + ttl * 1_000_000)
        rt.sessions[sid] = session
        rt.load_changed()
        return sessions_pb2.OpenSessionResponse(session=self._info(session))

    async def CloseSession(self, request, context):
        closed = self.rt.sessions.pop(request.session_id, None) is not None
        if closed:
            self.rt.load_changed()
        return sessions_pb2.CloseSessionResponse(closed=closed)

    async def ListSessions(self, request, context):
        rt = self.rt
        rt.expire_sessions()
        if request.model:
            self.model(request.model)
        return sessions_pb2.ListSessionsResponse(sessions=[self._info(s) for s in rt.sessions.values()])


class Adapters(Base):
    def _info(self, a: Adapter, resident: bool) -> adapters_pb2.AdapterInfo:
        return adapters_pb2.AdapterInfo(name=a.name, model=a.model, source=a.source, rank=a.rank,
                                        resident=resident, pinned=a.pinned)

    def _resident(self) -> set[str]:
        """Per model: pinned adapters first, then the most recently loaded, up to its max_loras on
        the accelerator."""
        out: set[str] = set()
        for model in self.rt.models:
            cap = self.rt.model_limit(model, "openengine.adapters", "max_loras")
            ordered = sorted(self._of(model), key=lambda a: not a.pinned)
            out |= {a.name for a in ordered[:cap]}
        return out

    def _of(self, model: str) -> list[Adapter]:
        return [a for a in self.rt.adapters.values() if a.model == model]

    async def LoadAdapter(self, request: adapters_pb2.LoadAdapterRequest, context):
        rt = self.rt
        model = self.model(request.model)
        self.model_lists(model, "openengine.adapters")
        lim = lambda name: rt.model_limit(model, "openengine.adapters", name)  # noqa: E731
        if not request.name:
            raise invalid("name", "must not be empty")
        if not request.source:
            raise invalid("source", "must not be empty")
        rank = request.rank if request.HasField("rank") else min(16, lim("max_lora_rank"))
        if rank < 1 or rank > lim("max_lora_rank"):
            raise invalid("rank", f"{rank} is outside 1..openengine.adapters.max_lora_rank = {lim('max_lora_rank')}")
        if request.name in rt.adapters:
            raise Refused(Code.ALREADY_EXISTS, f"name: adapter {request.name!r} is already loaded")
        capacity = max(lim("max_loras"), lim("max_cpu_loras"))
        loaded = self._of(model)
        if len(loaded) >= capacity:
            raise Refused(Code.RESOURCE_EXHAUSTED,
                          f"{len(loaded)} adapters are loaded for {model!r}, openengine.adapters.max_loras = "
                          f"{lim('max_loras')}, max_cpu_loras = {lim('max_cpu_loras')}; unload one first")
        pinned = sum(1 for a in loaded if a.pinned)
        if request.pinned and pinned >= lim("max_loras"):
            raise Refused(Code.RESOURCE_EXHAUSTED,
                          f"{pinned} adapters are pinned, openengine.adapters.max_loras = {lim('max_loras')}")
        adapter = Adapter(request.name, model, request.source, rank, request.pinned)
        rt.adapters[request.name] = adapter
        rt.emit(ES.RuntimeEvent(adapter_loaded=ES.AdapterLoaded(name=adapter.name, model=model)), "adapter_loaded")
        return adapters_pb2.LoadAdapterResponse(adapter=self._info(adapter, adapter.name in self._resident()))

    async def UnloadAdapter(self, request, context):
        rt = self.rt
        model = self.model(request.model) if request.model else None
        adapter = rt.adapters.get(request.name)
        if adapter is not None and model is not None and adapter.model != model:
            adapter = None  # loaded, but for another model
        if adapter is not None:
            del rt.adapters[adapter.name]
            rt.emit(ES.RuntimeEvent(adapter_unloaded=ES.AdapterUnloaded(name=adapter.name, model=adapter.model)),
                    "adapter_unloaded")
        return adapters_pb2.UnloadAdapterResponse(unloaded=adapter is not None)

    async def ListAdapters(self, request, context):
        model = self.model(request.model) if request.model else None
        resident = self._resident()
        return adapters_pb2.ListAdaptersResponse(
            adapters=[self._info(a, a.name in resident) for a in self.rt.adapters.values()
                      if model is None or a.model == model])


# ------------------------------------------------------------------------------------------------
# Admin
# ------------------------------------------------------------------------------------------------

class Admin(Base):
    async def Drain(self, request: admin_pb2.DrainRequest, context):
        rt = self.rt
        loop = asyncio.get_running_loop()
        deadline = None
        if request.HasField("deadline_ms"):
            deadline = loop.time() + min(request.deadline_ms, rt.limit("openengine.admin", "max_drain_deadline_ms")) / 1000.0
        await rt.set_state(ES.ENGINE_STATE_DRAINING, "Drain")
        aborted = 0
        while True:
            remaining = len(rt.scheduler.in_flight())
            done = remaining == 0
            yield admin_pb2.DrainResponse(remaining_requests=remaining, aborted_requests=aborted, done=done,
                                          timestamp=rt.clock.timestamp())
            if done:
                return
            if deadline is not None and loop.time() >= deadline:
                aborted += rt.scheduler.abort(lambda r: True, "drain deadline passed", retryable=True)
            await asyncio.sleep(0.05)

    async def PauseGeneration(self, request: admin_pb2.PauseGenerationRequest, context):
        rt = self.rt
        modes = rt.limit("openengine.admin", "pause_modes")
        spellings = rt.catalogue.limit("openengine.admin.pause_modes").enum_spellings()
        by_number = {number: name for name, number in spellings.items()}
        # An unspecified mode means abort (admin.proto).
        mode = by_number.get(request.mode or spellings.get("abort", 0))
        if mode is None or mode not in modes:
            raise invalid("mode", f"{mode or request.mode} is not in openengine.admin.pause_modes ({', '.join(modes)})")
        await rt.set_state(ES.ENGINE_STATE_PAUSED, f"PauseGeneration ({mode})")
        aborted = kept = 0
        if mode == "abort":
            aborted = rt.scheduler.abort(lambda r: True, "generation paused", retryable=True)
        elif mode == "wait":
            loop = asyncio.get_running_loop()
            until = loop.time() + request.timeout_ms / 1000.0 if request.HasField("timeout_ms") else None
            while rt.scheduler.in_flight() and (until is None or loop.time() < until):
                await asyncio.sleep(0.01)
            aborted = rt.scheduler.abort(lambda r: True, "pause timeout passed", retryable=True)
        else:
            rt.keep_paused = True
            kept = len(rt.scheduler.in_flight())
        return admin_pb2.PauseGenerationResponse(aborted_requests=aborted, kept_requests=kept)

    async def ResumeGeneration(self, request, context):
        rt = self.rt
        if rt.state not in (ES.ENGINE_STATE_PAUSED, ES.ENGINE_STATE_DRAINING):
            return admin_pb2.ResumeGenerationResponse(resumed=False)
        rt.keep_paused = False
        await rt.set_state(ES.ENGINE_STATE_SERVING, "ResumeGeneration")
        return admin_pb2.ResumeGenerationResponse(resumed=True)

    async def Sleep(self, request: admin_pb2.SleepRequest, context):
        rt = self.rt
        level = request.level or 1
        deepest = rt.limit("openengine.admin", "max_sleep_level")
        if level > deepest:
            raise invalid("level", f"{level} exceeds openengine.admin.max_sleep_level = {deepest}")
        tags = set(request.tags)
        known = set(rt.limit("openengine.admin", "wake_tags"))
        if tags - known:
            raise invalid("tags", f"{', '.join(sorted(tags - known))} not in openengine.admin.wake_tags "
                          f"({', '.join(sorted(known)) or 'none'})")
        if rt.scheduler.in_flight():
            raise Refused(Code.FAILED_PRECONDITION, "requests are in flight; drain or pause first")
        rt.sleeping_tags |= tags or known or {"all"}
        if not tags or "kv_cache" in tags:
            rt.clear_prefix_cache()
        await rt.set_state(ES.ENGINE_STATE_SLEEPING, f"Sleep (level {level})")
        return admin_pb2.SleepResponse(released_bytes=(1 << 30) * level)

    async def WakeUp(self, request: admin_pb2.WakeUpRequest, context):
        rt = self.rt
        tags = set(request.tags)
        known = set(rt.limit("openengine.admin", "wake_tags"))
        if tags - known:
            raise invalid("tags", f"{', '.join(sorted(tags - known))} not in openengine.admin.wake_tags")
        if rt.state != ES.ENGINE_STATE_SLEEPING:
            return admin_pb2.WakeUpResponse(awake=True)
        rt.sleeping_tags = (rt.sleeping_tags - tags) if tags else set()
        if rt.sleeping_tags - {"all"} and tags:
            return admin_pb2.WakeUpResponse(awake=False)
        rt.sleeping_tags = set()
        await rt.set_state(ES.ENGINE_STATE_SERVING, "WakeUp")
        return admin_pb2.WakeUpResponse(awake=True)

    async def ResetPrefixCache(self, request, context):
        rt = self.rt
        if rt.scheduler.running:
            return admin_pb2.ResetPrefixCacheResponse(reset=False, freed_blocks=0)
        return admin_pb2.ResetPrefixCacheResponse(reset=True, freed_blocks=rt.clear_prefix_cache())

    async def UpdateConfig(self, request: admin_pb2.UpdateConfigRequest, context):
        rt = self.rt
        updatable = set(rt.limit("openengine.admin", "updatable_limits"))
        new = {k: dict(v) for k, v in rt.limits.items()}
        new_models = {m: {k: dict(v) for k, v in per.items()} for m, per in rt.model_limits.items()}
        changed = []
        for i, update in enumerate(request.updates):
            where = f"updates[{i}]"
            lim = rt.catalogue.limit(update.limit)
            if lim is None or lim.profile not in new:
                raise invalid(f"{where}.limit", f"{update.limit!r} is not a limit of an advertised profile")
            if update.limit not in updatable:
                raise invalid(f"{where}.limit", f"{update.limit} is not in openengine.admin.updatable_limits")
            if update.model and update.model not in rt.models:
                raise Refused(Code.NOT_FOUND, f"{where}.model: no served model {update.model!r}")
            # A model-scoped limit named for one model changes that model's value only.
            per_model = bool(update.model) and rt.catalogue.profile(lim.profile).scope == "model"
            if per_model:
                self.model_lists(update.model, lim.profile, f"{where}.model")
            kind = update.WhichOneof("value")
            if kind is None:
                raise invalid(f"{where}.value", "set the new value")
            value = getattr(update, kind)
            if kind == "string_values":
                value = list(value.values)
            try:
                value = coerce(lim, value)
            except ValueError as err:
                raise invalid(f"{where}.{kind}", str(err)) from None
            if per_model:
                own = new_models.setdefault(update.model, {}).setdefault(lim.profile, {})
                current = own.get(lim.name, new[lim.profile][lim.name])
                own[lim.name] = value
            else:
                # An empty model means every model: no model keeps its own value of the limit.
                current = new[lim.profile][lim.name]
                new[lim.profile][lim.name] = value
                for per in new_models.values():
                    if lim.name in per.get(lim.profile, {}):
                        if per[lim.profile].pop(lim.name) != value:
                            current = None
            if current != value and update.limit not in changed:
                changed.append(update.limit)
        from openengine.engine.config import _reference_engine_problems

        problems = _reference_engine_problems(new) + rt.check_update(new)
        if problems:
            raise invalid("updates", "; ".join(problems))
        if request.validate_only or not changed:
            return admin_pb2.UpdateConfigResponse(previous_revision=rt.revision, revision=rt.revision,
                                                  changed_limits=changed)
        previous, revision = rt.apply_limits(new, changed, model_limits=new_models)
        return admin_pb2.UpdateConfigResponse(previous_revision=previous, revision=revision, changed_limits=changed)


SERVICES = {
    "openengine.v1.Discovery": Discovery, "openengine.v1.Inference": Inference,
    "openengine.v1.Lifecycle": Lifecycle, "openengine.v1.Observability": Observability,
    "openengine.v1.Kv": Kv, "openengine.v1.Tasks": Tasks, "openengine.v1.Encoder": Encoder,
    "openengine.v1.Sessions": Sessions, "openengine.v1.Adapters": Adapters, "openengine.v1.Admin": Admin,
}
