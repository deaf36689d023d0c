"""The reference engine's backend: the deterministic stand-in model (`model.py`) behind the SDK.

What is the engine's own lives here: a scheduler (at most `max_running_requests` run, the rest
wait, by priority when the engine honours priorities), generation with its stop rules
(`SequenceStops`), the prefix cache and its KV events, sessions, adapters, the encoder cache, the
runtime event streams and the load those make. Everything the protocol defines (discovery,
health, admission against the advertised limits, the bounded queue, Abort, cancellation,
WatchLoad, Admin's run state) is the SDK's, `openengine.serve`; the optional RPCs the engine
serves itself are in `services/`.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import heapq
import itertools
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from openengine.contract import catalogue
from openengine.engine import model as stand_in
from openengine.engine import services
from openengine.engine.config import EngineConfig, description_limits, model_profiles
from openengine.engine.resources import Adapter, EventStream, Session
from openengine.serve import (
    AbortReason, Chunk, Clock, EngineDescription, EngineHandle, ErrorCode, Final, FinishReason, GenerateRequest,
    Load, Model, Prompt, RankLoad, Refusal, RefusalCode, SequenceStops, SERVING, STOPPING, Tokenizer, TokenInfo,
    invalid,
)
from openengine.v1 import events_pb2, generation_pb2, kv_pb2


@dataclass(eq=False)
class Request:
    """One accepted request while the scheduler holds it."""

    request_id: str
    prompt_tokens: int
    priority: int = 0
    kv_session: str = ""
    rank: int = 0
    generated: int = 0
    running: bool = False
    aborted: AbortReason | None = None
    scheduled: asyncio.Event = field(default_factory=asyncio.Event)

    def abort(self, reason: AbortReason) -> None:
        if self.aborted is None:
            self.aborted = reason
        self.scheduled.set()  # wake a queued request so it can end


class Scheduler:
    """At most `max_running_requests` run at once; the rest wait in order (by priority when the
    engine honours priorities). Every admission and release is a load change."""

    def __init__(self, backend: "ReferenceBackend"):
        self._backend = backend
        self.running: dict[str, Request] = {}
        self.queued: list[tuple[int, int, Request]] = []
        self._order = itertools.count()

    def in_flight(self) -> list[Request]:
        return list(self.running.values()) + [r for _, _, r in self.queued]

    def find(self, request_id: str) -> Request | None:
        return self.running.get(request_id) or next((r for _, _, r in self.queued if r.request_id == request_id), None)

    def submit(self, req: Request) -> None:
        honour = self._backend.limit("openengine.core", "priority")
        # heapq pops the smallest: a higher priority is more urgent.
        heapq.heappush(self.queued, (-req.priority if honour else 0, next(self._order), req))
        self.pump()

    def pump(self) -> None:
        most = int(self._backend.limit("openengine.core", "max_running_requests"))
        while self.queued and len(self.running) < most:
            _, _, req = heapq.heappop(self.queued)
            if req.aborted is not None:
                continue
            req.running = True
            self.running[req.request_id] = req
            req.scheduled.set()
        self._backend.load_changed()

    def release(self, req: Request) -> None:
        if self.running.get(req.request_id) is req:
            del self.running[req.request_id]
        else:
            self.queued = [e for e in self.queued if e[2] is not req]
            heapq.heapify(self.queued)
        req.running = False
        self.pump()


@dataclass(frozen=True)
class Plan:
    """An admitted request as the generation loop runs it."""

    prompt: list[int]
    max_tokens: int
    guided: str | None
    extra_tokens: int          # encoder outputs the prompt is extended with
    prefill: bool              # a prefill engine computes the prompt only and hands over its KV cache
    continued: bool            # a decode request continuing from a prefill engine's KV session


class _Sequence:
    """One output of a request: its sampler, its stop rules and what it has produced."""

    def __init__(self, index: int, sampler: stand_in.SequenceSampler, stops: SequenceStops):
        self.index = index
        self.sampler = sampler
        self.stops = stops
        self.text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.generated: list[int] = []
        self.finished = False


class ReferenceBackend:
    """The stand-in model served through the SDK: `Backend`, `AdminOperations`, `StateListener`
    and `ServiceProvider` (the RPCs of `services/`)."""

    def __init__(self, config: EngineConfig):
        self.config = config
        self.catalogue = catalogue()
        self.engine: EngineHandle | None = None
        self.phase = SERVING
        self.phase_name = "ENGINE_STATE_SERVING"
        self.holding = False         # paused with mode keep: requests stay but make no progress
        self.scheduler = Scheduler(self)
        self.runtime_events = EventStream()
        self.kv_events = EventStream()
        self.kv_sequence = 0
        self.kv_buffer: collections.deque = collections.deque(maxlen=1)
        self.prefix_cache: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self.sessions: dict[str, Session] = {}
        self.adapters: dict[str, Adapter] = {}
        self.encoder_cache: dict[str, tuple[int, int]] = {}   # handle -> (tokens, expires_ns)
        self.clock = Clock()   # wall-clock nanoseconds that never go backwards
        self._services = services.for_backend(self)

    # -- what it is ------------------------------------------------------------------------------

    def describe(self) -> EngineDescription:
        tokenizer = Tokenizer(stand_in.TOKENIZER_NAME, stand_in.VOCAB_SIZE, eos_token_id=stand_in.EOS_TOKEN_ID,
                              token_text=lambda token: stand_in.detokenize([token]))
        multimodal = self.config.role == "encoder"
        models = tuple(Model(m.name, m.max_context_tokens, m.max_output_tokens, tokenizer,
                             profiles=model_profiles(self.config, m, self.catalogue), limits=m.limits,
                             multimodal=multimodal)
                       for m in self.config.served_models)
        return EngineDescription("openengine-reference", engine_version(), models,
                                 limits=description_limits(self.config, self.catalogue),
                                 role=self.config.role, data_parallel_size=self.config.data_parallel_size)

    def attach(self, engine: EngineHandle) -> None:
        self.engine = engine
        if self.has("openengine.kv"):
            self.kv_buffer = collections.deque(maxlen=max(1, int(self.limit("openengine.kv", "event_buffer_size"))))

    def services(self) -> Mapping[str, object]:
        return self._services

    # -- what the services and the loop read ------------------------------------------------------

    def has(self, profile: str) -> bool:
        return self.engine is not None and self.engine.has(profile)

    def limit(self, profile: str, name: str) -> Any:
        """An advertised limit's value now, or the contract's default for a profile not advertised."""
        if self.has(profile):
            return self.engine.limit(profile, name)
        lim = self.catalogue.limit(f"{profile}.{name}")
        return lim.default if lim is not None else None

    @property
    def models(self) -> dict[str, Any]:
        return {m.name: m for m in self.config.served_models}

    @property
    def default_model(self) -> str:
        return self.config.served_models[0].name

    @property
    def kv_block_size(self) -> int:
        return int(self.limit("openengine.kv", "kv_block_size"))

    @property
    def total_kv_blocks(self) -> int:
        return int(self.limit("openengine.kv", "total_kv_blocks") or 0) or 4096

    def endpoint(self) -> kv_pb2.KvEndpoint:
        """Where a peer reaches this engine: its serving address, never a bind wildcard."""
        host, _, port = self.engine.address.rpartition(":")
        host = host.strip("[]")
        if host in ("", "0.0.0.0", "::", "*"):
            host = "127.0.0.1"
        return kv_pb2.KvEndpoint(host=host, port=int(port), protocol="grpc")

    def load_changed(self) -> None:
        if self.engine is not None:
            self.engine.load_changed()

    # -- one request -------------------------------------------------------------------------------

    def plan(self, request: GenerateRequest) -> Plan:
        """What only this engine checks, after the SDK's admission: the room left in the context,
        which adapters and sessions exist, the role's KV handoff, and the shape of the request."""
        message = request.message
        m = self.models[request.model]
        stopping = request.stopping
        # The SDK's admission has checked the token ids against the vocabulary, num_sequences and
        # the advertised limits.
        if message.WhichOneof("input") == "token_ids":
            prompt = list(message.token_ids.ids)
        else:
            prompt = stand_in.tokenize(message.prompt)
        if not prompt:
            raise invalid("prompt", "the prompt is empty; set prompt or token_ids")
        extra = sum(h.num_tokens for h in message.encoder_inputs)
        if len(prompt) + extra >= m.max_context_tokens:
            raise invalid("prompt", f"{len(prompt) + extra} tokens leave no room in the context "
                          f"(ModelInfo.max_context_length = {m.max_context_tokens})")
        guided = message.guided.WhichOneof("guide") if message.HasField("guided") else None
        if guided == "choice" and not message.guided.choice.choices:
            raise invalid("guided.choice.choices", "needs at least one choice")
        room = m.max_context_tokens - len(prompt) - extra
        if stopping.HasField("max_tokens"):
            if stopping.max_tokens < 1:
                raise invalid("stopping.max_tokens", "must be at least 1")
            if stopping.max_tokens > room:
                raise invalid("stopping.max_tokens", f"the prompt plus {stopping.max_tokens} tokens exceed "
                              f"ModelInfo.max_context_length = {m.max_context_tokens}")
            max_tokens = stopping.max_tokens
        else:
            max_tokens = min(m.max_output_tokens, room)
        if stopping.HasField("min_tokens") and stopping.min_tokens > max_tokens:
            raise invalid("stopping.min_tokens", f"{stopping.min_tokens} exceeds max_tokens {max_tokens}")
        if message.lora_name and message.lora_name not in self.adapters:
            raise Refusal(RefusalCode.NOT_FOUND, f"lora_name: no loaded adapter {message.lora_name!r} "
                                                 "(Control/ListLoras lists them)")
        if message.HasField("session_id"):
            self.expire_sessions()
            if message.session_id not in self.sessions:
                raise Refusal(RefusalCode.NOT_FOUND, f"session_id: no open session {message.session_id!r}")
        kv = message.kv.session if message.kv.HasField("session") else None
        prefill = self.config.role == "prefill"
        if kv is not None and not prefill and not kv.session_id:
            raise invalid("kv.session.session_id", "name the KV session the prefill engine handed over")
        return Plan(prompt, max_tokens, guided, extra, prefill, continued=kv is not None and not prefill)

    async def generate(self, request: GenerateRequest):
        plan = self.plan(request)
        kv = request.message.kv.session
        rank = kv.dp_rank if plan.continued and kv.dp_rank < self.config.data_parallel_size \
            else zlib.crc32(request.request_id.encode()) % self.config.data_parallel_size
        req = Request(request.request_id, len(plan.prompt) + plan.extra_tokens, priority=request.priority,
                      kv_session=kv.session_id, rank=rank)
        self.scheduler.submit(req)
        try:
            async for output in self._run(req, request, plan):
                yield output
        finally:
            self.scheduler.release(req)

    async def abort(self, request_id: str, reason: AbortReason) -> None:
        req = self.scheduler.find(request_id)
        if req is not None:
            req.abort(reason)

    async def _run(self, req: Request, request: GenerateRequest, plan: Plan):
        message = request.message
        sampling, response = request.sampling, request.response
        await req.scheduled.wait()
        if req.aborted is not None:
            return
        prompt = plan.prompt
        adapter = message.lora_name
        # Models do not share cached blocks: any but the default model keys them by its name too.
        salt = message.kv.cache_salt if request.model == self.default_model \
            else f"{request.model}\x00{message.kv.cache_salt}"
        hashes = stand_in.block_hashes(prompt, self.kv_block_size, salt=salt, adapter=adapter)
        if plan.continued:
            cached = len(prompt)          # the prefill engine computed it
        elif message.HasField("session_id"):
            cached = min(self.sessions[message.session_id].retained_tokens, len(prompt))
        elif message.kv.bypass_prefix_cache:
            cached = 0
        else:
            cached = min(self.cached_prefix_tokens(hashes), len(prompt))
        if response.return_prompt_logprobs:
            yield Prompt(tuple(_prompt_infos(prompt, response)))
        if plan.prefill:
            await asyncio.sleep(self.config.token_delay_ms / 1000.0)
            if req.aborted is not None:
                return
            self.store_blocks(hashes, prompt, adapter, req)
            session = self._kv_session(message, req, len(prompt))
            for index in range(request.sequences):    # every output continues from the one session
                yield Final(FinishReason.LENGTH, prompt_tokens=len(prompt), completion_tokens=0, index=index,
                            cached_prompt_tokens=cached, kv_session=session)
            return
        temperature = sampling.temperature if sampling.HasField("temperature") else 1.0
        seed = sampling.seed if sampling.HasField("seed") else 0
        choice = tuple(message.guided.choice.choices) if plan.guided == "choice" else ()
        seqs = [_Sequence(i, stand_in.SequenceSampler.start(prompt, seed=seed, index=i, temperature=temperature,
                                                           adapter=adapter, choice=choice,
                                                           json_object=plan.guided == "json_object"),
                          SequenceStops(request.stopping, stand_in.EOS_TOKEN_ID))
                for i in range(request.sequences)]
        stopping = request.stopping
        min_tokens = stopping.min_tokens if stopping.HasField("min_tokens") else 0
        delay = self.config.token_delay_ms / 1000.0
        while not all(q.finished for q in seqs):
            await asyncio.sleep(delay)
            while self.holding and req.aborted is None:
                await asyncio.sleep(0.01)
            if req.aborted is not None:
                return
            req.generated += 1
            for q in seqs:
                if q.finished:
                    continue
                token = q.sampler.next_token()
                if token == stand_in.EOS_TOKEN_ID and (stopping.ignore_eos or len(q.generated) < min_tokens):
                    q.sampler.forced = None   # a forced output has ended: go on freely
                    token = q.sampler.next_token()
                q.generated.append(token)
                piece = q.text.decode(bytes([token])) if token < 256 else ""
                text, match = q.stops.add(token, piece)
                infos = (_output_info(q.sampler, token, response),) if response.return_output_logprobs else ()
                if match is None and len(q.generated) < plan.max_tokens:
                    yield Chunk((token,), text=text, index=q.index, logprobs=infos)
                    continue
                q.finished = True
                sent = (token,)
                if match is None:
                    text += q.stops.rest()
                elif match.WhichOneof("match") == "stop_token_id" and not stopping.include_stop_in_output:
                    # A stop token kept out of the output: counted as generated, never sent.
                    sent, infos, text = (), (), text[:len(text) - len(piece)]
                if all(q.finished for q in seqs):
                    # Before the last Final: the SDK closes the stream once every output has ended.
                    self._completed(req, message, prompt + [t for t in seqs[0].generated if t < 256], salt)
                yield Final(FinishReason.STOP if match is not None else FinishReason.LENGTH,
                            prompt_tokens=len(prompt), completion_tokens=len(q.generated), token_ids=sent,
                            text=text, index=q.index, cached_prompt_tokens=cached, stop_match=match,
                            logprobs=infos)

    def _completed(self, req: Request, message, all_tokens: list[int], salt: str) -> None:
        """A request completed: its blocks join the prefix cache, a session retains them."""
        adapter = message.lora_name
        self.store_blocks(stand_in.block_hashes(all_tokens, self.kv_block_size, salt=salt, adapter=adapter),
                          all_tokens, adapter, req)
        if message.HasField("session_id") and message.session_id in self.sessions:
            session = self.sessions[message.session_id]
            cap = session.capacity_tokens or self.models[session.model].max_context_tokens
            session.retained_tokens = min(cap, len(all_tokens))
            session.expires_ns = self.clock.now_ns() + session.ttl_ms * 1_000_000

    def _kv_session(self, message, req: Request, prompt_tokens: int) -> kv_pb2.KvSessionRef | None:
        """The KV session a decode engine continues from (PrefillReady)."""
        asked = message.kv.session
        backends = self.limit("openengine.kv", "kv_transfer_backends") or []
        ref = kv_pb2.KvSessionRef(session_id=asked.session_id or f"kv-{uuid.uuid4().hex[:16]}",
                                  transfer_backend=asked.transfer_backend or (backends[0] if backends else ""),
                                  endpoints=[self.endpoint()], dp_rank=req.rank)
        ref.attributes_struct.update({"blocks": -(-prompt_tokens // self.kv_block_size)})
        return ref

    # -- load ------------------------------------------------------------------------------------

    def load(self) -> Load:
        """The real scheduler state, per data-parallel rank; the SDK sums the ranks into the totals."""
        running = list(self.scheduler.running.values())
        queued = [r for _, _, r in self.scheduler.queued if r.aborted is None]
        kv_sessions = {r.kv_session for r in self.scheduler.in_flight() if r.kv_session}
        return Load(active_kv_sessions=len(kv_sessions) + len(self.sessions),
                    running_tokens=sum(r.prompt_tokens + r.generated for r in running),
                    waiting_tokens=sum(r.prompt_tokens for r in queued),
                    ranks=tuple(self.rank_loads(running, queued)),
                    attributes={"model": self.default_model, "state": self.phase_name})

    def rank_loads(self, running: list[Request], queued: list[Request]) -> list[RankLoad]:
        """Each rank's share: the KV blocks are split evenly over the ranks (the first ones take
        the remainder), and so is the prefix cache, which every rank's used blocks include."""
        size = self.config.data_parallel_size
        bs = self.kv_block_size
        total, cached = self.total_kv_blocks, len(self.prefix_cache)
        out = []
        for rank in range(size):
            rr = [r for r in running if r.rank == rank]
            rq = [r for r in queued if r.rank == rank]
            rank_total = total // size + (1 if rank < total % size else 0)
            rank_cached = cached // size + (1 if rank < cached % size else 0)
            busy = sum(-(-(r.prompt_tokens + r.generated) // bs) for r in rr)
            out.append(RankLoad(rank, running_requests=len(rr), queued_requests=len(rq),
                                used_kv_blocks=min(rank_total, busy + rank_cached), total_kv_blocks=rank_total,
                                prefill_batch_size=sum(1 for r in rr if r.generated == 0),
                                decode_batch_size=sum(1 for r in rr if r.generated > 0)))
        return out

    # -- prefix cache and KV events ----------------------------------------------------------------

    def cached_prefix_tokens(self, hashes: list[bytes]) -> int:
        hit = 0
        for h in hashes:
            if h not in self.prefix_cache:
                break
            self.prefix_cache.move_to_end(h)
            hit += 1
        return hit * self.kv_block_size

    def store_blocks(self, hashes: list[bytes], token_ids: list[int], adapter: str, req: Request) -> None:
        new = [h for h in hashes if h not in self.prefix_cache]
        for h in hashes:
            self.prefix_cache[h] = 1
            self.prefix_cache.move_to_end(h)
        events = []
        if new:
            first = hashes.index(new[0])
            bs = self.kv_block_size
            adapter_id = self.adapters[adapter].lora_id if adapter in self.adapters else 0
            stored = kv_pb2.BlockStored(block_hashes=[_block_hash(h) for h in new],
                                        token_ids=token_ids[first * bs:(first + len(new)) * bs], block_size=bs,
                                        lora_id=adapter_id, lora_name=adapter, medium=kv_pb2.STORAGE_MEDIUM_GPU)
            if first > 0:
                stored.parent_block_hash.CopyFrom(_block_hash(hashes[first - 1]))
            events.append(kv_pb2.KvEvent(request_id=req.request_id, block_stored=stored))
        capacity = max(1, self.total_kv_blocks // 2)
        evicted = []
        while len(self.prefix_cache) > capacity:
            evicted.append(self.prefix_cache.popitem(last=False)[0])
        if evicted:
            events.append(kv_pb2.KvEvent(block_removed=kv_pb2.BlockRemoved(
                block_hashes=[_block_hash(h) for h in evicted], medium=kv_pb2.STORAGE_MEDIUM_GPU)))
        self.publish_kv(events, req.rank)

    def clear_prefix_cache(self) -> int:
        freed = len(self.prefix_cache)
        self.prefix_cache.clear()
        for rank in range(self.config.data_parallel_size):
            self.publish_kv([kv_pb2.KvEvent(all_blocks_cleared=kv_pb2.AllBlocksCleared())], rank)
        self.load_changed()
        return freed

    def publish_kv(self, events: list, rank: int) -> None:
        if not events or not self.has("openengine.kv"):
            return
        self.kv_sequence += 1
        batch = kv_pb2.KvEventBatch(sequence_number=self.kv_sequence, timestamp_unix_nanos=self.clock.now_ns(),
                                    data_parallel_rank=rank, events=events)
        if self.limit("openengine.kv", "event_replay"):
            self.kv_buffer.append(batch)
        self.kv_events.publish(batch)

    # -- sessions and runtime events ---------------------------------------------------------------

    def expire_sessions(self) -> None:
        now = self.clock.now_ns()
        for sid in [s for s, v in self.sessions.items() if v.expires_ns <= now]:
            del self.sessions[sid]

    def emit(self, event: events_pb2.RuntimeEvent, kind: str) -> None:
        """Publish a runtime event of an advertised kind."""
        if self.has("openengine.runtime-events") and kind in self.limit("openengine.runtime-events", "event_kinds"):
            self.runtime_events.publish((self.clock.now_ns(), event))

    def state_changed(self, previous: Any, current: Any, reason: str) -> None:
        self.phase, self.phase_name = current.phase, current.name
        self.holding = current.holds_requests
        if current.phase != previous.phase:
            self.emit(events_pb2.RuntimeEvent(state_changed=events_pb2.StateChanged(
                previous=previous.phase, state=current.phase, reason=reason)), "state_changed")
        if current.phase == STOPPING:
            for stream in (self.runtime_events, self.kv_events):
                stream.close_all(ErrorCode.DRAINING, "the engine is shutting down")

    def revision_changed(self, previous: int, revision: int, changed: tuple[str, ...]) -> None:
        self.scheduler.pump()
        if any(c.startswith("openengine.kv.") for c in changed):
            self.kv_events.close_all(ErrorCode.CANCELLED, "openengine.kv capabilities changed; subscribe again")
        self.emit(events_pb2.RuntimeEvent(capability_revision_changed=events_pb2.CapabilityRevisionChanged(
            previous_revision=previous, revision=revision)), "capability_revision_changed")

    # -- admin operations (the SDK owns the run state) -----------------------------------------------

    async def pause(self, mode: str) -> None:
        """Nothing to do here: `state_changed` says whether requests are held (mode keep)."""

    async def resume(self) -> None:
        """Nothing to do here: `state_changed` releases held requests."""

    async def sleep(self, level: int, tags: frozenset[str]) -> int:
        if not tags or "kv_cache" in tags:
            self.clear_prefix_cache()
        return (1 << 30) * level

    async def wake(self, tags: frozenset[str]) -> None:
        """Nothing was really released."""

    async def reset_prefix_cache(self) -> int | None:
        return None if self.scheduler.running else self.clear_prefix_cache()

    def update_limits(self, limits: Mapping[str, Mapping[str, Any]]) -> None:
        """Read through the engine handle on every use; nothing is kept here."""


def _block_hash(digest: bytes) -> kv_pb2.KvBlockHash:
    return kv_pb2.KvBlockHash(value=digest, encoding="bytes")


def _candidates(selection: generation_pb2.CandidateTokenSelection, logprob_of) -> list[generation_pb2.LogProb]:
    """The candidates a CandidateTokenSelection asks for, each with its rank in the whole
    vocabulary ordered most likely first."""
    kind = selection.WhichOneof("selection")
    if kind is None:
        return []
    ranked = sorted(((t, logprob_of(t)) for t in range(stand_in.VOCAB_SIZE)), key=lambda p: (-p[1], p[0]))
    rank_of = {t: i + 1 for i, (t, _) in enumerate(ranked)}
    if kind == "top_n":
        picked = [t for t, _ in ranked[:selection.top_n]]
    elif kind == "all":
        picked = [t for t, _ in ranked]
    else:
        picked = [t for t in selection.token_ids.ids if t in rank_of]
    return [generation_pb2.LogProb(token_id=t, logprob=logprob_of(t), rank=rank_of[t]) for t in picked]


def _output_info(sampler: stand_in.SequenceSampler, token: int, response) -> TokenInfo:
    return TokenInfo(token_id=token, logprob=sampler.logprob(token), rank=1,
                     candidates=_candidates(response.output_candidates, sampler.logprob))


def _prompt_infos(prompt: list[int], response) -> list[TokenInfo]:
    """One TokenInfo per prompt token from `prompt_logprob_start`; the first token of the prompt
    has no conditional probability, so it carries none."""
    out = []
    for pos in range(response.prompt_logprob_start, len(prompt)):
        token = prompt[pos]
        info = TokenInfo(token_id=token)
        if pos > 0:
            def logprob_of(t, pos=pos):
                return stand_in.prompt_candidate_logprob(prompt, pos, t)
            info.logprob, info.rank = logprob_of(token), 1
            info.candidates.extend(_candidates(response.prompt_candidates, logprob_of))
        out.append(info)
    return out


def engine_version() -> str:
    try:
        from importlib.metadata import version
        return version("openengine-profiles")
    except Exception:
        return "0"
