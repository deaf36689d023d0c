"""Watch an engine's load: Observability/WatchLoad when it can, Control/GetLoad polling when it must.

One state machine, `WatchState`, holds every decision and does no I/O (the style of h11): it is fed
what happened (discovery's answers, stream messages, poll results, failures, runtime events, clock
readings) and answers what to do next (`Discover`, `Watch`, `Poll`, `Pause`, `Finished`). Two thin
drivers run it: `LoadWatcher` over a grpc.Channel from threads, `AsyncLoadWatcher` over a
grpc.aio.Channel from tasks; they only make the calls and wait.

What the state machine decides: the stream is validated (`WatchLoadChecker`) and reopened with
bounded, jittered backoff; a silent stream counts as dead (REQ-LOAD-021). A new capability revision
(in the settings, an ABORTED stream, or a CapabilityRevisionChanged event when
openengine.runtime-events is advertised; REQ-REV-006, REQ-REV-008) makes it re-read discovery. So
does an instance id that differs from discovery's: a new instance behind the address is a
`Restart`, and only an id discovery does not confirm is a violation. WatchLoad is called only when
openengine.load is advertised (REQ-CORE-004); otherwise, and when WatchLoad answers
UNIMPLEMENTED (REQ-LOAD-020), the load is polled with GetLoad, a core RPC every engine serves,
upstream-only ones included, never faster than min_watch_interval_ms when that is known. When
nothing is left to try it ends: mode `unavailable`, `end_reason` says why, waiters return at once.
Violations are kept in a bounded ring with a count per rule id, so memory stays fixed.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import grpc

from openengine.client._view import CapabilityView, IncompatibleServerError, NotOpenEngineError, adrive, drive
from openengine.validate import Violation, WatchLoadChecker

WATCH, POLL, UNAVAILABLE = "watch", "poll", "unavailable"
RESTARTS_KEPT = 100
# The longest the silence watchdog sleeps: a stream reopened meanwhile may allow less silence than
# the one it went to sleep on.
WATCHDOG_LONGEST_S = 1.0
# The shortest: how often it checks while nothing bounds the silence yet.
WATCHDOG_SHORTEST_S = 0.05
# GetLoad polling interval when nothing advertised says otherwise (openengine.load's default
# watch interval).
DEFAULT_POLL_S = 0.1


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnection attempts: `initial` growing by `multiplier` up to `maximum`
    seconds, each scaled by a random factor in [1 - jitter, 1 + jitter] (and never above
    `maximum`). `attempts` bounds consecutive failures (None: forever)."""

    initial: float = 0.1
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2
    attempts: int | None = None
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delays(self) -> Iterator[float]:
        delay = self.initial
        for _ in itertools.count() if self.attempts is None else range(self.attempts):
            yield min(self.maximum, delay * self.rng.uniform(1 - self.jitter, 1 + self.jitter))
            delay = min(self.maximum, delay * self.multiplier)


@dataclass(frozen=True)
class Restart:
    """A new engine instance noticed behind the watched address."""

    previous: str | None      # the instance id validated until then
    current: str | None       # the new instance's id, as its discovery reports it
    at: float                 # when it was noticed, on the watcher's clock


# -- what the state machine asks a driver to do ------------------------------------------------------

@dataclass(frozen=True)
class Discover:
    """Read discovery (`CapabilityView.fetch`) and pass the view to `discovered`."""


@dataclass(frozen=True)
class Watch:
    """Open WatchLoad with `request`; call `opened`, then `received` per message, then
    `stream_ended` (or `failed`)."""

    request: Any


@dataclass(frozen=True)
class Poll:
    """Call GetLoad with `request` and pass the answer to `polled` (or the error to `failed`)."""

    request: Any


@dataclass(frozen=True)
class Pause:
    """Wait `seconds`, then ask again (a stop ends the wait)."""

    seconds: float


@dataclass(frozen=True)
class Finished:
    """Nothing is left to do."""


# What the events side asks: subscribe to runtime events, or wait until a view advertises them.
SUBSCRIBE, AWAIT_VIEW = "subscribe", "await-view"


class WatchState:
    """Every decision of a load watcher, with no I/O. Its inputs are methods named after what
    happened; `next_step()` says what to do next. `wake` is called whenever a snapshot waiter may
    have something new to see (a snapshot, the end), `rouse` when the events loop may (a new view,
    the end); neither is called per message otherwise."""

    def __init__(self, *, view: CapabilityView | None = None, request=None, backoff: Backoff | None = None,
                 tolerance: float = 0.5, poll_interval: float | None = None,
                 on_snapshot: Callable | None = None, on_revision_change: Callable | None = None,
                 on_restart: Callable[[Restart], None] | None = None, violations_kept: int = 1000,
                 clock: Callable[[], float] = time.monotonic, wake: Callable[[], None] = lambda: None,
                 rouse: Callable[[], None] = lambda: None):
        from openengine.v1 import load_pb2, server_pb2

        self.request = request if request is not None else load_pb2.WatchLoadRequest()
        self.poll_request = server_pb2.GetLoadRequest(include_per_rank=self.request.per_rank)
        self.backoff = backoff or Backoff()
        self.tolerance = tolerance
        self.asked_poll_interval = poll_interval
        self.poll_interval = poll_interval if poll_interval is not None else DEFAULT_POLL_S
        self.on_snapshot = on_snapshot
        self.on_revision_change = on_revision_change
        self.on_restart = on_restart
        self.clock = clock
        self.wake = wake
        self.rouse = rouse
        self.view: CapabilityView | None = None
        self.latest = None
        self.latest_at: float | None = None
        self.snapshots = 0                        # snapshots stored so far
        self.violations: deque[Violation] = deque(maxlen=violations_kept)
        self.violation_counts: Counter[str] = Counter()
        self.restarts: deque[Restart] = deque(maxlen=RESTARTS_KEPT)
        self.reconnects = 0
        self.revision_changed = False
        self.end_reason: str | None = None
        self.last_error: BaseException | None = None
        self.mode = WATCH
        self.stopped = False
        self.checker: WatchLoadChecker | None = None
        self._refresh_needed = False              # re-read discovery before the next stream
        self._questioned_instance: str | None = None   # a differing id discovery was asked about
        self._delays: Iterator[float] | None = None
        self._pause: float | None = None          # a wait owed before the next call
        self._reopen = False                      # the stream in flight must be cancelled
        self._watch_unimplemented = False         # WatchLoad answered UNIMPLEMENTED on this instance
        self._events_delays = self.backoff.delays()
        if view is not None:
            self.discovered(view)

    # -- questions -------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.mode != UNAVAILABLE and not self.stopped

    def settled(self, since: int) -> bool:
        """The outcome a snapshot waiter is waiting for is known: a new snapshot, or none will come."""
        return self.snapshots > since or not self.running

    def next_step(self):
        """What the main loop does now."""
        if not self.running:
            return Finished()
        if self._pause is not None:
            pause, self._pause = self._pause, None
            return Pause(pause)
        if self.view is None or self._refresh_needed:
            return Discover()
        if self.mode == WATCH:
            self.checker = WatchLoadChecker(
                instance_id=self.view.instance_id,
                capability_revision=self.view.revision if self.view.server_info is not None else None,
                observability=self.view.report.limits.get("openengine.load"), request=self.request,
                tolerance=self.tolerance, clock=self.clock, keep=0)
            self._reopen = False
            return Watch(self.request)
        return Poll(self.poll_request)

    def next_events_step(self) -> str | Finished:
        """What the events loop does now: SUBSCRIBE, AWAIT_VIEW (until a view advertises runtime
        events), or Finished."""
        if not self.running:
            return Finished()
        advertised = self.view is not None and self.view.supports("openengine.runtime-events")
        return SUBSCRIBE if advertised else AWAIT_VIEW

    def watchdog_delay(self) -> float:
        """Seconds until the next silence check: the moment the stream becomes overdue (a message
        meanwhile moves it on), so a busy stream does not wake its watchdog many times per allowed
        silence; never sooner than WATCHDOG_SHORTEST_S, never later than WATCHDOG_LONGEST_S."""
        checker = self.checker
        overdue = checker.overdue_at if checker is not None else None
        if overdue is None:
            return WATCHDOG_SHORTEST_S
        return min(WATCHDOG_LONGEST_S, max(WATCHDOG_SHORTEST_S, overdue - self.clock()))

    # -- inputs: the main loop -------------------------------------------------------------------
    def discovered(self, view: CapabilityView) -> None:
        """A (new) discovery view: what is advertised decides what may be called."""
        previous = self.view
        self.view = view
        self._refresh_needed = False
        if previous is not None and previous.instance_id != view.instance_id:
            restart = Restart(previous.instance_id, view.instance_id, self.clock())
            self.restarts.append(restart)
            self._watch_unimplemented = False    # the new instance may serve WatchLoad
            if self.on_restart is not None:
                self.on_restart(restart)
        if view.supports("openengine.load"):
            least = view.limit("openengine.load", "min_watch_interval_ms")
            self.poll_interval = self.asked_poll_interval if self.asked_poll_interval is not None \
                else max(DEFAULT_POLL_S, (least or 100) / 1000.0)
            self.mode = POLL if self._watch_unimplemented else WATCH
        else:
            self.mode = POLL           # GetLoad is core: every engine answers it
        self.rouse()

    def received(self, msg) -> bool:
        """Judge and keep one stream message. False when the stream must be closed now: it speaks
        for an instance discovery has not named yet, or a revision event asked for a new one."""
        if self._reopen:
            return False
        checker = self.checker
        previous = checker.latest
        found = checker.feed(msg)
        if found:
            if self._new_instance_suspected(found):
                return False
            self._record(found)
            if any(v.rule_id == "OEV319" for v in found):
                self._revision_change(msg.settings.capability_revision)
        if checker.latest is not previous:     # the message carried a snapshot's load
            self._store(checker.latest)
        return not self.stopped

    def stream_ended(self) -> None:
        """The stream closed without an error (or was closed to reopen it)."""
        if self.stopped:
            return
        if self._refresh_needed:
            return                      # closed for a new discovery: reopened without backoff
        self._back_off()

    def polled(self, load) -> None:
        self._store(load)
        self._pause = self.poll_interval

    def failed(self, err: BaseException) -> None:
        """A call failed: decide between polling, ending, re-reading discovery and backing off."""
        if self.stopped:
            return
        self.last_error = err
        if isinstance(err, (NotOpenEngineError, IncompatibleServerError)):
            self.end(str(err), err)
            return
        if not isinstance(err, grpc.RpcError):
            self.end(f"the watcher failed: {type(err).__name__}: {err}", err)
            return
        code = err.code()
        if code == grpc.StatusCode.CANCELLED and self._refresh_needed:
            return                      # closed by the watcher itself to reopen at once
        if code == grpc.StatusCode.UNIMPLEMENTED:
            if self.view is None:
                self.end("the engine answers discovery with UNIMPLEMENTED", err)
            elif self.mode == WATCH:
                self.mode = POLL
                self._watch_unimplemented = True
                self.wake()
            else:
                self.end("GetLoad answers UNIMPLEMENTED, although every OpenEngine engine serves it", err)
            return
        if code == grpc.StatusCode.ABORTED and self.mode == WATCH:
            self._revision_change(None)
        self._back_off()

    def silent(self) -> bool:
        """A clock reading: True when the stream has been silent for longer than its heartbeat
        allows and must be cancelled (it reopens)."""
        checker = self.checker
        if checker is None or self.mode != WATCH or not self.running:
            return False
        found = checker.tick()
        if found:
            self._record(found)
            return True
        return False

    def stop(self) -> None:
        self.stopped = True
        self.wake()
        self.rouse()

    def end(self, reason: str, error: BaseException | None = None) -> None:
        """Nothing is left to try: say why, and release every waiter."""
        self.end_reason = reason
        if error is not None:
            self.last_error = error
        self.mode = UNAVAILABLE
        self.wake()
        self.rouse()

    # -- inputs: the events loop -----------------------------------------------------------------
    def runtime_event(self, msg) -> bool:
        """A runtime event; True when the load stream must be reopened under a new revision."""
        self._events_delays = self.backoff.delays()
        if msg.event.WhichOneof("kind") == "capability_revision_changed":
            self._revision_change(msg.event.capability_revision_changed.revision)
            self._reopen = True
            return True
        return False

    def events_failed(self, err: BaseException) -> float | None:
        """The events stream ended: the pause before subscribing again, or None to give up on
        events (the watcher stops, or the engine does not serve them)."""
        if not self.running:
            return None
        if isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.UNIMPLEMENTED:
            return None
        return next(self._events_delays, self.backoff.maximum)

    # -- inner decisions -------------------------------------------------------------------------
    def _record(self, found: list[Violation]) -> None:
        self.violations.extend(found)
        self.violation_counts.update(v.rule_id for v in found)

    def _new_instance_suspected(self, found: list[Violation]) -> bool:
        """An instance id that differs from discovery's (OEV309) may be a restart: discovery is
        re-read before anything is judged against the old instance. Only an id discovery was
        already asked about, and did not confirm, stays a violation."""
        seen = next((v.value for v in found if v.rule_id == "OEV309" and v.value), None)
        if seen is None or seen == self._questioned_instance:
            return False
        self._questioned_instance = seen
        self._refresh_needed = True
        return True

    def _store(self, load) -> None:
        # The count goes up last: a waiter that sees it sees the snapshot too.
        self.latest = load
        self.latest_at = self.clock()
        self.snapshots += 1
        self._delays = None           # a working stream: the next failure starts backoff afresh
        self.wake()
        if self.on_snapshot is not None:
            self.on_snapshot(load)

    def _revision_change(self, revision: int | None) -> None:
        self.revision_changed = True
        self._refresh_needed = True
        if self.on_revision_change is not None:
            self.on_revision_change(revision)

    def _back_off(self) -> None:
        """Wait before the next attempt, or end when backoff is exhausted. Discovery is re-read
        before the next stream: the engine may have restarted meanwhile."""
        if self._delays is None:
            self._delays = self.backoff.delays()
        delay = next(self._delays, None)
        if delay is None:
            error = self.last_error
            self.end(f"gave up after {self.backoff.attempts} failed attempts in a row"
                     + (f": {error.code().name} {error.details()}" if isinstance(error, grpc.RpcError) else ""))
            return
        self.reconnects += 1
        self._refresh_needed = self.view is not None
        self._pause = delay


class _Driver:
    """What both drivers share: the state machine's record (read-only), the calls they open, and
    the loops, written once as generators of the I/O they need."""

    _state: WatchState

    latest = property(lambda self: self._state.latest, doc="The latest complete LoadInfo, or None.")
    mode = property(lambda self: self._state.mode, doc="watch, poll, or unavailable.")
    view = property(lambda self: self._state.view, doc="Discovery's answers for the instance being watched.")
    instance_id = property(lambda self: self._state.view.instance_id if self._state.view is not None else None)
    violations = property(lambda self: tuple(self._state.violations),
                          doc="The latest stream violations, oldest first (at most `violations_kept`).")
    violation_counts = property(lambda self: dict(self._state.violation_counts),
                                doc="Rule id -> violations of that rule seen over the watcher's life.")
    restarts = property(lambda self: tuple(self._state.restarts),
                        doc="New instances noticed, oldest first (the latest RESTARTS_KEPT).")
    reconnects = property(lambda self: self._state.reconnects, doc="Streams reopened after a failure.")
    revision_changed = property(lambda self: self._state.revision_changed,
                                doc="True once the engine's capability revision changed.")
    end_reason = property(lambda self: self._state.end_reason,
                          doc="Why the watcher ended (None while it runs or after `stop`).")
    last_error = property(lambda self: self._state.last_error,
                          doc="The latest failed call, or the error that ended the watcher.")

    @property
    def age(self) -> float | None:
        """Seconds since the latest snapshot arrived (None before the first)."""
        at = self._state.latest_at
        return None if at is None else self._state.clock() - at

    def _open(self, channel, state: WatchState) -> None:
        from openengine.v1 import control_service_pb2_grpc, observability_service_pb2_grpc

        self._channel = channel
        self._watch_stub = observability_service_pb2_grpc.ObservabilityStub(channel)
        self._control_stub = control_service_pb2_grpc.ControlStub(channel)
        self._call = None            # the WatchLoad stream in flight
        self._events_call = None     # the runtime events stream in flight
        self._state = state

    def _do(self, method, *args):
        """Feed the state machine (the threaded driver holds its lock meanwhile)."""
        return method(*args)

    def _runtime_event(self, msg) -> bool:
        """A runtime event; a new revision closes the load stream, which reopens under it. The
        events stream goes on."""
        if self._do(self._state.runtime_event, msg) and self._call is not None:
            self._call.cancel()
        return True

    def _cancel_calls(self) -> None:
        for call in (self._call, self._events_call):
            if call is not None:
                call.cancel()

    # -- the loops, written once: each yields the I/O it needs, which a driver performs (`_perform`):
    # ("sleep", seconds), ("fetch",) discovery, ("call", method, request), ("view",) a new view,
    # ("each", call, on_message) every message of a stream until `on_message` answers False. The
    # driver sends the result back, or throws the error in.
    def _main(self):
        state = self._state
        while True:
            step = self._do(state.next_step)
            if isinstance(step, Finished):
                return
            if isinstance(step, Pause):
                yield "sleep", step.seconds
                continue
            try:
                if isinstance(step, Discover):
                    self._do(state.discovered, (yield "fetch",))
                elif isinstance(step, Poll):
                    self._do(state.polled, (yield "call", self._control_stub.GetLoad, step.request))
                else:
                    self._call = call = self._watch_stub.WatchLoad(step.request)
                    if state.stopped:     # stop() came before the call existed to be cancelled
                        call.cancel()
                    try:
                        yield "each", call, lambda msg: self._do(state.received, msg)
                    finally:
                        self._call = None
                        call.cancel()
                    self._do(state.stream_ended)
            except Exception as err:   # every failure is the state machine's to judge, never a dead loop
                self._do(state.failed, err)

    def _events(self):
        from openengine.v1 import events_pb2

        state = self._state
        while True:
            step = self._do(state.next_events_step)
            if isinstance(step, Finished):
                return
            if step == AWAIT_VIEW:
                yield "view",
                continue
            self._events_call = call = self._watch_stub.SubscribeRuntimeEvents(
                events_pb2.SubscribeRuntimeEventsRequest())
            if state.stopped:
                call.cancel()
            error: BaseException | None = None
            try:
                yield "each", call, self._runtime_event
            except grpc.RpcError as err:
                error = err
            finally:
                self._events_call = None
                call.cancel()
            pause = self._do(state.events_failed, error)
            if pause is None or (yield "sleep", pause):   # True: the watcher stopped meanwhile
                return


class LoadWatcher(_Driver):
    """Watch load from background threads over a grpc.Channel.

        with LoadWatcher(channel, view=CapabilityView.fetch(channel)) as watcher:
            load = watcher.wait_for_snapshot(timeout=5)
            watcher.latest, watcher.age, watcher.mode, watcher.violations, watcher.restarts

    Options are `WatchState`'s: `view` (discovery's answers; read first when omitted), `request`
    (the WatchLoadRequest), `backoff`, `tolerance` (lateness allowed, a fraction of the period),
    `poll_interval` (seconds between GetLoad polls), `on_snapshot(load)`,
    `on_revision_change(revision)`, `on_restart(Restart)`, `violations_kept` and `clock`."""

    def __init__(self, channel, **options):
        # One lock for the state machine, which three threads feed; snapshot waiters wait on it.
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._view_changed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._open(channel, WatchState(wake=self._wake, rouse=self._view_changed.set, **options))

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _do(self, method, *args):
        with self._changed:
            return method(*args)

    def wait_for_snapshot(self, timeout: float | None = None):
        """Block until a snapshot newer than the call arrives and return it; None as soon as it is
        known that none will (the watcher ended or stopped), or on timeout."""
        state = self._state
        with self._changed:
            since = state.snapshots
            self._changed.wait_for(lambda: state.settled(since), timeout)
            return state.latest if state.snapshots > since else None

    def start(self) -> "LoadWatcher":
        for name, target, args in (("run", drive, (self._main(), self._perform)),
                                   ("watchdog", self._watchdog, ()),
                                   ("events", drive, (self._events(), self._perform))):
            thread = threading.Thread(target=target, args=args, name=f"load-watcher-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._do(self._state.stop)
        self._cancel_calls()
        for thread in self._threads:
            thread.join(timeout)

    def __enter__(self) -> "LoadWatcher":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- I/O only ---------------------------------------------------------------------------------
    def _perform(self, kind, *args):
        if kind == "sleep":
            return self._stop.wait(args[0])
        if kind == "fetch":
            return CapabilityView.fetch(self._channel)
        if kind == "call":
            return args[0](args[1], timeout=10)
        if kind == "view":
            self._view_changed.wait()
            return self._view_changed.clear()
        call, on_message = args
        for msg in call:
            if not on_message(msg):
                break

    def _watchdog(self) -> None:
        state = self._state
        while not self._stop.wait(self._do(state.watchdog_delay)) and state.running:
            call = self._call
            if self._do(state.silent) and call is not None:
                call.cancel()


class AsyncLoadWatcher(_Driver):
    """Watch load from asyncio tasks over a grpc.aio.Channel; the same state machine as
    `LoadWatcher`, driven on the event loop.

        watcher = AsyncLoadWatcher(channel, view=await CapabilityView.afetch(channel))
        await watcher.start()
        load = await watcher.wait_for_snapshot(timeout=5)
        await watcher.stop()
    """

    def __init__(self, channel, **options):
        self._tasks: list[asyncio.Task] = []
        self._woken: asyncio.Event | None = None
        self._view_changed: asyncio.Event | None = None
        self._open(channel, WatchState(wake=self._wake, rouse=self._rouse, **options))

    # Both set on the loop: only the watcher's own tasks feed the state machine.
    def _wake(self) -> None:
        if self._woken is not None:
            self._woken.set()

    def _rouse(self) -> None:
        if self._view_changed is not None:
            self._view_changed.set()

    async def start(self) -> "AsyncLoadWatcher":
        self._woken = asyncio.Event()
        self._view_changed = asyncio.Event()
        self._tasks = [asyncio.create_task(self._drive(self._main())), asyncio.create_task(self._watchdog()),
                       asyncio.create_task(self._drive(self._events()))]
        return self

    async def stop(self) -> None:
        self._state.stop()
        self._cancel_calls()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def __aenter__(self) -> "AsyncLoadWatcher":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def wait_for_snapshot(self, timeout: float | None = None):
        """The next snapshot; None as soon as it is known that none will come, or on timeout."""
        state = self._state
        since = state.snapshots

        async def settled():
            while not state.settled(since):
                self._woken.clear()
                await self._woken.wait()

        try:
            await asyncio.wait_for(settled(), timeout)
        except asyncio.TimeoutError:
            return None
        return state.latest if state.snapshots > since else None

    # -- the loops: I/O only ---------------------------------------------------------------------
    async def _drive(self, loop) -> None:
        try:
            await adrive(loop, self._perform)
        finally:
            loop.close()   # a stop cancels the task: the loop's open call is cancelled too

    async def _perform(self, kind, *args):
        if kind == "sleep":
            return await asyncio.sleep(args[0])
        if kind == "fetch":
            return await CapabilityView.afetch(self._channel)
        if kind == "call":
            return await args[0](args[1], timeout=10)
        if kind == "view":
            await self._view_changed.wait()
            return self._view_changed.clear()
        call, on_message = args
        try:
            async for msg in call:
                if not on_message(msg):
                    break
        except asyncio.CancelledError:
            if self._state.stopped:
                raise
            # the watchdog or a revision event closed the stream: it ends as any other

    async def _watchdog(self) -> None:
        state = self._state
        while state.running:
            await asyncio.sleep(state.watchdog_delay())
            call = self._call
            if state.silent() and call is not None:
                call.cancel()
