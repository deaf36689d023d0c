"""Observability's runtime events (GetLoad and WatchLoad are the SDK's)."""

from __future__ import annotations

from openengine.engine.resources import Subscriber
from openengine.engine.services._base import Base
from openengine.serve import Refusal, RefusalCode
from openengine.v1 import events_pb2


class Observability(Base):
    async def SubscribeRuntimeEvents(self, request: events_pb2.SubscribeRuntimeEventsRequest, context):
        backend = self.backend
        cap = backend.limit("openengine.runtime-events", "max_subscribers")
        if len(backend.runtime_events.subscribers) >= cap:
            raise Refusal(RefusalCode.RESOURCE_EXHAUSTED,
                          f"{cap} runtime event streams are open, openengine.runtime-events.max_subscribers = {cap}")
        sub = Subscriber(backend.runtime_events.capacity)
        backend.runtime_events.subscribers.add(sub)
        sequence = 1
        try:
            if request.initial_state:
                phase = backend.phase
                sub.put((backend.clock.now_ns(), events_pb2.RuntimeEvent(state_changed=events_pb2.StateChanged(
                    previous=phase, state=phase, reason="current state"))))
            async for ts, event in sub.received():
                yield events_pb2.SubscribeRuntimeEventsResponse(sequence=sequence, timestamp=backend.clock.timestamp(ts),
                                                                event=event)
                sequence += 1
            if sub.overflowed:
                raise Refusal(RefusalCode.RESOURCE_EXHAUSTED, "the subscriber fell too far behind; subscribe again")
            raise Refusal(RefusalCode.UNAVAILABLE, sub.closed_with[1])
        finally:
            backend.runtime_events.subscribers.discard(sub)
