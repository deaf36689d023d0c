"""Observability: load (GetLoad, WatchLoad) and runtime events."""

from __future__ import annotations

import asyncio

from openengine.engine.services._base import Base, Code, ES, Refused
from openengine.v1 import events_pb2, load_pb2


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
                    if not rt.fault("watch-heartbeat-not-reset"):
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
