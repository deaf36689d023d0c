"""The engine's state: scheduler, caches, run state, health, event streams and the current
configuration epoch. Services (`services/`) read and change it; nothing here touches gRPC
beyond the health servicers it keeps up to date."""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from openengine.contract import WORK_SERVICES
from openengine.engine.config import ResolvedConfig, ResolvedModel, combination_refusals
from openengine.engine.contract import ADMIN, INFERENCE  # noqa: F401  (INFERENCE re-exported)
from openengine.engine.faults import Hooks
from openengine.serve.runstate import RunState, transition
from openengine.serve.load import Clock, LoadPublisher
from openengine.v1 import events_pb2, kv_pb2, load_pb2
from openengine.validate._watch import RANK_SUMMED_FIELDS

log = logging.getLogger("openengine.engine")

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
HEALTH_LIST_CAP = 100  # the upstream health protocol's List limit


ES = events_pb2


@dataclass(eq=False)
class Request:
    """One accepted request (a Generate call, or a task/encode call while it runs)."""

    request_id: str
    prompt_tokens: int
    priority: int = 0
    kv_session: str = ""
    rank: int = 0
    generated: int = 0
    running: bool = False
    aborted: tuple[str, bool] | None = None   # (reason, retryable)
    scheduled: asyncio.Event = field(default_factory=asyncio.Event)
    order: int = 0

    def abort(self, reason: str, retryable: bool) -> None:
        if self.aborted is None:
            self.aborted = (reason, retryable)
        self.scheduled.set()  # wake a queued request so it can end


class Scheduler:
    """At most `max_running` requests run at once; the rest wait in order (by priority when the
    engine honours priorities). Every admission and release is a load change."""

    def __init__(self, runtime: "Runtime"):
        self._rt = runtime
        self.running: dict[str, Request] = {}
        self.queued: list[tuple[int, int, Request]] = []
        self._order = itertools.count()

    @property
    def max_running(self) -> int:
        return int(self._rt.limit("openengine.core", "max_running_requests"))

    def in_flight(self) -> list[Request]:
        return list(self.running.values()) + [r for _, _, r in self.queued]

    def find(self, request_id: str) -> Request | None:
        return self.running.get(request_id) or next((r for _, _, r in self.queued if r.request_id == request_id), None)

    def submit(self, req: Request) -> None:
        req.order = next(self._order)
        honour = self._rt.limit("openengine.core", "priority")
        heapq.heappush(self.queued, (req.priority if honour else 0, req.order, req))
        self.pump()

    def pump(self) -> None:
        while self.queued and len(self.running) < self.max_running:
            _, _, req = heapq.heappop(self.queued)
            if req.aborted is not None:
                continue
            req.running = True
            self.running[req.request_id] = req
            req.scheduled.set()
        self._rt.load_changed()

    def release(self, req: Request) -> None:
        if self.running.get(req.request_id) is req:
            del self.running[req.request_id]
        else:
            before = len(self.queued)
            self.queued = [e for e in self.queued if e[2] is not req]
            if len(self.queued) != before:
                heapq.heapify(self.queued)
        req.running = False
        self.pump()

    def abort(self, match: Callable[[Request], bool], reason: str, *, retryable: bool) -> int:
        hits = [r for r in self.in_flight() if r.aborted is None and match(r)]
        for r in hits:
            r.abort(reason, retryable)
        return len(hits)


class EventStream:
    """Fan-out of events to subscribers, each with its own bounded queue."""

    def __init__(self, capacity: int = 4096):
        self.subscribers: set["Subscriber"] = set()
        self.capacity = capacity

    def publish(self, item) -> None:
        for sub in list(self.subscribers):
            sub.put(item)


@dataclass(eq=False)
class Subscriber:
    capacity: int
    items: collections.deque = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False
    closed_with: tuple | None = None

    def put(self, item) -> None:
        if len(self.items) >= self.capacity:
            self.overflowed = True
        else:
            self.items.append(item)
        self.wake.set()

    def close(self, code, message: str) -> None:
        self.closed_with = (code, message)
        self.wake.set()


class FaultyHealth(health_aio.HealthServicer):
    """The standard servicer, with hook points for the health faults."""

    def __init__(self, hooks: Hooks | None = None):
        super().__init__()
        self._hooks = hooks or Hooks()

    async def Check(self, request, context):
        if request.service not in self._server_status:
            status = self._hooks.at("health.unknown-service", None)
            if status is not None:
                return health_pb2.HealthCheckResponse(status=status)
        return await super().Check(request, context)

    async def List(self, request, context):
        """Every name `Check` answers for, with its status (REQ-HEALTH-013). Like the upstream
        health protocol, more than HEALTH_LIST_CAP names is refused rather than answered in part."""
        if not self._hooks.at("health.list-served", True):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        statuses = dict(self._server_status)
        if len(statuses) > HEALTH_LIST_CAP:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{len(statuses)} health names exceed the List cap of {HEALTH_LIST_CAP}; "
                                "use Check or Watch per service")
        return health_pb2.HealthListResponse(
            statuses={name: health_pb2.HealthCheckResponse(status=status) for name, status in statuses.items()})

    async def Watch(self, request, context):
        watch = self._hooks.at("health.watch", health_aio.HealthServicer.Watch)
        return await watch(self, request, context)


class Health:
    """Keeps the standard health servicers in line with the run state.

    The aio servicer holds a per-service lock while it writes to a watcher, so a stalled health
    watcher could block `set`. Updates therefore go through one serial task, and callers wait for
    it only briefly."""

    def __init__(self, runtime: "Runtime"):
        self._rt = runtime
        self.main = FaultyHealth(runtime.hooks)
        self.admin = FaultyHealth(runtime.hooks) if runtime.admin_separate else None
        self._lock = asyncio.Lock()
        self._pending: asyncio.Task | None = None
        self.shutting_down = False

    def desired(self) -> dict[str, int]:
        rt = self._rt
        serving_work = rt.hooks.at("health.work-serving", rt.state == ES.ENGINE_STATE_SERVING, state=rt.state)
        out = {}
        for service in rt.advertised_services():
            if rt.admin_separate and service == ADMIN:
                continue
            out[service] = (SERVING if serving_work else NOT_SERVING) if service in WORK_SERVICES else SERVING
        out = rt.hooks.at("health.per-service", out)
        out[""] = SERVING if serving_work else NOT_SERVING
        from openengine.engine import alias  # REQ-ALIAS-003: served aliases, with a v1 service's status
        out.update(alias.health_statuses(rt, out))
        return out

    async def _apply(self) -> None:
        async with self._lock:
            if self.shutting_down:
                return
            for service, status in self.desired().items():
                await self.main.set(service, status)
            if self.admin is not None:
                await self.admin.set(ADMIN, SERVING)
                await self.admin.set("", SERVING)

    async def update(self, *, wait: float = 1.0) -> None:
        task = asyncio.ensure_future(self._apply())
        self._rt.keep(task)
        try:
            await asyncio.wait_for(asyncio.shield(task), wait)
        except asyncio.TimeoutError:
            log.warning("health update is waiting for a stalled health watcher")

    async def shutdown(self) -> None:
        self.shutting_down = True
        async with self._lock:
            await self.main.enter_graceful_shutdown()
            if self.admin is not None:
                await self.admin.enter_graceful_shutdown()


@dataclass
class Session:
    session_id: str
    model: str
    capacity_tokens: int
    ttl_ms: int
    retained_tokens: int = 0
    expires_ns: int = 0


@dataclass
class Adapter:
    name: str
    model: str
    source: str
    rank: int
    pinned: bool


class Runtime:
    """Everything the services share. One per engine process (or per in-process test engine)."""

    def __init__(self, cfg: ResolvedConfig):
        self.cfg = cfg
        self.hooks = Hooks(cfg.faults)   # where the configured faults act (faults.py)
        # (capability revision, CapabilityReport) that requests are admitted against (Base.admit).
        self.admission: tuple[int, Any] | None = None
        self.config = cfg.config
        self.catalogue = cfg.catalogue
        self.advertised = cfg.advertised
        self.limits: dict[str, dict[str, Any]] = {k: dict(v) for k, v in cfg.limits.items()}
        # Served models in configured order (the first is the default) and, per model, the
        # model-scoped limits it sets itself; every other limit is the engine-wide value.
        self.models: dict[str, ResolvedModel] = {m.name: m for m in cfg.models}
        self.model_limits: dict[str, dict[str, dict[str, Any]]] = {
            m.name: {k: dict(v) for k, v in m.overrides.items()} for m in cfg.models}
        self.revision = 1
        self.instance_id = cfg.instance_id
        self.clock = Clock()
        self.run = RunState()   # phase, pause mode and sleep tags; changed only by `transition`
        self.address = ""
        self.admin_separate = self.config.admin.port is not None
        self.scheduler = Scheduler(self)
        self.load = LoadPublisher(self.build_load)
        self.runtime_events = EventStream()
        self.kv_events = EventStream()
        self.kv_sequence = 0
        kv_buffer = int(self.limits.get("openengine.kv", {}).get("event_buffer_size", 0) or 0)
        self.kv_buffer: collections.deque = collections.deque(maxlen=max(kv_buffer, 1))
        self.prefix_cache: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self.sessions: dict[str, Session] = {}
        self.adapters: dict[str, Adapter] = {}
        self.encoder_cache: dict[str, tuple[int, int]] = {}   # handle -> (tokens, expires_ns)
        self._tasks: set[asyncio.Task] = set()
        self.health = Health(self)
        self.last_prefill_batch = 0
        self.last_decode_batch = 0

    # -- configuration epoch ------------------------------------------------------------------

    def has(self, profile: str) -> bool:
        return any(p.name == profile for p in self.advertised)

    def limit(self, profile: str, name: str) -> Any:
        values = self.limits.get(profile)
        if values is not None and name in values:
            return values[name]
        p = self.catalogue.profile(profile)
        lim = p.limit(name) if p else None
        return lim.default if lim else None

    def advertised_services(self) -> list[str]:
        return self.catalogue.services_of(p.name for p in self.advertised)

    @property
    def model_name(self) -> str:
        """The default model: the one a request with an empty `model` is served by."""
        return next(iter(self.models), self.config.model.name)

    def lists(self, model: str, profile: str) -> bool:
        """Whether a served model supports a model-scoped profile (REQ-CAP-012)."""
        m = self.models.get(model)
        return m is not None and profile in m.profiles and self.has(profile)

    def model_limit(self, model: str, profile: str, name: str) -> Any:
        """A model-scoped limit as `model` sees it: its own value, else the engine-wide one."""
        values = self.model_limits.get(model, {}).get(profile, {})
        return values[name] if name in values else self.limit(profile, name)

    def model_limit_values(self, model: str, profile: str) -> dict[str, Any]:
        return {**self.limits.get(profile, {}), **self.model_limits.get(model, {}).get(profile, {})}

    @property
    def kv_block_size(self) -> int:
        return int(self.limit("openengine.kv", "kv_block_size"))

    @property
    def total_kv_blocks(self) -> int:
        configured = int(self.limit("openengine.kv", "total_kv_blocks") or 0) if self.has("openengine.kv") else 0
        return configured or 4096

    def keep(self, task: asyncio.Task) -> None:
        """Hold a reference to a background task until it ends."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def check_update(self, new_limits: dict[str, dict[str, Any]],
                     new_model_limits: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
        """What start-up would refuse in the updated configuration (the same rules, one function)."""
        return combination_refusals(self.advertised, new_limits,
                                    {name: m.profiles for name, m in self.models.items()}, new_model_limits,
                                    cat=self.catalogue)

    def apply_limits(self, new_limits: dict[str, dict[str, Any]], changed: list[str], *,
                     model_limits: dict[str, dict[str, dict[str, Any]]] | None = None) -> tuple[int, int]:
        """Start a new configuration epoch with these limits (REQ-REV-003, REQ-REV-005, REQ-REV-006)."""
        import grpc

        previous = self.revision
        self.limits = new_limits
        if model_limits is not None:
            self.model_limits = model_limits
        self.revision += 1
        self.scheduler.pump()
        if self.hooks.at("revision.ends-watch-streams", True):
            self.load.end_all(grpc.StatusCode.ABORTED,
                              f"capability revision changed from {previous} to {self.revision}; "
                              f"re-read the capabilities and watch again", older_than=self.revision)
        if any(c.startswith("openengine.kv.") for c in changed):
            for sub in list(self.kv_events.subscribers):
                sub.close(grpc.StatusCode.ABORTED, "openengine.kv capabilities changed")
        self.emit(ES.RuntimeEvent(capability_revision_changed=ES.CapabilityRevisionChanged(
            previous_revision=previous, revision=self.revision)), "capability_revision_changed")
        log.info("capability revision %d -> %d (%s)", previous, self.revision, ", ".join(changed))
        return previous, self.revision

    # -- run state -------------------------------------------------------------------------------

    @property
    def state(self) -> int:
        """The phase (EngineState) of the run state."""
        return self.run.phase

    def accepting(self) -> bool:
        return self.run.accepting

    def apply(self, event: str, reason: str, **details) -> bool:
        """Move to the state the transition table gives for `event` (IllegalTransition when it
        gives none); log and publish a phase change. Returns whether the phase changed; the
        caller brings health up to date (`transition` does)."""
        previous = self.run
        self.run = transition(previous, event, **details)
        if self.run.phase == previous.phase:
            return False
        log.info("state %s -> %s (%s)", previous.name, self.run.name, reason)
        self.emit(ES.RuntimeEvent(state_changed=ES.StateChanged(
            previous=previous.phase, state=self.run.phase, reason=reason)), "state_changed")
        return True

    async def transition(self, event: str, reason: str, **details) -> RunState:
        """`apply`, then health in line with the new phase (REQ-HEALTH-007)."""
        if self.apply(event, reason, **details):
            await self.health.update()
        return self.run

    def emit(self, event: events_pb2.RuntimeEvent, kind: str) -> None:
        if not self.has("openengine.runtime-events"):
            return
        if kind not in self.limit("openengine.runtime-events", "event_kinds"):
            return  # REQ-EVENTS-001: only advertised kinds
        self.runtime_events.publish((self.clock.now_ns(), event))

    # -- load --------------------------------------------------------------------------------------

    def load_changed(self) -> None:
        self.load.changed()

    def rank_loads(self, running: list, queued: list) -> list[load_pb2.RankLoad]:
        """Each data-parallel rank's share. The totals of a snapshot are their sums (REQ-LOAD-023):
        the KV blocks are split evenly over the ranks (the first ones take the remainder), and so
        is the prefix cache, which every rank's share of used blocks includes."""
        size = self.config.data_parallel_size
        bs = self.kv_block_size
        total, cached = self.total_kv_blocks, len(self.prefix_cache)
        out = []
        for rank in range(size):
            rr = [r for r in running if r.rank == rank]
            rq = [r for r in queued if r.rank == rank]
            rank_total = total // size + (1 if rank < total % size else 0)
            rank_cached = cached // size + (1 if rank < cached % size else 0)
            rank_cached = self.hooks.at("load.rank-cached-blocks", rank_cached)
            busy = sum(-(-(r.prompt_tokens + r.generated) // bs) for r in rr)
            out.append(load_pb2.RankLoad(
                data_parallel_rank=rank, running_requests=len(rr), queued_requests=len(rq),
                used_kv_blocks=min(rank_total, busy + rank_cached), total_kv_blocks=rank_total,
                running_tokens=sum(r.prompt_tokens + r.generated for r in rr),
                waiting_tokens=sum(r.prompt_tokens for r in rq)))
        return out

    def kv_sessions_active(self) -> int:
        return len({r.kv_session for r in self.scheduler.in_flight() if r.kv_session}) + len(self.sessions)

    def build_load(self, per_rank: bool = False) -> load_pb2.LoadInfo:
        """A complete snapshot of the real scheduler state (REQ-LOAD-001, REQ-LOAD-003)."""
        sched = self.scheduler
        running = list(sched.running.values())
        queued = [r for _, _, r in sched.queued if r.aborted is None]
        ranks = self.rank_loads(running, queued)
        info = load_pb2.LoadInfo(
            instance_id=self.instance_id,
            timestamp=self.clock.timestamp(),
            active_kv_sessions=self.kv_sessions_active(),
            prefill_batch_size=sum(1 for r in running if r.generated == 0),
            decode_batch_size=sum(1 for r in running if r.generated > 0),
        )
        for name in RANK_SUMMED_FIELDS:
            setattr(info, name, sum(getattr(rank, name) for rank in ranks))
        info.used_kv_blocks = self.hooks.at("load.total-used-blocks", info.used_kv_blocks, rt=self)
        info.attributes["model"] = self.model_name
        info.attributes["state"] = ES.EngineState.Name(self.state)
        if per_rank and self.has("openengine.load") and self.limit("openengine.load", "per_rank"):
            info.ranks.extend(ranks)
        return info

    # -- prefix cache and KV events -----------------------------------------------------------

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
            events.append(kv_pb2.KvEvent(removed=kv_pb2.KvBlocksRemoved(block_hashes=evicted, medium=kv_pb2.KV_MEDIUM_GPU)))
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
        batch = kv_pb2.SubscribeKvEventsResponse(sequence=self.kv_sequence, timestamp=self.clock.timestamp(),
                                                 events=events)
        if self.limit("openengine.kv", "event_replay"):
            self.kv_buffer.append(batch)
        self.kv_events.publish(batch)

    # -- sessions ------------------------------------------------------------------------------

    def expire_sessions(self) -> None:
        now = self.clock.now_ns()
        for sid in [s for s, v in self.sessions.items() if v.expires_ns <= now]:
            del self.sessions[sid]
