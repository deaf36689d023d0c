"""Watch an engine's load: WatchLoad when it can, GetLoad polling when it must.

The stream is validated (`WatchLoadChecker`) and reopened with bounded, jittered backoff; a silent
stream counts as dead (REQ-LOAD-021). A new capability revision (in the settings, an ABORTED
stream, or a CapabilityRevisionChanged event when openengine.runtime-events is advertised;
REQ-REV-006, REQ-REV-008) makes it re-read discovery. So does an instance id that differs from
discovery's: a new instance behind the address is a `Restart`, and only an id discovery does not
confirm is a violation. Only advertised profiles are called (REQ-CORE-004): without
openengine.load the watcher is `unavailable` at once, and a WatchLoad answering UNIMPLEMENTED
falls back to GetLoad (REQ-LOAD-020), never faster than min_watch_interval_ms. When nothing is
left to try it ends: mode `unavailable`, `end_reason` says why, waiters return at once.
Violations are kept in a bounded ring with a count per rule id, so memory stays fixed.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

import grpc

from openengine.client._view import CapabilityView, EarlierLayoutError
from openengine.validate import Violation, WatchLoadChecker

WATCH, POLL, UNAVAILABLE = "watch", "poll", "unavailable"
RESTARTS_KEPT = 100
# The longest the silence watchdog sleeps: a stream reopened meanwhile may allow less silence than
# the one it went to sleep on.
WATCHDOG_LONGEST_S = 1.0


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
        count = 0
        while self.attempts is None or count < self.attempts:
            count += 1
            yield min(self.maximum, delay * self.rng.uniform(1 - self.jitter, 1 + self.jitter))
            delay = min(self.maximum, delay * self.multiplier)


@dataclass(frozen=True)
class Restart:
    """A new engine instance noticed behind the watched address."""

    previous: str | None      # the instance id validated until then
    current: str | None       # the new instance's id, as its discovery reports it
    at: float                 # when it was noticed, on the watcher's clock


class _Watcher:
    """What both watchers share: the constructor, the latest snapshot, the stream checker, the
    counters and every decision about what to do next; the subclasses only run the loops.

    Options: `view` (discovery's answers; read first when omitted), `request` (the
    WatchLoadRequest), `backoff`, `tolerance` (lateness allowed, a fraction of the period),
    `poll_interval` (seconds between GetLoad polls; default from min_watch_interval_ms),
    `watchdog_interval` (the shortest time between silence checks), `on_snapshot(load)`,
    `on_revision_change(revision)`, `on_restart(Restart)`, `violations_kept` (the ring's size) and
    `clock`."""

    def __init__(self, channel, *, view: CapabilityView | None = None, request=None,
                 backoff: Backoff | None = None, tolerance: float = 0.5, poll_interval: float | None = None,
                 watchdog_interval: float = 0.05, on_snapshot: Callable | None = None,
                 on_revision_change: Callable | None = None, on_restart: Callable[[Restart], None] | None = None,
                 violations_kept: int = 1000, clock: Callable[[], float] = time.monotonic):
        from openengine.v1 import load_pb2, observability_service_pb2_grpc

        self._channel = channel
        self._stub = observability_service_pb2_grpc.ObservabilityStub(channel)
        self._request = request if request is not None else load_pb2.WatchLoadRequest()
        self._poll_request = load_pb2.GetLoadRequest(per_rank=self._request.per_rank)
        self._backoff = backoff or Backoff()
        self._tolerance = tolerance
        self._asked_poll_interval = poll_interval
        self._watchdog_interval = watchdog_interval
        self._on_snapshot = on_snapshot
        self._on_revision_change = on_revision_change
        self._on_restart = on_restart
        self._clock = clock
        self._view: CapabilityView | None = None
        self._latest = None
        self._latest_at: float | None = None
        self._snapshots = 0                       # snapshots stored so far
        self._violations: deque[Violation] = deque(maxlen=violations_kept)
        self._violation_counts: Counter[str] = Counter()
        self._restarts: deque[Restart] = deque(maxlen=RESTARTS_KEPT)
        self._reconnects = 0
        self._revision_changed = False
        self._refresh_needed = False              # re-read discovery before the next stream
        self._questioned_instance: str | None = None   # a differing id discovery was asked about
        self._delays: Iterator[float] | None = None
        self._last_error: BaseException | None = None
        self._end_reason: str | None = None
        self._checker: WatchLoadChecker | None = None
        self._call = None
        self._events_call = None
        self._mode = WATCH
        self._poll_interval = poll_interval if poll_interval is not None else 0.1
        # Guards the violation records both of LoadWatcher's threads write; its snapshot waiters
        # wait on it too.
        self._changed = threading.Condition()
        if view is not None:
            self._adopt(view)

    # -- what callers read ---------------------------------------------------------------------
    latest = property(lambda self: self._latest, doc="The latest complete LoadInfo, or None.")
    mode = property(lambda self: self._mode, doc="watch, poll, or unavailable.")
    view = property(lambda self: self._view, doc="Discovery's answers for the instance being watched.")
    instance_id = property(lambda self: self._view.instance_id if self._view is not None else None)
    violations = property(lambda self: tuple(self._violations),
                          doc="The latest stream violations, oldest first (at most `violations_kept`).")
    violation_counts = property(lambda self: dict(self._violation_counts),
                                doc="Rule id -> violations of that rule seen over the watcher's life.")
    restarts = property(lambda self: tuple(self._restarts),
                        doc="New instances noticed, oldest first (the latest RESTARTS_KEPT).")
    reconnects = property(lambda self: self._reconnects, doc="Streams reopened after a failure.")
    revision_changed = property(lambda self: self._revision_changed,
                                doc="True once the engine's capability revision changed.")
    end_reason = property(lambda self: self._end_reason,
                          doc="Why the watcher ended (None while it runs or after `stop`).")
    last_error = property(lambda self: self._last_error,
                          doc="The latest failed call, or the error that ended the watcher.")

    @property
    def age(self) -> float | None:
        """Seconds since the latest snapshot arrived (None before the first)."""
        return None if self._latest_at is None else self._clock() - self._latest_at

    # -- decisions both loops share -----------------------------------------------------------------
    def _adopt(self, view: CapabilityView) -> None:
        """Take a (new) discovery view: what is advertised decides what may be called."""
        previous = self._view
        self._view = view
        self._refresh_needed = False
        self._rouse_events()
        if previous is not None and previous.instance_id != view.instance_id:
            restart = Restart(previous.instance_id, view.instance_id, self._clock())
            self._restarts.append(restart)
            if self._mode == POLL:
                self._mode = WATCH      # the new instance may serve WatchLoad
            if self._on_restart is not None:
                self._on_restart(restart)
        if not view.supports("openengine.load"):
            self._end("the engine does not advertise openengine.load")
            return
        least = view.limit("openengine.load", "min_watch_interval_ms")
        self._poll_interval = self._asked_poll_interval if self._asked_poll_interval is not None \
            else max(0.1, (least or 100) / 1000.0)

    @property
    def _events_advertised(self) -> bool:
        return self._view is not None and self._view.supports("openengine.runtime-events")

    @property
    def _running(self) -> bool:
        return self._mode != UNAVAILABLE and not self._stopping()

    def _stopping(self) -> bool:
        raise NotImplementedError

    def _rouse_events(self) -> None:
        """Wake the events loop, which waits for a view that advertises runtime events: a new view
        came, or the watcher ends."""

    def _watchdog_delay(self) -> float:
        """Seconds until the next silence check: the moment the stream becomes overdue (a message
        meanwhile moves it on), so a busy stream does not wake its watchdog many times per allowed
        silence; never sooner than `watchdog_interval`, never later than WATCHDOG_LONGEST_S."""
        checker = self._checker
        overdue = checker.overdue_at if checker is not None else None
        if overdue is None:
            return self._watchdog_interval
        return min(WATCHDOG_LONGEST_S, max(self._watchdog_interval, overdue - self._clock()))

    def _notify(self) -> None:
        """Wake whoever waits for a new snapshot or for the watcher's end."""
        raise NotImplementedError

    def _cancel_calls(self) -> None:
        """Release every waiter and end both streams: the watcher stops."""
        self._rouse_events()
        self._notify()
        for call in (self._call, self._events_call):
            if call is not None:
                call.cancel()

    def _set_mode(self, mode: str) -> None:
        self._mode = mode
        self._notify()

    def _end(self, reason: str, error: BaseException | None = None) -> None:
        """Nothing is left to try: say why, and release every waiter."""
        self._end_reason = reason
        if error is not None:
            self._last_error = error
        self._set_mode(UNAVAILABLE)
        self._rouse_events()

    def _end_on(self, err: Exception) -> None:
        """The loop met an error it cannot recover from."""
        if isinstance(err, EarlierLayoutError):
            self._end(str(err), err)
        else:
            self._end(f"the watcher failed: {type(err).__name__}: {err}", err)

    def _settled(self, since: int) -> bool:
        """The outcome a snapshot waiter is waiting for is known: a new snapshot, or none will come."""
        return self._snapshots > since or self._mode == UNAVAILABLE or self._stopping()

    def _new_checker(self) -> None:
        view = self._view
        self._checker = WatchLoadChecker(
            instance_id=view.instance_id, capability_revision=view.revision if view.engine_info is not None else None,
            observability=view.report.limits.get("openengine.load"), request=self._request,
            tolerance=self._tolerance, clock=self._clock, keep=0)

    def _record(self, found: list[Violation]) -> None:
        with self._changed:     # the stream loop and the watchdog both record
            self._violations.extend(found)
            self._violation_counts.update(v.rule_id for v in found)

    def _on_message(self, msg) -> bool:
        """Judge and keep one stream message; False when the stream must be reopened at once
        because it speaks for an instance discovery has not named yet."""
        checker = self._checker
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
        return True

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
        self._latest = load
        self._latest_at = self._clock()
        self._snapshots += 1
        self._delays = None           # a working stream: the next failure starts backoff afresh
        self._notify()
        if self._on_snapshot is not None:
            self._on_snapshot(load)

    def _on_event(self, msg) -> None:
        """A runtime event announcing a new capability revision reopens the load stream under it."""
        if msg.event.WhichOneof("kind") == "capability_revision_changed":
            self._revision_change(msg.event.capability_revision_changed.revision)
            if self._call is not None:
                self._call.cancel()

    def _revision_change(self, revision: int | None) -> None:
        self._revision_changed = True
        self._refresh_needed = True
        if self._on_revision_change is not None:
            self._on_revision_change(revision)

    def _on_error(self, err: grpc.RpcError) -> bool:
        """Handle a failed call: True to go on at once (stopping, ended, or switched to polling),
        False to back off first."""
        if self._stopping():
            return True
        self._last_error = err
        code = err.code()
        if code == grpc.StatusCode.UNIMPLEMENTED:
            if self._view is None:
                self._end("the engine answers discovery with UNIMPLEMENTED")
            elif self._mode == WATCH:
                self._set_mode(POLL)
            else:
                self._end("WatchLoad and GetLoad answer UNIMPLEMENTED although openengine.load is advertised")
            return True
        if code == grpc.StatusCode.ABORTED and self._mode == WATCH:
            self._revision_change(None)
        return False

    def _next_delay(self) -> float | None:
        """The wait before the next attempt, or None (the watcher ended) when backoff is exhausted.
        Discovery is re-read before the next stream: the engine may have restarted meanwhile."""
        if self._delays is None:
            self._delays = self._backoff.delays()
        delay = next(self._delays, None)
        if delay is None:
            error = self._last_error
            self._end(f"gave up after {self._backoff.attempts} failed attempts in a row"
                      + (f": {error.code().name} {error.details()}" if isinstance(error, grpc.RpcError) else ""))
            return None
        self._reconnects += 1
        self._refresh_needed = self._view is not None
        return delay

    def _cancel_if_silent(self) -> None:
        """Cancel a stream that went silent for longer than its heartbeat allows; it reopens."""
        checker, call = self._checker, self._call
        if checker is None or call is None or self._mode != WATCH:
            return
        found = checker.tick()
        if found:
            self._record(found)
            call.cancel()


class LoadWatcher(_Watcher):
    """Watch load from background threads over a grpc.Channel.

        with LoadWatcher(channel, view=CapabilityView.fetch(channel)) as watcher:
            load = watcher.wait_for_snapshot(timeout=5)
            watcher.latest, watcher.age, watcher.mode, watcher.violations, watcher.restarts
    """

    def __init__(self, channel, **options):
        self._stop = threading.Event()
        self._adopted = threading.Event()
        self._threads: list[threading.Thread] = []
        super().__init__(channel, **options)

    def _stopping(self) -> bool:
        return self._stop.is_set()

    def _rouse_events(self) -> None:
        self._adopted.set()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait_for_snapshot(self, timeout: float | None = None):
        """Block until a snapshot newer than the call arrives and return it; None as soon as it is
        known that none will (the watcher ended or stopped), or on timeout."""
        with self._changed:
            since = self._snapshots
            self._changed.wait_for(lambda: self._settled(since), timeout)
            return self._latest if self._snapshots > since else None

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> "LoadWatcher":
        for target in (self._run, self._watchdog, self._events):
            thread = threading.Thread(target=target, name=f"load-watcher-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._cancel_calls()
        for thread in self._threads:
            thread.join(timeout)

    def __enter__(self) -> "LoadWatcher":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the loops -------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while self._running:
                if self._attempt():
                    continue
                delay = self._next_delay()
                if delay is None or self._stop.wait(delay):
                    return
        except Exception as err:   # ends the watcher with a reason instead of a dead thread
            if not self._stopping():
                self._end_on(err)

    def _attempt(self) -> bool:
        """One step: read discovery, a stream or a poll. True to go on at once, False to back off."""
        try:
            if self._view is None or self._refresh_needed:
                self._adopt(CapabilityView.fetch(self._channel))
                return True
            if self._mode == WATCH:
                return self._watch_once()
            self._store(self._stub.GetLoad(self._poll_request, timeout=10))
            self._stop.wait(self._poll_interval)
            return True
        except grpc.RpcError as err:
            return self._on_error(err)

    def _watch_once(self) -> bool:
        self._new_checker()
        self._call = call = self._stub.WatchLoad(self._request)
        try:
            for msg in call:
                if not self._on_message(msg):
                    return True
                if self._stop.is_set():
                    break
        finally:
            self._call = None
            call.cancel()
        return self._stopping()

    def _events(self) -> None:
        """When runtime events are advertised, a CapabilityRevisionChanged event is the earliest
        word of a new revision: re-read discovery and reopen the load stream under it."""
        from openengine.v1 import events_pb2

        delays = self._backoff.delays()
        while self._running:
            if not self._events_advertised:
                self._adopted.wait()
                self._adopted.clear()
                continue
            self._events_call = call = self._stub.SubscribeRuntimeEvents(events_pb2.SubscribeRuntimeEventsRequest())
            try:
                for msg in call:
                    delays = self._backoff.delays()
                    self._on_event(msg)
            except grpc.RpcError as err:
                if self._stopping() or err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return
            finally:
                self._events_call = None
                call.cancel()
            if self._stop.wait(next(delays, self._backoff.maximum)):
                return

    def _watchdog(self) -> None:
        while not self._stop.wait(self._watchdog_delay()) and self._mode != UNAVAILABLE:
            self._cancel_if_silent()


class AsyncLoadWatcher(_Watcher):
    """Watch load from asyncio tasks over a grpc.aio.Channel.

        watcher = AsyncLoadWatcher(channel, view=await CapabilityView.afetch(channel))
        await watcher.start()
        load = await watcher.wait_for_snapshot(timeout=5)
        await watcher.stop()
    """

    def __init__(self, channel, **options):
        self._tasks: list[asyncio.Task] = []
        self._stopped = False
        self._woken: asyncio.Event | None = None
        self._adopted: asyncio.Event | None = None
        super().__init__(channel, **options)

    def _stopping(self) -> bool:
        return self._stopped

    def _rouse_events(self) -> None:
        if self._adopted is not None:
            self._adopted.set()

    def _notify(self) -> None:
        if self._woken is not None:     # set on the loop: only the watcher's own tasks store
            self._woken.set()

    async def start(self) -> "AsyncLoadWatcher":
        self._woken = asyncio.Event()
        self._adopted = asyncio.Event()
        self._tasks = [asyncio.create_task(self._run()), asyncio.create_task(self._watchdog()),
                       asyncio.create_task(self._events())]
        return self

    async def stop(self) -> None:
        self._stopped = True
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
        since = self._snapshots

        async def settled():
            while not self._settled(since):
                self._woken.clear()
                await self._woken.wait()

        try:
            await asyncio.wait_for(settled(), timeout)
        except asyncio.TimeoutError:
            return None
        return self._latest if self._snapshots > since else None

    async def _run(self) -> None:
        try:
            while self._running:
                if await self._attempt():
                    continue
                delay = self._next_delay()
                if delay is None:
                    return
                await asyncio.sleep(delay)
        except Exception as err:   # ends the watcher with a reason instead of a dead task
            if not self._stopping():
                self._end_on(err)

    async def _attempt(self) -> bool:
        try:
            if self._view is None or self._refresh_needed:
                self._adopt(await CapabilityView.afetch(self._channel))
                return True
            if self._mode == WATCH:
                return await self._watch_once()
            self._store(await self._stub.GetLoad(self._poll_request, timeout=10))
            await asyncio.sleep(self._poll_interval)
            return True
        except grpc.RpcError as err:
            return self._on_error(err)

    async def _watch_once(self) -> bool:
        self._new_checker()
        self._call = call = self._stub.WatchLoad(self._request)
        try:
            async for msg in call:
                if not self._on_message(msg):
                    return True
        except asyncio.CancelledError:
            # The watchdog or a revision event cancelled the stream to reopen it; only stop()
            # ends the watcher itself.
            if self._stopping() or not call.cancelled():
                raise
        finally:
            self._call = None
            call.cancel()
        return self._stopping()

    async def _events(self) -> None:
        """As LoadWatcher._events, on the loop."""
        from openengine.v1 import events_pb2

        delays = self._backoff.delays()
        while self._running:
            if not self._events_advertised:
                await self._adopted.wait()
                self._adopted.clear()
                continue
            self._events_call = call = self._stub.SubscribeRuntimeEvents(events_pb2.SubscribeRuntimeEventsRequest())
            try:
                async for msg in call:
                    delays = self._backoff.delays()
                    self._on_event(msg)
            except grpc.RpcError as err:
                if self._stopping() or err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return
            finally:
                self._events_call = None
                call.cancel()
            await asyncio.sleep(next(delays, self._backoff.maximum))

    async def _watchdog(self) -> None:
        while not self._stopping() and self._mode != UNAVAILABLE:
            await asyncio.sleep(self._watchdog_delay())
            self._cancel_if_silent()
