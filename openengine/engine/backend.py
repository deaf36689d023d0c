"""The reference engine's backend: the deterministic stand-in model (`model.py`) behind the SDK.

What is the engine's own lives here: a scheduler (at most `max_running_requests` run, the rest
wait, by priority when the engine honours priorities), generation with its stop rules, the prefix
cache and its KV events, sessions, adapters, the encoder cache, the runtime event streams and the
load those make. Everything the protocol defines (discovery, health, admission against the
advertised limits, Abort, cancellation, WatchLoad, Admin's run state, the aliases) is the SDK's,
`openengine.serve`; the optional services the engine serves itself are in `services/`.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import logging
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from openengine.engine import model as stand_in
from openengine.engine.config import ResolvedConfig
from openengine.engine.resources import Adapter, EventStream, Session
from openengine.engine import services
from openengine.serve import (
    AbortReason, Chunk, EngineDescription, EngineHandle, Final, FinishReason, GenerateRequest, Load, Model, RankLoad,
    Refusal, RefusalCode, Tokenizer,
)
from openengine.serve.backend import invalid
from openengine.serve.load import Clock
from openengine.serve.runstate import STOPPING, RunState
from openengine.v1 import events_pb2, generation_pb2, kv_pb2

log = logging.getLogger("openengine.engine")

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
        heapq.heappush(self.queued, (req.priority if honour else 0, next(self._order), req))
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
    sequences: int
    max_tokens: int
    guided: str | None
    kv: kv_pb2.KvTransferParams | None
    extra_tokens: int
    producer: bool


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
        self.reason = FinishReason.LENGTH
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


class ReferenceBackend:
    """The stand-in model served through the SDK: `Backend`, `AdminOperations`, `StateListener`
    and `ServiceProvider` (the optional services of `services/`)."""

    def __init__(self, resolved: ResolvedConfig):
        self.resolved = resolved
        self.config = resolved.config
        self.catalogue = resolved.catalogue
        self.engine: EngineHandle | None = None
        self.clock = Clock()
        self.run = RunState()
        self.scheduler = Scheduler(self)
        self.runtime_events = EventStream()
        self.kv_events = EventStream()
        self.kv_sequence = 0
        kv_buffer = int(resolved.limits.get("openengine.kv", {}).get("event_buffer_size", 0) or 0)
        self.kv_buffer: collections.deque = collections.deque(maxlen=max(kv_buffer, 1))
        self.prefix_cache: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self.sessions: dict[str, Session] = {}
        self.adapters: dict[str, Adapter] = {}
        self.encoder_cache: dict[str, tuple[int, int]] = {}   # handle -> (tokens, expires_ns)
        self._services = {f"openengine.v1.{name}": cls(self) for name, cls in services.service_classes().items()}

    # -- what it is ------------------------------------------------------------------------------

    def describe(self) -> EngineDescription:
        tokenizer = Tokenizer(stand_in.TOKENIZER_NAME, stand_in.VOCAB_SIZE, eos_token_id=stand_in.EOS_TOKEN_ID)
        multimodal = self.resolved.has("openengine.encoder")
        models = tuple(Model(m.name, m.config.max_context_tokens, m.config.max_output_tokens, tokenizer,
                             profiles=m.profiles, limits=m.overrides, multimodal=multimodal)
                       for m in self.resolved.models)
        return EngineDescription(self.config.engine_name, _engine_version(), models, limits=self.resolved.limits,
                                 role=self.config.role, data_parallel_size=self.config.data_parallel_size)

    def attach(self, engine: EngineHandle) -> None:
        self.engine = engine

    def services(self) -> Mapping[str, object]:
        return self._services

    # -- what the services and the loop read ------------------------------------------------------

    def has(self, profile: str) -> bool:
        return self.engine.has(profile) if self.engine is not None else self.resolved.has(profile)

    def limit(self, profile: str, name: str) -> Any:
        """An advertised limit's value now, or the contract's default for a profile not advertised."""
        if self.has(profile):
            return self.engine.limit(profile, name) if self.engine is not None else self.resolved.limit(profile, name)
        lim = self.catalogue.limit(f"{profile}.{name}")
        return lim.default if lim is not None else None

    def model_limit(self, model: str, profile: str, name: str) -> Any:
        """A model-scoped limit as `model` sees it: its own value, else the engine-wide one."""
        return self.engine.model_limit_values(model, profile)[name]

    def lists(self, model: str, profile: str) -> bool:
        return self.engine.lists(model, profile)

    @property
    def accepting(self) -> bool:
        return self.engine.accepting

    @property
    def models(self) -> dict[str, Any]:
        return {m.name: m.config for m in self.resolved.models}

    @property
    def default_model(self) -> str:
        return self.resolved.models[0].name

    @property
    def instance_id(self) -> str:
        return self.engine.instance_id

    @property
    def address(self) -> str:
        return self.engine.address

    @property
    def kv_block_size(self) -> int:
        return int(self.limit("openengine.kv", "kv_block_size"))

    @property
    def total_kv_blocks(self) -> int:
        return int(self.limit("openengine.kv", "total_kv_blocks") or 0) or 4096

    def now_ns(self) -> int:
        return self.clock.now_ns()

    def timestamp(self, ns: int | None = None):
        return self.clock.timestamp(ns)

    def load_changed(self) -> None:
        if self.engine is not None:
            self.engine.load_changed()

    # -- one request -------------------------------------------------------------------------------

    def plan(self, request: GenerateRequest) -> Plan:
        """What only this engine checks, after the SDK's admission: the room left in the context,
        which adapters and sessions exist, and the shape of the request itself."""
        message = request.message
        m = self.models[request.model]
        s = message.sampling
        prompt = (list(message.token_ids.ids) if message.WhichOneof("prompt") == "token_ids"
                  else stand_in.tokenize(message.text))
        if not prompt:
            raise invalid("prompt", "the prompt is empty")
        extra = sum(h.num_tokens for h in message.encoder_inputs)
        if len(prompt) + extra >= m.max_context_tokens:
            raise invalid("prompt", f"{len(prompt) + extra} tokens leave no room in the context "
                          f"(ModelInfo.max_context_tokens = {m.max_context_tokens})")
        if request.sequences < 1:
            raise invalid("sampling.n", "must be at least 1")
        guided = s.guided.WhichOneof("constraint") if s.HasField("guided") else None
        if guided == "json_object" and not s.guided.json_object:
            raise invalid("sampling.guided.json_object", "must be true when set")
        if guided == "choice" and not s.guided.choice.values:
            raise invalid("sampling.guided.choice", "needs at least one choice")
        room = m.max_context_tokens - len(prompt) - extra
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
        if message.HasField("adapter"):
            loaded = self.adapters.get(message.adapter)
            if loaded is None:
                raise Refusal(RefusalCode.NOT_FOUND, f"adapter: no loaded adapter {message.adapter!r}")
            if loaded.model != request.model:
                raise invalid("adapter", f"{message.adapter!r} is loaded for model {loaded.model!r}, "
                                         f"not {request.model!r}")
        if message.HasField("session_id"):
            self.expire_sessions()
            if message.session_id not in self.sessions:
                raise Refusal(RefusalCode.NOT_FOUND, f"session_id: no open session {message.session_id!r}")
        kv = message.kv_transfer if message.HasField("kv_transfer") else None
        if kv is not None and kv.role == kv_pb2.KV_TRANSFER_ROLE_UNSPECIFIED:
            raise invalid("kv_transfer.role", "set KV_TRANSFER_ROLE_PRODUCER or KV_TRANSFER_ROLE_CONSUMER")
        producer = self.config.role == "prefill" or (kv is not None and kv.role == kv_pb2.KV_TRANSFER_ROLE_PRODUCER)
        # A KV producer computes the prompt and the first token only.
        return Plan(prompt, request.sequences, 1 if producer else max_tokens, guided, kv, extra, producer)

    async def generate(self, request: GenerateRequest):
        plan = self.plan(request)
        message = request.message
        req = Request(request.request_id, len(plan.prompt) + plan.extra_tokens, priority=message.priority,
                      kv_session=plan.kv.session_id if plan.kv is not None else "",
                      rank=zlib.crc32(request.request_id.encode()) % self.config.data_parallel_size)
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
        s = message.sampling
        await req.scheduled.wait()
        if req.aborted is not None:
            return
        prompt = plan.prompt
        adapter = message.adapter if message.HasField("adapter") else ""
        # Models do not share cached blocks: any but the default model keys them by its name too.
        salt = message.cache_salt if request.model == self.default_model else f"{request.model}\x00{message.cache_salt}"
        hashes = stand_in.block_hashes(prompt, self.kv_block_size, salt=salt, adapter=adapter)
        if plan.kv is not None and plan.kv.role == kv_pb2.KV_TRANSFER_ROLE_CONSUMER:
            cached = len(prompt)
        elif message.HasField("session_id"):
            cached = min(self.sessions[message.session_id].retained_tokens, len(prompt))
        elif message.bypass_prefix_cache:
            cached = 0
        else:
            cached = min(self.cached_prefix_tokens(hashes), len(prompt))
        temperature = s.temperature if s.HasField("temperature") else 1.0
        seed = s.seed if s.HasField("seed") else 0
        choice = tuple(s.guided.choice.values) if plan.guided == "choice" else ()
        seqs = [_Sequence(i, stand_in.SequenceSampler.start(prompt, seed=seed, index=i, temperature=temperature,
                                                           adapter=adapter, choice=choice,
                                                           json_object=plan.guided == "json_object"),
                          s.stop, s.stop_token_ids, s.include_stop_in_output,
                          s.min_tokens if s.HasField("min_tokens") else 0)
                for i in range(plan.sequences)]
        want_logprobs = s.HasField("logprobs")
        top_k = s.logprobs if want_logprobs else 0
        text = not message.skip_detokenize
        first = True
        delay = self.config.token_delay_ms / 1000.0
        while not all(q.finished for q in seqs):
            await asyncio.sleep(delay)
            while self.run.holds_requests and req.aborted is None:
                await asyncio.sleep(0.01)
            if req.aborted is not None:
                return
            req.generated += 1
            for q in seqs:
                if q.finished:
                    continue
                token = q.sampler.next_token()
                if token == stand_in.EOS_TOKEN_ID and s.ignore_eos:
                    q.sampler.forced = None
                    token = q.sampler.next_token()
                q.tokens.append(token)
                if want_logprobs:
                    top = q.sampler.top(max(top_k, 1), token)[:top_k] if top_k else []
                    q.logprobs.append(generation_pb2.TokenLogprobs(
                        token_id=token, logprob=q.sampler.logprob(token), rank=1,
                        top=[generation_pb2.TopLogprob(token_id=t, logprob=lp, token=stand_in.detokenize([t]))
                             for t, lp in top]))
                _check_stop(q, plan.max_tokens)
                if q.finished:
                    yield self._final(q, message, prompt, cached, plan.producer)
                    continue
                upto = len(q.tokens) - q.holdback()
                if upto > q.sent:
                    ids = q.tokens[q.sent:upto]
                    yield Chunk(tuple(ids), text=stand_in.detokenize(ids) if text else "", index=q.index,
                                logprobs=tuple(q.logprobs[q.sent:upto]),
                                prompt_logprobs=tuple(_prompt_logprobs(prompt, s.prompt_logprobs))
                                if first and s.HasField("prompt_logprobs") else ())
                    q.sent = upto
            first = False
        # The request completed: its blocks join the prefix cache, a session retains them.
        all_tokens = prompt + seqs[0].tokens
        self.store_blocks(stand_in.block_hashes(all_tokens, self.kv_block_size, salt=salt, adapter=adapter),
                          all_tokens, adapter)
        if message.HasField("session_id") and message.session_id in self.sessions:
            session = self.sessions[message.session_id]
            cap = session.capacity_tokens or self.models[session.model].max_context_tokens
            session.retained_tokens = min(cap, len(all_tokens))
            session.expires_ns = self.now_ns() + session.ttl_ms * 1_000_000

    def _final(self, q: _Sequence, message, prompt, cached, producer) -> Final:
        rest = q.tokens[q.sent:]
        kv_transfer = None
        if producer and self.has("openengine.kv"):
            kv = message.kv_transfer
            backends = self.limit("openengine.kv", "kv_transfer_backends")
            kv_transfer = kv_pb2.KvTransferParams(
                role=kv_pb2.KV_TRANSFER_ROLE_PRODUCER, session_id=kv.session_id,
                remote_engine_id=self.instance_id, remote_address=self.address,
                transfer_handle=f"kv-{uuid.uuid4().hex[:16]}",
                backend=kv.backend or (backends[0] if backends else ""),
                backend_params={"blocks": str(-(-len(prompt) // self.kv_block_size))})
        final = Final(q.reason, prompt_tokens=len(prompt), completion_tokens=len(q.tokens), token_ids=tuple(rest),
                      text="" if message.skip_detokenize else stand_in.detokenize(rest), index=q.index,
                      cached_prompt_tokens=cached, stop_reason=q.stop_reason,
                      logprobs=tuple(q.logprobs[q.sent:]) if message.sampling.HasField("logprobs") else (),
                      kv_transfer=kv_transfer)
        q.sent = len(q.tokens)
        return final

    # -- load ------------------------------------------------------------------------------------

    def load(self) -> Load:
        """The real scheduler state (REQ-LOAD-001, REQ-LOAD-003), per data-parallel rank; the SDK
        sums the ranks into the totals (REQ-LOAD-023)."""
        running = list(self.scheduler.running.values())
        queued = [r for _, _, r in self.scheduler.queued if r.aborted is None]
        return Load(active_kv_sessions=self.kv_sessions_active(),
                    prefill_batch_size=sum(1 for r in running if r.generated == 0),
                    decode_batch_size=sum(1 for r in running if r.generated > 0),
                    ranks=tuple(self.rank_loads(running, queued)),
                    attributes={"model": self.default_model, "state": self.run.name})

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
                                running_tokens=sum(r.prompt_tokens + r.generated for r in rr),
                                waiting_tokens=sum(r.prompt_tokens for r in rq)))
        return out

    def kv_sessions_active(self) -> int:
        return len({r.kv_session for r in self.scheduler.in_flight() if r.kv_session}) + len(self.sessions)

    # -- prefix cache and KV events ----------------------------------------------------------------

    def cached_prefix_tokens(self, hashes: list[bytes]) -> int:
        hit = 0
        for h in hashes:
            if h not in self.prefix_cache:
                break
            self.prefix_cache.move_to_end(h)
            hit += 1
        return hit * self.kv_block_size

    def store_blocks(self, hashes: list[bytes], token_ids: list[int], adapter: str) -> None:
        new = [h for h in hashes if h not in self.prefix_cache]
        for h in hashes:
            self.prefix_cache[h] = 1
            self.prefix_cache.move_to_end(h)
        events = []
        if new:
            first = hashes.index(new[0])
            parent = hashes[first - 1] if first > 0 else None
            bs = self.kv_block_size
            stored = kv_pb2.KvBlocksStored(block_hashes=new, token_ids=token_ids[first * bs:(first + len(new)) * bs],
                                           block_size=bs, adapter=adapter, medium=kv_pb2.KV_MEDIUM_GPU)
            if parent is not None:
                stored.parent_block_hash = parent
            events.append(kv_pb2.KvEvent(stored=stored))
        capacity = max(1, self.total_kv_blocks // 2)
        evicted = []
        while len(self.prefix_cache) > capacity:
            evicted.append(self.prefix_cache.popitem(last=False)[0])
        if evicted:
            events.append(kv_pb2.KvEvent(removed=kv_pb2.KvBlocksRemoved(block_hashes=evicted,
                                                                        medium=kv_pb2.KV_MEDIUM_GPU)))
        self.publish_kv(events)

    def clear_prefix_cache(self) -> int:
        freed = len(self.prefix_cache)
        self.prefix_cache.clear()
        self.publish_kv([kv_pb2.KvEvent(cleared=kv_pb2.KvAllBlocksCleared())])
        self.load_changed()
        return freed

    def publish_kv(self, events: list) -> None:
        if not events or not self.has("openengine.kv"):
            return
        self.kv_sequence += 1
        batch = kv_pb2.SubscribeKvEventsResponse(sequence=self.kv_sequence, timestamp=self.timestamp(),
                                                 events=events)
        if self.limit("openengine.kv", "event_replay"):
            self.kv_buffer.append(batch)
        self.kv_events.publish(batch)

    # -- sessions and runtime events ---------------------------------------------------------------

    def expire_sessions(self) -> None:
        now = self.now_ns()
        for sid in [s for s, v in self.sessions.items() if v.expires_ns <= now]:
            del self.sessions[sid]

    def emit(self, event: events_pb2.RuntimeEvent, kind: str) -> None:
        """Publish a runtime event of an advertised kind (REQ-EVENTS-001)."""
        if self.has("openengine.runtime-events") and kind in self.limit("openengine.runtime-events", "event_kinds"):
            self.runtime_events.publish((self.now_ns(), event))

    def state_changed(self, previous: RunState, current: RunState, reason: str) -> None:
        self.run = current
        if current.phase != previous.phase:
            self.emit(events_pb2.RuntimeEvent(state_changed=events_pb2.StateChanged(
                previous=previous.phase, state=current.phase, reason=reason)), "state_changed")
        if current.phase == STOPPING:
            for stream in (self.runtime_events, self.kv_events):
                stream.close_all(RefusalCode.UNAVAILABLE, "the engine is shutting down")

    def revision_changed(self, previous: int, revision: int, changed: tuple[str, ...]) -> None:
        self.scheduler.pump()
        if any(c.startswith("openengine.kv.") for c in changed):
            self.kv_events.close_all(RefusalCode.ABORTED, "openengine.kv capabilities changed")
        self.emit(events_pb2.RuntimeEvent(capability_revision_changed=events_pb2.CapabilityRevisionChanged(
            previous_revision=previous, revision=revision)), "capability_revision_changed")

    # -- admin operations (the SDK owns the run state) -----------------------------------------------

    async def pause(self, mode: str) -> None:
        """Nothing to do: the generation loop holds its requests while the state says keep."""

    async def resume(self) -> None:
        """Nothing to do: the held requests go on as the state changes."""

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


def _check_stop(q: _Sequence, max_tokens: int) -> None:
    token = q.tokens[-1]
    allowed = len(q.tokens) > q.min_tokens
    if allowed and token == stand_in.EOS_TOKEN_ID:
        q.finished, q.reason = True, FinishReason.STOP
        q.tokens.pop()
        q.logprobs = q.logprobs[:len(q.tokens)]
        return
    if allowed and token in q.stop_ids:
        q.finished, q.reason, q.stop_reason = True, FinishReason.STOP, str(token)
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
                q.finished, q.reason, q.stop_reason = True, FinishReason.STOP, stop.decode()
                return
    if len(q.tokens) >= max_tokens:
        q.finished, q.reason = True, FinishReason.LENGTH


def _prompt_logprobs(prompt, k) -> list[generation_pb2.TokenLogprobs]:
    return [generation_pb2.TokenLogprobs(
        token_id=tok, logprob=lp, rank=1,
        top=[generation_pb2.TopLogprob(token_id=t, logprob=v, token=stand_in.detokenize([t])) for t, v in top[:k]])
        for tok, lp, top in stand_in.prompt_logprobs(prompt, max(k, 1))]


def _engine_version() -> str:
    try:
        from importlib.metadata import version
        return version("openengine-profiles")
    except Exception:
        return "0"
