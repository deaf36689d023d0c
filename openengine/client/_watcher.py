"""Watch an engine's load: WatchLoad when it can, GetLoad polling when it must.

The watcher validates the stream with `WatchLoadChecker`, keeps the latest complete snapshot and
its age, reopens the stream with bounded, jittered backoff, treats a silent stream as dead
(REQ-LOAD-021), and notices a capability-revision change (the settings' revision differs from
discovery's, the stream ends with ABORTED, or, when the engine advertises
openengine.runtime-events, a CapabilityRevisionChanged event arrives; REQ-REV-006, REQ-REV-008).

It never calls an RPC of a profile the engine does not advertise (REQ-CORE-004): without a view
it reads discovery first; an engine without openengine.load makes it `unavailable` at once. When
WatchLoad answers UNIMPLEMENTED although openengine.load is advertised it polls GetLoad (the same
profile; REQ-LOAD-020), never faster than min_watch_interval_ms.

`LoadWatcher` runs in a background thread over a grpc.Channel; `AsyncLoadWatcher` is an asyncio
task over a grpc.aio.Channel. Both expose the same properties.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import grpc

from openengine.validate import Violation, WatchLoadChecker

WATCH, POLL, UNAVAILABLE = "watch", "poll", "unavailable"


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


class _State:
    """What both watchers share: the latest snapshot, the stream checker, the counters."""

    def __init__(self, view, request, backoff: Backoff, tolerance: float, poll_interval: float | None,
                 on_snapshot, on_revision_change, clock):
        from openengine.v1 import load_pb2

        self.view = view
        self.request = request if request is not None else load_pb2.WatchLoadRequest()
        self.backoff = backoff
        self.tolerance = tolerance
        self.on_snapshot = on_snapshot
        self.on_revision_change = on_revision_change
        self.clock = clock
        self.latest = None
        self.latest_at: float | None = None
        self.violations: list[Violation] = []
        self.reconnects = 0
        self.revision_changed = False
        self.refresh_needed = False
        self.failures = 0
        self.last_error: grpc.RpcError | None = None
        self.checker: WatchLoadChecker | None = None
        self.snapshots = 0                  # snapshots stored so far
        self.changed = threading.Condition()  # notified on every snapshot and when the mode settles
        self.on_change: Callable[[], None] | None = None  # the async watcher's wake-up
        self._poll_interval = poll_interval
        self.mode = WATCH
        self.poll_interval = poll_interval if poll_interval is not None else 0.1
        if view is not None:
            self.adopt(view)

    def adopt(self, view) -> None:
        """Take a (new) discovery view: what is advertised decides what may be called."""
        self.view = view
        if not view.supports("openengine.load"):
            self.set_mode(UNAVAILABLE)
            return
        least = view.limit("openengine.load", "min_watch_interval_ms")
        self.poll_interval = self._poll_interval if self._poll_interval is not None \
            else max(0.1, (least or 100) / 1000.0)

    @property
    def events_advertised(self) -> bool:
        return self.view is not None and self.view.supports("openengine.runtime-events")

    def set_mode(self, mode: str) -> None:
        with self.changed:
            self.mode = mode
            self.changed.notify_all()
        if self.on_change is not None:
            self.on_change()

    def settled(self, since: int) -> bool:
        """The outcome a snapshot waiter is waiting for is known: a new snapshot, or none will come."""
        return self.snapshots > since or self.mode == UNAVAILABLE

    @property
    def age(self) -> float | None:
        """Seconds since the latest snapshot arrived (None before the first)."""
        return None if self.latest_at is None else self.clock() - self.latest_at

    def new_checker(self) -> WatchLoadChecker:
        view = self.view
        obs = view.report.limits.get("openengine.load") if view is not None else None
        self.checker = WatchLoadChecker(
            instance_id=view.instance_id if view is not None else None,
            capability_revision=view.revision if view is not None and view.engine_info is not None else None,
            observability=obs if view is not None and view.supports("openengine.load") else None,
            request=self.request, tolerance=self.tolerance, clock=self.clock)
        return self.checker

    def on_message(self, msg) -> None:
        found = self.checker.feed(msg)
        if found:
            self.violations.extend(found)
            if any(v.rule_id == "OEV319" for v in found):
                self.revision_change(msg.settings.capability_revision)
        if msg.WhichOneof("kind") == "snapshot" and msg.snapshot.HasField("load"):
            self.store(msg.snapshot.load)
        self.failures = 0

    def store(self, load) -> None:
        with self.changed:
            self.latest = load
            self.latest_at = self.clock()
            self.snapshots += 1
            self.changed.notify_all()
        if self.on_change is not None:
            self.on_change()
        if self.on_snapshot is not None:
            self.on_snapshot(load)

    def on_event(self, msg) -> bool:
        """A runtime event; True when it announces a new capability revision."""
        if msg.event.WhichOneof("kind") != "capability_revision_changed":
            return False
        self.revision_change(msg.event.capability_revision_changed.revision)
        return True

    def revision_change(self, revision: int | None) -> None:
        self.revision_changed = True
        self.refresh_needed = self.view is not None
        if self.on_revision_change is not None:
            self.on_revision_change(revision)

    def on_error(self, err: grpc.RpcError) -> bool:
        """Handle a failed stream or poll; False when there is nothing left to try."""
        self.last_error = err
        code = err.code() if hasattr(err, "code") else None
        if self.view is None:
            # Discovery itself failed: an engine without v1 discovery offers nothing to call.
            if code == grpc.StatusCode.UNIMPLEMENTED:
                self.set_mode(UNAVAILABLE)
                return False
            return True
        if code == grpc.StatusCode.UNIMPLEMENTED:
            if self.mode == WATCH:
                self.set_mode(POLL)
                return True
            self.set_mode(UNAVAILABLE)
            return False
        if code == grpc.StatusCode.ABORTED and self.mode == WATCH:
            self.revision_change(None)
        return True

    def next_delay(self, delays: Iterator[float]) -> float | None:
        self.failures += 1
        return next(delays, None)


class LoadWatcher:
    """Watch load from a background thread.

        with LoadWatcher(channel, view=CapabilityView.fetch(channel)) as watcher:
            load = watcher.wait_for_snapshot(timeout=5)
            watcher.latest, watcher.age, watcher.mode, watcher.violations
    """

    def __init__(self, channel, *, view=None, request=None, backoff: Backoff | None = None,
                 tolerance: float = 0.5, poll_interval: float | None = None, watchdog_interval: float = 0.05,
                 on_snapshot: Callable | None = None, on_revision_change: Callable | None = None,
                 clock: Callable[[], float] = time.monotonic):
        from openengine.v1 import observability_service_pb2_grpc

        self._channel = channel
        self._stub = observability_service_pb2_grpc.ObservabilityStub(channel)
        self._state = _State(view, request, backoff or Backoff(), tolerance, poll_interval, on_snapshot,
                             on_revision_change, clock)
        self._stop = threading.Event()
        self._call = None
        self._events_call = None
        self._watchdog_interval = watchdog_interval
        self._threads: list[threading.Thread] = []

    # -- what callers read -------------------------------------------------------------------------
    latest = property(lambda self: self._state.latest, doc="The latest complete LoadInfo, or None.")
    age = property(lambda self: self._state.age, doc="Seconds since the latest snapshot arrived.")
    mode = property(lambda self: self._state.mode, doc="watch, poll, or unavailable.")
    violations = property(lambda self: self._state.violations, doc="Stream violations seen so far.")
    reconnects = property(lambda self: self._state.reconnects, doc="Streams reopened after a failure.")
    revision_changed = property(lambda self: self._state.revision_changed,
                                doc="True once the engine's capability revision changed.")

    def wait_for_snapshot(self, timeout: float | None = None):
        """Block until a snapshot newer than the call arrives and return it; None as soon as it is
        known that none will (the watcher is unavailable or stopped), or on timeout."""
        state = self._state
        with state.changed:
            since = state.snapshots
            state.changed.wait_for(lambda: state.settled(since) or self._stop.is_set(), timeout)
            return state.latest if state.snapshots > since else None

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> "LoadWatcher":
        for target in (self._run, self._watchdog, self._events):
            thread = threading.Thread(target=target, name=f"load-watcher-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._state.changed:
            self._state.changed.notify_all()
        for call in (self._call, self._events_call):
            if call is not None:
                call.cancel()
        for thread in self._threads:
            thread.join(timeout)

    def __enter__(self) -> "LoadWatcher":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the loops -------------------------------------------------------------------------------------
    def _run(self) -> None:
        state = self._state
        delays = state.backoff.delays()
        while not self._stop.is_set() and state.mode != UNAVAILABLE:
            try:
                if state.view is None:   # discovery first: only then is it known what may be called
                    from openengine.client._view import CapabilityView

                    state.adopt(CapabilityView.fetch(self._channel))
                    continue
                if state.mode == WATCH:
                    self._watch_once()
                else:
                    self._poll_once()
                    delays = state.backoff.delays()
                    if self._stop.wait(state.poll_interval):
                        return
                    continue
            except grpc.RpcError as err:
                if self._stop.is_set():
                    return
                if not state.on_error(err):
                    return
                if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    continue
            if self._stop.is_set():
                return
            delay = state.next_delay(delays)
            if delay is None:
                state.set_mode(UNAVAILABLE)
                return
            state.reconnects += 1
            if self._stop.wait(delay):
                return

    def _watch_once(self) -> None:
        state = self._state
        if state.refresh_needed:   # re-read discovery under the new revision before reopening
            from openengine.client._view import CapabilityView

            state.adopt(CapabilityView.fetch(self._channel))
            state.refresh_needed = False
            if state.mode != WATCH:
                return
        state.new_checker()
        self._call = call = self._stub.WatchLoad(state.request)
        try:
            for msg in call:
                state.on_message(msg)
                if self._stop.is_set():
                    break
        finally:
            self._call = None
            call.cancel()

    def _poll_once(self) -> None:
        from openengine.v1 import load_pb2

        load = self._stub.GetLoad(load_pb2.GetLoadRequest(per_rank=self._state.request.per_rank), timeout=10)
        self._state.store(load)
        self._state.failures = 0

    def _events(self) -> None:
        """When runtime events are advertised, a CapabilityRevisionChanged event is the earliest
        word of a new revision: re-read discovery and reopen the load stream under it."""
        from openengine.v1 import events_pb2, observability_service_pb2_grpc

        state = self._state
        stub = observability_service_pb2_grpc.ObservabilityStub(self._channel)
        delays = state.backoff.delays()
        while not self._stop.is_set() and state.mode != UNAVAILABLE:
            if not state.events_advertised:
                if self._stop.wait(self._watchdog_interval * 4):
                    return
                continue
            self._events_call = call = stub.SubscribeRuntimeEvents(events_pb2.SubscribeRuntimeEventsRequest())
            try:
                for msg in call:
                    delays = state.backoff.delays()
                    if state.on_event(msg) and self._call is not None:
                        self._call.cancel()
            except grpc.RpcError as err:
                if self._stop.is_set() or err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return
            finally:
                self._events_call = None
                call.cancel()
            if self._stop.wait(next(delays, state.backoff.maximum)):
                return

    def _watchdog(self) -> None:
        """Cancel a stream that went silent for longer than its heartbeat allows; it reopens."""
        while not self._stop.wait(self._watchdog_interval):
            checker, call = self._state.checker, self._call
            if checker is None or call is None or self._state.mode != WATCH:
                continue
            found = checker.tick()
            if found:
                self._state.violations.extend(found)
                call.cancel()


class AsyncLoadWatcher:
    """Watch load from an asyncio task over a grpc.aio.Channel.

        watcher = AsyncLoadWatcher(channel, view=await CapabilityView.afetch(channel))
        await watcher.start()
        load = await watcher.wait_for_snapshot(timeout=5)
        await watcher.stop()
    """

    def __init__(self, channel, *, view=None, request=None, backoff: Backoff | None = None,
                 tolerance: float = 0.5, poll_interval: float | None = None, watchdog_interval: float = 0.05,
                 on_snapshot: Callable | None = None, on_revision_change: Callable | None = None,
                 clock: Callable[[], float] = time.monotonic):
        from openengine.v1 import observability_service_pb2_grpc

        self._channel = channel
        self._stub = observability_service_pb2_grpc.ObservabilityStub(channel)
        self._state = _State(view, request, backoff or Backoff(), tolerance, poll_interval, on_snapshot,
                             on_revision_change, clock)
        self._call = None
        self._events_call = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._watchdog_interval = watchdog_interval
        self._changed: asyncio.Event | None = None

    latest = LoadWatcher.latest
    age = LoadWatcher.age
    mode = LoadWatcher.mode
    violations = LoadWatcher.violations
    reconnects = LoadWatcher.reconnects
    revision_changed = LoadWatcher.revision_changed

    async def start(self) -> "AsyncLoadWatcher":
        self._changed = changed = asyncio.Event()
        self._state.on_change = changed.set   # called on the loop: the watcher's own tasks
        self._tasks = [asyncio.create_task(self._run()), asyncio.create_task(self._watchdog()),
                       asyncio.create_task(self._events())]
        return self

    async def stop(self) -> None:
        self._stopping = True
        if self._changed is not None:
            self._changed.set()
        for call in (self._call, self._events_call):
            if call is not None:
                call.cancel()
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
            while not (state.settled(since) or self._stopping):
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(settled(), timeout)
        except asyncio.TimeoutError:
            return None
        return state.latest if state.snapshots > since else None

    async def _run(self) -> None:
        from openengine.v1 import load_pb2

        state = self._state
        delays = state.backoff.delays()
        while not self._stopping and state.mode != UNAVAILABLE:
            try:
                if state.view is None or state.refresh_needed:
                    from openengine.client._view import CapabilityView

                    state.adopt(await CapabilityView.afetch(self._channel))
                    state.refresh_needed = False
                    continue
                if state.mode == WATCH:
                    state.new_checker()
                    self._call = call = self._stub.WatchLoad(state.request)
                    try:
                        async for msg in call:
                            state.on_message(msg)
                    except asyncio.CancelledError:
                        # The watchdog or a revision event cancelled the stream to reopen it;
                        # only stop() ends the watcher itself.
                        if self._stopping or not call.cancelled():
                            raise
                    finally:
                        self._call = None
                        call.cancel()
                else:
                    load = await self._stub.GetLoad(load_pb2.GetLoadRequest(per_rank=state.request.per_rank),
                                                    timeout=10)
                    state.store(load)
                    state.failures = 0
                    delays = state.backoff.delays()
                    await asyncio.sleep(state.poll_interval)
                    continue
            except grpc.RpcError as err:
                if self._stopping:
                    return
                if not state.on_error(err):
                    return
                if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    continue
            if self._stopping:
                return
            delay = state.next_delay(delays)
            if delay is None:
                state.set_mode(UNAVAILABLE)
                return
            state.reconnects += 1
            await asyncio.sleep(delay)

    async def _events(self) -> None:
        """As LoadWatcher._events, on the loop."""
        from openengine.v1 import events_pb2, observability_service_pb2_grpc

        state = self._state
        stub = observability_service_pb2_grpc.ObservabilityStub(self._channel)
        delays = state.backoff.delays()
        while not self._stopping and state.mode != UNAVAILABLE:
            if not state.events_advertised:
                await asyncio.sleep(self._watchdog_interval * 4)
                continue
            self._events_call = call = stub.SubscribeRuntimeEvents(events_pb2.SubscribeRuntimeEventsRequest())
            try:
                async for msg in call:
                    delays = state.backoff.delays()
                    if state.on_event(msg) and self._call is not None:
                        self._call.cancel()
            except grpc.RpcError as err:
                if self._stopping or err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return
            finally:
                self._events_call = None
                call.cancel()
            await asyncio.sleep(next(delays, state.backoff.maximum))

    async def _watchdog(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._watchdog_interval)
            checker, call = self._state.checker, self._call
            if checker is None or call is None or self._state.mode != WATCH:
                continue
            found = checker.tick()
            if found:
                self._state.violations.extend(found)
                call.cancel()
