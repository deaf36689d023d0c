"""Observability: load (GetLoad, WatchLoad) and runtime events."""

from __future__ import annotations

import asyncio

from openengine.engine.services._base import Base, Code, ES, Refused
from openengine.v1 import events_pb2, load_pb2


class Observability(Base):
    def settings(self, request: load_pb2.WatchLoadRequest) -> tuple[int, int, bool, bool]:
        """The effective settings, computed by the one function clients and the runner use too
        (`openengine.validate.effective_watch_settings`); a requested value that was clamped
        passes the `watch.clamped` hook point."""
        from openengine.validate import effective_watch_settings

        rt = self.rt
        effective = effective_watch_settings(
            {lim.name: rt.limit("openengine.load", lim.name) for lim in rt.catalogue.profile("openengine.load").limits},
            request)
        interval, heartbeat = effective["interval_ms"], effective["heartbeat_ms"]
        if request.HasField("interval_ms") and request.interval_ms:
            interval = rt.hooks.at("watch.clamped", interval, requested=request.interval_ms)
        if request.HasField("heartbeat_ms") and request.heartbeat_ms:
            heartbeat = rt.hooks.at("watch.clamped", heartbeat, requested=request.heartbeat_ms)
        return interval, heartbeat, effective["initial_snapshot"], effective["per_rank"]

    async def GetLoad(self, request: load_pb2.GetLoadRequest, context):
        return self.rt.hooks.at("load.get", self.rt.build_load(per_rank=request.per_rank))

    async def WatchLoad(self, request: load_pb2.WatchLoadRequest, context):
        """Yields each message's wire bytes (openengine.serve.loadwire): a snapshot is built and
        serialized once and shared by every stream it goes to; the server's response serializer
        passes bytes through."""
        from openengine.serve.load import Watcher
        from openengine.serve.loadwire import Framer, Snapshot

        rt = self.rt
        max_watchers = rt.limit("openengine.load", "max_watchers")
        if len(rt.load) >= rt.hooks.at("watch.max-watchers", max_watchers):
            raise Refused(Code.RESOURCE_EXHAUSTED,
                          f"{len(rt.load)} WatchLoad streams are open, openengine.load.max_watchers = {max_watchers}")
        interval, heartbeat, initial, per_rank = self.settings(request)
        watcher = Watcher(interval, heartbeat, per_rank, rt.revision,
                          count_coalesced=rt.hooks.at("watch.count-coalesced", True))
        instance_id = rt.hooks.at("watch.instance-id", rt.instance_id)
        sequence = 0
        framer = Framer()
        hook = rt.hooks.at
        now_ns = rt.clock.now_ns
        loop = asyncio.get_running_loop()
        alarm: asyncio.TimerHandle | None = None

        def stamp() -> tuple[int, int]:
            """The next message's sequence and timestamp (REQ-LOAD-014)."""
            nonlocal sequence
            current = sequence
            ts_ns = hook("watch.timestamp-ns", now_ns(), sequence=current)
            sequence = hook("watch.next-sequence", current + 1, sequence=current)
            return current, ts_ns

        def build() -> Snapshot:
            return Snapshot.of(rt.build_load(per_rank))

        # Built snapshots carry the engine's own instance id; only a fault makes a stream report
        # another, so the per-snapshot copy is decided once per stream.
        own_instance = instance_id == rt.instance_id

        def snapshot(shared: Snapshot, coalesced: int) -> bytes:
            return framer.snapshot(*stamp(), shared if own_instance else _for_instance(shared, instance_id),
                                    coalesced)

        def ring() -> None:
            nonlocal alarm
            alarm = None
            watcher.wake.set()

        settings = load_pb2.WatchLoadSettings(interval_ms=interval, heartbeat_ms=heartbeat,
                                              initial_snapshot=initial, per_rank=per_rank,
                                              instance_id=instance_id, capability_revision=rt.revision)
        rt.load.open(watcher)
        try:
            # REQ-LOAD-004, REQ-LOAD-009: the settings first, then the initial snapshot if asked.
            opened_at = None
            for step in rt.hooks.at("watch.opening", ("settings", "snapshot") if initial else ("settings",)):
                if step == "settings":
                    yield framer.settings(*stamp(), settings)
                else:
                    first = build()
                    opened_at = loop.time()
                    yield snapshot(first, 0)
            if not rt.hooks.at("watch.keep-open", True):
                return
            rt.load.start_ticks(watcher, loop.time() if opened_at is None else opened_at)
            last_sent = loop.time()
            heartbeats = heartbeat > 0 and rt.hooks.at("watch.heartbeats", True)
            beat_s = heartbeat / 1000.0
            snapshot_restarts_beat = rt.hooks.at("watch.snapshot-restarts-heartbeat", True)
            while True:
                if watcher.closed_with is not None:
                    code, text = watcher.closed_with
                    raise Refused(code, text)
                taken = watcher.take(build)
                if taken is not None:
                    yield snapshot(*taken)
                    if snapshot_restarts_beat:
                        last_sent = loop.time()
                    continue
                if heartbeats:
                    due = last_sent + beat_s
                    if loop.time() >= due:
                        yield framer.heartbeat(*stamp())
                        last_sent = loop.time()
                        continue
                    # One alarm per stream, armed only when none is pending: `due` never moves
                    # earlier, so an alarm that rings too soon just finds nothing due and re-arms.
                    # Cheaper than arming and cancelling a timer around every wait.
                    if alarm is None:
                        alarm = loop.call_at(due, ring)
                watcher.wake.clear()
                await watcher.wake.wait()
        except asyncio.CancelledError:
            rt.hooks.at("watch.cancelled", None, rt=rt)  # REQ-LOAD-018: nothing else stops
            raise
        finally:
            if alarm is not None:
                alarm.cancel()
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
        sequence = rt.hooks.at("events.first-sequence", 1)
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


def _for_instance(shared, instance_id: str):
    """The same snapshot reporting another instance id (only a fault asks for one)."""
    from openengine.serve.loadwire import Snapshot

    load = load_pb2.LoadInfo()
    load.CopyFrom(shared.load)
    load.instance_id = instance_id
    return Snapshot.of(load)
