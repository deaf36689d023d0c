"""The upstream-only engine's gRPC services: `openengine.v1.Inference` and `openengine.v1.Control`
as upstream v1 declares them, on a `grpc.aio` server, and nothing else.

Imported only by engine.py, after it has put upstream's stubs first on sys.path: every
`openengine` import here is upstream's generated code. A planted defect is one `if` on
`self.variant` at the single place its clause applies.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import signal
import time
import uuid
from dataclasses import dataclass, field

import grpc

from openengine.v1 import (
    generation_pb2 as gen, kv_pb2, lifecycle_pb2 as life, model_pb2, openengine_pb2_grpc as rpc,
    server_pb2,
)

import model as toy

MODEL = "toy-bytes"
ENGINE_NAME = "upstream-test-engine"
ENGINE_VERSION = "0.1.0"
SCHEMA_RELEASE = "4def7c5"
MAX_NUM_SEQUENCES = 4
MAX_TOP_N = 5
DEFAULT_MAX_TOKENS = 64
RECENT = 4096                  # finished request ids remembered for ALREADY_FINISHED
SUPPORTED_SELECTIONS = ("top_n", "token_ids")
UINT32, INT32 = (0, 2**32 - 1), (-2**31, 2**31 - 1)


@dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 0
    slots: int = 4                      # requests that run at once; the rest wait in order
    token_ms: float = 4.0               # time between one output's tokens
    max_output_tokens: int = 2048
    max_context_length: int = 8192
    variant: str | None = None


class Refused(Exception):
    """A request refused before acceptance: a non-OK status and no response event."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class Output:
    index: int
    sampler: toy.Sampler
    previous: int
    generated: int = 0            # tokens the model produced, held back ones included
    emitted: int = 0              # token records sent
    pending: list = field(default_factory=list)    # (token info, text) held back for stop strings
    tail: str = ""                # recent output text, for stop strings that span tokens
    done: bool = False


class Job:
    def __init__(self, request: gen.GenerateRequest, request_id: str, prompt: list[int]):
        self.request, self.request_id, self.prompt = request, request_id, prompt
        self.outputs: list[Output] = []
        self.wake = asyncio.Event()     # a slot was given, or the request was aborted
        self.stop = asyncio.Event()     # aborted: cuts the wait for the next token short
        self.released = asyncio.Event()
        self.aborted = False
        self.sent = 0


class Engine:
    def __init__(self, config: Config):
        self.config = config
        self.variant = config.variant
        self.instance_id = f"{ENGINE_NAME}-{uuid.uuid4().hex[:12]}"
        self.active: dict[str, Job] = {}
        self.running: set[Job] = set()
        self.waiting: collections.deque[Job] = collections.deque()
        self.recent: collections.OrderedDict[str, None] = collections.OrderedDict()

    # -- scheduling ------------------------------------------------------------------------------

    async def acquire(self, job: Job) -> bool:
        """Wait for a slot in arrival order; False when the request was aborted while waiting."""
        if len(self.running) < self.config.slots and not self.waiting:
            self.running.add(job)
            return True
        self.waiting.append(job)
        try:
            await job.wake.wait()
        finally:
            if job in self.waiting:
                self.waiting.remove(job)
        return job in self.running

    def release(self, job: Job) -> None:
        if job.released.is_set():
            return
        self.running.discard(job)
        if job in self.waiting:
            self.waiting.remove(job)
        self.active.pop(job.request_id, None)
        self.recent[job.request_id] = None
        while len(self.recent) > RECENT:
            self.recent.popitem(last=False)
        job.released.set()
        while self.waiting and len(self.running) < self.config.slots:
            nxt = self.waiting.popleft()
            self.running.add(nxt)
            nxt.wake.set()

    def abort(self, job: Job) -> None:
        if self.variant == "abort-ignored":
            return
        job.aborted = True
        job.wake.set()
        job.stop.set()

    # -- validation ------------------------------------------------------------------------------

    def check_model(self, name: str) -> None:
        if name and name != MODEL:
            raise Refused(grpc.StatusCode.NOT_FOUND, f"model {name!r} is not served (serving {MODEL!r})")

    @staticmethod
    def check_metadata(metadata) -> None:
        seen: dict[str, str] = {}
        for key, value in metadata or ():
            if not key.startswith("openengine-"):
                continue
            if key in seen:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"metadata key {key} sent twice")
            seen[key] = value
            bounds = {"openengine-target-dp-rank": UINT32, "openengine-priority": INT32}.get(key)
            if bounds is not None:
                try:
                    number = int(value, 10)
                except (TypeError, ValueError):
                    number = None
                if number is None or not bounds[0] <= number <= bounds[1] or not value.lstrip("-").isdigit():
                    raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"metadata {key}: {value!r} is not a number")
                if key == "openengine-target-dp-rank" and number != 0:
                    raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"there is no data-parallel rank {number}")
            elif key == "openengine-routing-key" and not (value and value.isascii()):
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "openengine-routing-key must be non-empty ASCII")

    def prompt_of(self, request: gen.GenerateRequest) -> list[int]:
        which = request.WhichOneof("input")
        if which == "prompt":
            prompt = toy.tokenize(request.prompt)
        elif which == "token_ids":
            prompt = list(request.token_ids.ids)
            bad = [t for t in prompt if t >= toy.VOCAB_SIZE]
            if bad:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                              f"token id {bad[0]} is outside the vocabulary (0..{toy.VOCAB_SIZE - 1})")
        else:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "the request has neither prompt nor token_ids")
        if not prompt:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "the prompt is empty")
        if len(prompt) > self.config.max_context_length:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                          f"{len(prompt)} prompt tokens exceed max_context_length {self.config.max_context_length}")
        return prompt

    def check_request(self, request: gen.GenerateRequest, prompt: list[int]) -> None:
        bad = grpc.StatusCode.INVALID_ARGUMENT
        s, st, r = request.sampling, request.stopping, request.response
        if s.HasField("temperature") and not s.temperature >= 0.0:
            raise Refused(bad, "temperature must be zero or more")
        if s.HasField("top_p") and not 0.0 < s.top_p <= 1.0:
            raise Refused(bad, "top_p must be in (0, 1]")
        if s.HasField("num_sequences") and not 1 <= s.num_sequences <= MAX_NUM_SEQUENCES:
            raise Refused(bad, f"num_sequences must be 1..{MAX_NUM_SEQUENCES}")
        if st.HasField("max_tokens") and not 1 <= st.max_tokens <= self.config.max_output_tokens:
            raise Refused(bad, f"max_tokens must be 1..{self.config.max_output_tokens} (max_output_tokens)")
        max_tokens = st.max_tokens if st.HasField("max_tokens") else DEFAULT_MAX_TOKENS
        if st.min_tokens > max_tokens:
            raise Refused(bad, f"min_tokens {st.min_tokens} exceeds max_tokens {max_tokens}")
        if len(prompt) + max_tokens > self.config.max_context_length:
            raise Refused(bad, f"prompt and max_tokens exceed max_context_length {self.config.max_context_length}")
        for cond in st.conditions:
            which = cond.WhichOneof("condition")
            if which is None or (which == "stop_text" and not cond.stop_text):
                raise Refused(bad, "a stop condition must be a non-empty stop_text or a stop_token_id")
            if which == "stop_token_id" and cond.stop_token_id >= toy.VOCAB_SIZE:
                raise Refused(bad, f"stop_token_id {cond.stop_token_id} is outside the vocabulary")
        for name in ("prompt_candidates", "output_candidates"):
            sel = getattr(r, name)
            which = sel.WhichOneof("selection")
            if which is not None and which not in SUPPORTED_SELECTIONS:
                raise Refused(bad, f"{name}: selection {which!r} is not supported")
            if which == "top_n" and sel.top_n > MAX_TOP_N:
                raise Refused(bad, f"{name}: top_n {sel.top_n} exceeds max_top_n {MAX_TOP_N}")
            if which == "token_ids" and any(t >= toy.VOCAB_SIZE for t in sel.token_ids.ids):
                raise Refused(bad, f"{name}: a candidate token id is outside the vocabulary")
        if r.HasField("prompt_logprob_start") and r.prompt_logprob_start >= len(prompt):
            raise Refused(bad, "prompt_logprob_start is past the end of the prompt")
        if request.kv.HasField("session"):
            raise Refused(bad, "an aggregated engine takes no KV session")
        if request.kv.HasField("bypass_prefix_cache") or request.kv.HasField("cache_salt"):
            raise Refused(bad, "prefix-cache options are not supported")
        if request.guided.WhichOneof("guide") is not None:
            raise Refused(bad, "guided decoding is not supported")
        if request.media:
            raise Refused(bad, "media inputs are not supported")
        if request.lora_name:
            raise Refused(bad, "LoRA adapters are not supported")

    # -- the model, per output -------------------------------------------------------------------

    def token_info(self, token: int, logprobs: list[float], selection, with_logprobs: bool) -> gen.TokenInfo:
        info = gen.TokenInfo(token_id=token, token=toy.token_text(token))
        if not with_logprobs or self.variant == "logprobs-ignored":
            return info
        order = toy.ranked(logprobs)
        rank = {t: k + 1 for k, t in enumerate(order)}
        info.logprob, info.rank = logprobs[token], rank[token]
        which = selection.WhichOneof("selection")
        ids = order[:selection.top_n] if which == "top_n" else list(selection.token_ids.ids) if which == "token_ids" else []
        info.candidates.extend(gen.LogProb(token_id=t, logprob=logprobs[t], token=toy.token_text(t), rank=rank[t])
                               for t in ids)
        return info

    def prompt_output(self, job: Job) -> gen.PromptOutput:
        r = job.request.response
        out = gen.PromptOutput()
        for k in range(r.prompt_logprob_start, len(job.prompt)):
            token = job.prompt[k]
            if k == 0:      # nothing precedes it, so it has no conditional probability
                out.tokens.append(gen.TokenInfo(token_id=token, token=toy.token_text(token)))
                continue
            lps = toy.log_softmax(toy.scores(toy.context_key(job.prompt[:k]), 0, job.prompt[k - 1]))
            out.tokens.append(self.token_info(token, lps, r.prompt_candidates, True))
        return out

    def step(self, job: Job, out: Output, key: bytes):
        """One token of one output: (token infos to send, their text, finish or None), where a
        finish is (reason, stop match or None)."""
        st, r = job.request.stopping, job.request.response
        min_tokens = 0 if self.variant == "min-tokens-ignored" else st.min_tokens
        may_stop = out.generated >= min_tokens
        max_tokens = st.max_tokens if st.HasField("max_tokens") else DEFAULT_MAX_TOKENS
        if self.variant == "ignores-max-tokens":
            max_tokens = self.config.max_output_tokens
        lps = toy.log_softmax(toy.scores(key, out.generated, out.previous, allow_eos=may_stop and not st.ignore_eos))
        token = out.sampler.pick(lps)
        out.generated += 1
        out.previous = token
        info = self.token_info(token, lps, r.output_candidates, r.return_output_logprobs)
        text = toy.token_text(token)
        stop_ids = {c.stop_token_id for c in st.conditions if c.WhichOneof("condition") == "stop_token_id"}
        stop_texts = [c.stop_text for c in st.conditions if c.WhichOneof("condition") == "stop_text"]
        if token == toy.EOS:
            return self.flush(out) + [(info, text)], gen.FINISH_REASON_STOP, gen.StopMatch(eos_token_id=token)
        if may_stop and token in stop_ids and self.variant != "stop-token-ignored":
            kept = [(info, text)] if st.include_stop_in_output else []
            return self.flush(out) + kept, gen.FINISH_REASON_STOP, gen.StopMatch(stop_token_id=token)
        out.pending.append((info, text))
        out.tail += text
        if may_stop and self.variant != "stop-text-ignored":
            for stop in stop_texts:
                if out.tail.endswith(stop):
                    keep = st.include_stop_in_output or self.variant == "stop-text-in-output"
                    # Every generated token is one character, so the match is the last len(stop) held.
                    sent = out.pending if keep else out.pending[:len(out.pending) - len(stop)]
                    out.pending = []
                    return sent, gen.FINISH_REASON_STOP, gen.StopMatch(stop_text=stop)
        if out.generated >= max_tokens:
            return self.flush(out), gen.FINISH_REASON_LENGTH, None
        # Hold back what could still become the start of a stop string.
        hold = max((len(s) for s in stop_texts), default=1) - 1
        out.tail = out.tail[-hold:] if hold else ""
        ready = out.pending[:len(out.pending) - hold] if hold else out.pending
        out.pending = out.pending[len(ready):]
        return ready, None, None

    @staticmethod
    def flush(out: Output) -> list:
        sent, out.pending = out.pending, []
        return sent

    # -- one Generate stream -----------------------------------------------------------------------

    def admit(self, request: gen.GenerateRequest, metadata) -> Job:
        self.check_metadata(metadata)
        self.check_model(request.model)
        prompt = self.prompt_of(request)
        self.check_request(request, prompt)
        request_id = request.request_id or f"req-{uuid.uuid4().hex}"
        if request_id in self.active:
            raise Refused(grpc.StatusCode.ALREADY_EXISTS, f"request {request_id!r} is already running")
        job = Job(request, request_id, prompt)
        s = request.sampling
        seed = s.seed if s.HasField("seed") and self.variant != "seed-ignored" else random.getrandbits(64)
        temperature = s.temperature if s.HasField("temperature") else 1.0
        count = s.num_sequences if s.HasField("num_sequences") else 1
        if self.variant == "num-sequences-ignored":
            count = 1
        for index in range(count):
            sampler = toy.Sampler(seed, index, temperature, max(s.top_k, 0), s.top_p if s.HasField("top_p") else 1.0)
            job.outputs.append(Output(index=index, sampler=sampler, previous=prompt[-1]))
        self.active[request_id] = job
        return job

    def stamp(self, job: Job, response: gen.GenerateResponse) -> gen.GenerateResponse:
        if self.variant != "request-id-not-echoed" or job.sent == 0:
            response.request_id = job.request_id
        job.sent += 1
        return response

    def usage(self, job: Job) -> gen.Usage:
        prompt = len(job.prompt)
        completion = sum(o.emitted for o in job.outputs)
        total = completion if self.variant == "usage-wrong-total" else prompt + completion
        return gen.Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)

    def finished(self, out: Output, reason: int, match) -> gen.GenerateResponse:
        out.done = True
        if reason == gen.FINISH_REASON_LENGTH and self.variant == "length-reported-as-stop":
            reason = gen.FINISH_REASON_STOP
        event = gen.GenerationFinished(output_index=out.index, reason=reason)
        if match is not None and self.variant != "no-stop-match":
            event.stop_match.CopyFrom(match)
        return gen.GenerateResponse(finished=event)

    def last_step(self, job: Job, responses: list) -> list:
        """The responses of the step that ends the request, with usage on the final one."""
        if not responses:       # only when a variant dropped the terminal events
            responses = [gen.GenerateResponse(token=gen.TokenOutput(output_index=job.outputs[-1].index))]
        if self.variant != "no-usage":
            responses[-1].usage.CopyFrom(self.usage(job))
        return responses

    def tick(self, job: Job, started: bool, key: bytes) -> list:
        """One step of every open output: its new tokens and, where it ends, its finish."""
        responses = []
        for out in job.outputs:
            if out.done:
                continue
            if job.aborted or not started:
                if self.variant == "abort-no-cancelled":
                    out.done = True
                else:
                    responses.append(self.finished(out, gen.FINISH_REASON_CANCELLED, None))
                continue
            sent, reason, match = self.step(job, out, key)
            if sent:
                out.emitted += len(sent)
                index = None if out.index == 0 and self.variant == "missing-output-index" else out.index
                responses.append(gen.GenerateResponse(token=gen.TokenOutput(
                    output_index=index, tokens=[i for i, _ in sent], text="".join(t for _, t in sent))))
            if reason is not None:
                responses.append(self.finished(out, reason, match))
                if out.index == 0 and self.variant == "finished-twice":
                    responses.append(self.finished(out, reason, match))
        if self.variant == "no-finished-event":
            responses = [r for r in responses if not r.HasField("finished")]
        return responses

    async def generate(self, job: Job):
        try:
            if job.request.response.return_prompt_logprobs and self.variant != "logprobs-ignored":
                yield self.stamp(job, gen.GenerateResponse(prompt=self.prompt_output(job)))
            started = await self.acquire(job)
            key = toy.context_key(job.prompt)
            delay = self.config.token_ms / 1000.0
            ending = False
            while not ending:
                if started and not job.aborted:
                    with contextlib.suppress(asyncio.TimeoutError):   # an abort ends the wait early
                        await asyncio.wait_for(job.stop.wait(), delay)
                responses = self.tick(job, started, key)
                ending = all(o.done for o in job.outputs)
                if ending:
                    # Freed before the last events go out, so load is back to idle when they arrive.
                    self.release(job)
                    responses = self.last_step(job, responses)
                for response in responses:
                    if self.variant == "usage-on-every-response" and not response.HasField("usage"):
                        response.usage.CopyFrom(self.usage(job))
                    yield self.stamp(job, response)
        finally:
            self.release(job)


class Inference(rpc.InferenceServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    async def Generate(self, request, context):
        try:
            job = self.engine.admit(request, context.invocation_metadata())
        except Refused as refused:
            await context.abort(refused.code, refused.message)
        async for response in self.engine.generate(job):
            yield response


class Control(rpc.ControlServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    async def GetServerInfo(self, request, context):
        e, v = self.engine, self.engine.variant
        return server_pb2.ServerInfo(
            engine_name=ENGINE_NAME, engine_version=ENGINE_VERSION,
            engine_role=server_pb2.ENGINE_ROLE_AGGREGATED, instance_id=e.instance_id,
            supported_models=[MODEL],
            parallelism=server_pb2.ParallelismInfo(
                tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1,
                data_parallel_rank=0, data_parallel_start_rank=0, decode_context_parallel_size=1),
            kv_connector=kv_pb2.KvConnectorInfo(enabled=False),
            schema_revision=0 if v == "schema-revision-zero" else 1,
            minimum_client_revision=2 if v == "revision-too-new" else 1,
            schema_release=SCHEMA_RELEASE,
            capacity=server_pb2.DeploymentCapacity(max_running_requests=e.config.slots, max_loras=0))

    async def GetModelInfo(self, request, context):
        if request.model and request.model != MODEL and self.engine.variant != "model-info-unknown-ok":
            await context.abort(grpc.StatusCode.NOT_FOUND, f"model {request.model!r} is not served")
        selections = [model_pb2.CANDIDATE_TOKEN_SELECTION_MODE_TOP_N, model_pb2.CANDIDATE_TOKEN_SELECTION_MODE_TOKEN_IDS]
        logprobs = model_pb2.LogprobCapabilities(supported=True, candidate_selection_modes=selections, max_top_n=MAX_TOP_N)
        return model_pb2.ModelInfo(
            model_id=MODEL, served_model_name=MODEL,
            max_context_length=self.engine.config.max_context_length,
            max_output_tokens=self.engine.config.max_output_tokens,
            tokenizer_modes=["bytes"], supports_text_input=True, supports_token_ids_input=True,
            generation=model_pb2.GenerationCapabilities(
                prompt_logprobs=logprobs, output_logprobs=logprobs,
                guided_decoding=model_pb2.GuidedDecodingCapabilities(supported=False),
                max_num_sequences=MAX_NUM_SEQUENCES, supports_priority=False,
                supports_stop_in_output=True, supports_cache_salt=False, supports_prefix_cache_bypass=False),
            supports_lora=False, supports_multimodal=False)

    async def GetLoad(self, request, context):
        e = self.engine
        running, queued = len(e.running), len(e.waiting)
        if e.variant == "load-never-idle":
            running += 1
        if e.variant == "load-always-zero":
            running = queued = 0
        info = server_pb2.LoadInfo(instance_id=e.instance_id, timestamp_unix_nanos=time.time_ns(),
                                   running_requests=running, queued_requests=queued)
        if request.include_per_rank:     # one data-parallel rank: it carries the whole load
            info.ranks.append(server_pb2.RankLoadInfo(data_parallel_rank=0, running_requests=running,
                                                      queued_requests=queued))
        return info

    async def Health(self, request, context):
        checks = [life.HealthCheck(name=name, state=life.HEALTH_STATE_READY) for name in ("grpc", "scheduler", "model")]
        if request.include_inference_probe:
            if request.model and request.model != MODEL:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"model {request.model!r} is not served")
            lps = toy.log_softmax(toy.scores(toy.context_key([0]), 0, 0, allow_eos=False))
            token = toy.ranked(lps)[0]
            checks.append(life.HealthCheck(name="inference_probe", state=life.HEALTH_STATE_READY,
                                           message=f"one step generated token {token}"))
        if request.role not in (server_pb2.ENGINE_ROLE_UNSPECIFIED, server_pb2.ENGINE_ROLE_AGGREGATED):
            checks.append(life.HealthCheck(name="role", state=life.HEALTH_STATE_NOT_READY,
                                           message="this engine serves the aggregated role only"))
        state = life.HEALTH_STATE_NOT_READY if self.engine.variant == "health-not-ready" else life.HEALTH_STATE_READY
        return life.HealthResponse(state=state, checks=checks)

    async def Abort(self, request, context):
        e, v = self.engine, self.engine.variant
        target = request.WhichOneof("target")
        if target is None:
            if v == "abort-no-target-ok":
                return life.AbortResponse(status=life.ABORT_STATUS_ABORTED, message="nothing named, nothing aborted")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "name exactly one target: request_id, kv_session or all_requests")
        if target == "all_requests":
            jobs = list(e.active.values())
            for job in jobs:
                e.abort(job)
            await self.until_released(jobs)
            return life.AbortResponse(status=life.ABORT_STATUS_ABORTED, message=f"aborted {len(jobs)} request(s)")
        if target == "kv_session":
            await context.abort(grpc.StatusCode.NOT_FOUND, "this engine holds no KV sessions")
        request_id = request.request_id
        if not request_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request_id is empty")
        job = e.active.get(request_id)
        if job is not None:
            e.abort(job)
            await self.until_released([job])
            return life.AbortResponse(status=life.ABORT_STATUS_ABORTED, message=f"aborted {request_id}")
        if request_id in e.recent:
            if v == "abort-finished-not-found":
                await context.abort(grpc.StatusCode.NOT_FOUND, f"no request {request_id!r}")
            return life.AbortResponse(status=life.ABORT_STATUS_ALREADY_FINISHED, message=f"{request_id} had finished")
        if v == "abort-unknown-ok":
            return life.AbortResponse(status=life.ABORT_STATUS_ABORTED, message=f"aborted {request_id}")
        await context.abort(grpc.StatusCode.NOT_FOUND, f"no request {request_id!r}")

    async def until_released(self, jobs: list[Job]) -> None:
        # Answer once the slots are free, so a GetLoad after the answer no longer counts them.
        if self.engine.variant == "abort-ignored" or not jobs:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(j.released.wait() for j in jobs)), 2.0)

    async def _unimplemented(self, context, name: str):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not implemented by this engine")

    async def LoadLora(self, request, context):
        await self._unimplemented(context, "LoadLora")

    async def UnloadLora(self, request, context):
        await self._unimplemented(context, "UnloadLora")

    async def ListLoras(self, request, context):
        await self._unimplemented(context, "ListLoras")

    async def GetKvEventSources(self, request, context):
        await self._unimplemented(context, "GetKvEventSources")

    async def SubscribeKvEvents(self, request, context):
        await self._unimplemented(context, "SubscribeKvEvents")
        yield  # a server-streaming handler must be an async generator


async def serve(config: Config) -> None:
    engine = Engine(config)
    server = grpc.aio.server()
    rpc.add_InferenceServicer_to_server(Inference(engine), server)
    rpc.add_ControlServicer_to_server(Control(engine), server)
    port = server.add_insecure_port(f"{config.host}:{config.port}")
    await server.start()
    # The launcher reads the bound address from this first line.
    print(f"{config.host}:{port}", flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await server.stop(0.5)
