"""KV: cache handoff between prefill and decode engines."""

from __future__ import annotations


from openengine.engine.services._base import Base, invalid
from openengine.engine.resources import Subscriber
from openengine.v1 import kv_pb2


class Kv(Base):
    async def GetKvEventSources(self, request, context):
        replay = self.backend.address if self.backend.limit("openengine.kv", "event_replay") else ""
        return kv_pb2.GetKvEventSourcesResponse(sources=[kv_pb2.KvEventSource(
            publisher="grpc", endpoint=self.backend.address, replay_endpoint=replay)])

    async def SubscribeKvEvents(self, request: kv_pb2.SubscribeKvEventsRequest, context):
        backend = self.backend
        if request.HasField("from_sequence") and not backend.limit("openengine.kv", "event_replay"):
            raise invalid("from_sequence", "replay is off (openengine.kv.event_replay = false)")
        if request.HasField("data_parallel_rank") and request.data_parallel_rank >= backend.config.data_parallel_size:
            raise invalid("data_parallel_rank", f"the engine has {backend.config.data_parallel_size} rank(s)")
        sub = Subscriber(max(64, int(backend.limit("openengine.kv", "event_buffer_size") or 0)))
        backend.kv_events.subscribers.add(sub)
        try:
            if request.HasField("from_sequence"):
                for batch in list(backend.kv_buffer):
                    if batch.sequence >= request.from_sequence:
                        yield batch
            dropped = 0
            while True:
                while sub.items:
                    batch = sub.items.popleft()
                    if dropped:
                        batch = kv_pb2.SubscribeKvEventsResponse.FromString(batch.SerializeToString())
                        batch.dropped, dropped = dropped, 0
                    yield batch
                if sub.overflowed:
                    dropped += 1
                    sub.overflowed = False
                if sub.closed_with is not None:
                    raise sub.closed_with
                sub.wake.clear()
                await sub.wake.wait()
        finally:
            backend.kv_events.subscribers.discard(sub)
