"""Control's LoRA lifecycle and KV events (the rest of Control is the SDK's)."""

from __future__ import annotations

import os

from openengine.engine.resources import Adapter, Subscriber
from openengine.engine.services._base import Base
from openengine.serve import Refusal, RefusalCode, invalid
from openengine.v1 import error_pb2, events_pb2, kv_pb2, lora_pb2


class Control(Base):
    # -- LoRA adapters (openengine.adapters) ---------------------------------------------------------

    def _emit(self, adapter: Adapter, loaded: bool) -> None:
        engine = self.backend.engine
        model = next((m for m in self.backend.models if engine.lists(m, "openengine.adapters")), "")
        if loaded:
            event = events_pb2.RuntimeEvent(adapter_loaded=events_pb2.AdapterLoaded(name=adapter.name, model=model))
        else:
            event = events_pb2.RuntimeEvent(adapter_unloaded=events_pb2.AdapterUnloaded(name=adapter.name, model=model))
        self.backend.emit(event, "adapter_loaded" if loaded else "adapter_unloaded")

    async def LoadLora(self, request: lora_pb2.LoadLoraRequest, context):
        backend = self.backend
        asked = request.adapter
        if asked.lora_id <= 0:
            raise invalid("adapter.lora_id", "must be positive")
        if not asked.lora_name:
            raise invalid("adapter.lora_name", "must not be empty")
        if not os.path.isabs(asked.source_path):
            raise invalid("adapter.source_path", f"{asked.source_path!r} is not an absolute path")
        wanted = Adapter(asked.lora_id, asked.lora_name, asked.source_path)
        if backend.adapters.get(wanted.name) == wanted:
            return lora_pb2.LoadLoraResponse(adapter=asked, already_loaded=True)
        for held in backend.adapters.values():
            clash = [what for what, same in (("lora_id", held.lora_id == wanted.lora_id),
                                              ("lora_name", held.name == wanted.name),
                                              ("source_path", held.source_path == wanted.source_path)) if same]
            if clash:
                raise Refusal(RefusalCode.ALREADY_EXISTS,
                              f"adapter.{clash[0]}: already used by the loaded adapter {held.name!r} "
                              f"(id {held.lora_id}, {held.source_path}); unload it first")
        capacity = max(backend.limit("openengine.adapters", "max_loras"),
                       backend.limit("openengine.adapters", "max_cpu_loras"))
        if len(backend.adapters) >= capacity:
            raise Refusal(RefusalCode.RESOURCE_EXHAUSTED,
                          f"{len(backend.adapters)} adapters are loaded, as many as the engine holds "
                          f"(openengine.adapters.max_cpu_loras); unload one first")
        backend.adapters[wanted.name] = wanted
        self._emit(wanted, loaded=True)
        return lora_pb2.LoadLoraResponse(adapter=asked)

    async def UnloadLora(self, request: lora_pb2.UnloadLoraRequest, context):
        adapter = self.backend.adapters.pop(request.lora_name, None)
        if adapter is None:
            raise Refusal(RefusalCode.NOT_FOUND, f"lora_name: no loaded adapter {request.lora_name!r}")
        self._emit(adapter, loaded=False)
        return lora_pb2.UnloadLoraResponse(adapter=_wire(adapter))

    async def ListLoras(self, request, context):
        return lora_pb2.ListLorasResponse(adapters=[_wire(a) for a in self.backend.adapters.values()])

    # -- KV events (openengine.kv) ---------------------------------------------------------------

    def _ranks(self, asked, field: str) -> list[int]:
        size = self.backend.config.data_parallel_size
        for i, rank in enumerate(asked):
            if rank >= size:
                raise invalid(f"{field}[{i}]", f"the engine has {size} data-parallel rank(s), 0..{size - 1}")
        return sorted(set(asked)) if asked else list(range(size))

    async def GetKvEventSources(self, request: kv_pb2.GetKvEventSourcesRequest, context):
        backend = self.backend
        replay = backend.limit("openengine.kv", "event_replay")
        endpoint = backend.endpoint()
        return kv_pb2.GetKvEventSourcesResponse(sources=[
            kv_pb2.KvEventSource(transport="grpc", endpoint_addr=endpoint, encoding="protobuf",
                                 replay_endpoint=f"{endpoint.host}:{endpoint.port}" if replay else "",
                                 data_parallel_rank=rank,
                                 max_queue_size=max(64, int(backend.limit("openengine.kv", "event_buffer_size"))))
            for rank in self._ranks(request.data_parallel_ranks, "data_parallel_ranks")])

    async def SubscribeKvEvents(self, request: kv_pb2.SubscribeKvEventsRequest, context):
        backend = self.backend
        ranks = set(self._ranks(request.data_parallel_ranks, "data_parallel_ranks"))
        start = request.start_sequence_number
        if start and not backend.limit("openengine.kv", "event_replay"):
            raise invalid("start_sequence_number", "replay is off (openengine.kv.event_replay = false)")
        sub = Subscriber(max(64, int(backend.limit("openengine.kv", "event_buffer_size"))))
        backend.kv_events.subscribers.add(sub)
        try:
            if request.include_snapshot:
                # What the cache holds now, as one batch of stored blocks before any new event.
                snapshot = kv_pb2.KvEventBatch(sequence_number=backend.kv_sequence, timestamp_unix_nanos=backend.clock.now_ns())
                if backend.prefix_cache:
                    snapshot.events.add(block_stored=kv_pb2.BlockStored(
                        block_hashes=[kv_pb2.KvBlockHash(value=h, encoding="bytes") for h in backend.prefix_cache],
                        block_size=backend.kv_block_size, medium=kv_pb2.STORAGE_MEDIUM_GPU))
                yield kv_pb2.SubscribeKvEventsResponse(batch=snapshot)
            if start:
                for batch in list(backend.kv_buffer):
                    if batch.sequence_number >= start and batch.data_parallel_rank in ranks:
                        yield kv_pb2.SubscribeKvEventsResponse(batch=batch)
            async for batch in sub.received():
                if batch.data_parallel_rank in ranks and batch.sequence_number >= start:
                    yield kv_pb2.SubscribeKvEventsResponse(batch=batch)
            # After acceptance a failure is the stream's last message, then OK.
            if sub.overflowed:
                yield _error(error_pb2.ERROR_CODE_OVERLOADED,
                             "the subscriber fell behind and events were lost; subscribe again"
                             + (" from the last sequence_number read" if backend.limit("openengine.kv", "event_replay")
                                else ""))
            else:
                code, message = sub.closed_with
                yield _error(int(code), message)
        finally:
            backend.kv_events.subscribers.discard(sub)


def _wire(adapter: Adapter) -> lora_pb2.LoraAdapter:
    return lora_pb2.LoraAdapter(lora_id=adapter.lora_id, lora_name=adapter.name, source_path=adapter.source_path)


def _error(code: int, message: str) -> kv_pb2.SubscribeKvEventsResponse:
    return kv_pb2.SubscribeKvEventsResponse(error=error_pb2.EngineError(code=code, message=message, retryable=True))
