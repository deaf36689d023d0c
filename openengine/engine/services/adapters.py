"""Adapters: LoRA adapters loaded and unloaded at run time."""

from __future__ import annotations


from openengine.engine.resources import Adapter
from openengine.engine.services._base import Base, invalid
from openengine.serve import Refusal, RefusalCode
from openengine.v1 import adapters_pb2, events_pb2


class Adapters(Base):
    def _info(self, a: Adapter, resident: bool) -> adapters_pb2.AdapterInfo:
        return adapters_pb2.AdapterInfo(name=a.name, model=a.model, source=a.source, rank=a.rank,
                                        resident=resident, pinned=a.pinned)

    def _resident(self) -> set[str]:
        """Per model: pinned adapters first, then the most recently loaded, up to its max_loras on
        the accelerator."""
        out: set[str] = set()
        for model in self.backend.models:
            cap = self.backend.model_limit(model, "openengine.adapters", "max_loras")
            ordered = sorted(self._of(model), key=lambda a: not a.pinned)
            out |= {a.name for a in ordered[:cap]}
        return out

    def _of(self, model: str) -> list[Adapter]:
        return [a for a in self.backend.adapters.values() if a.model == model]

    async def LoadAdapter(self, request: adapters_pb2.LoadAdapterRequest, context):
        backend = self.backend
        model = self.model(request.model)
        self.model_lists(model, "openengine.adapters")
        lim = lambda name: backend.model_limit(model, "openengine.adapters", name)  # noqa: E731
        if not request.name:
            raise invalid("name", "must not be empty")
        if not request.source:
            raise invalid("source", "must not be empty")
        rank = request.rank if request.HasField("rank") else min(16, lim("max_lora_rank"))
        if rank < 1 or rank > lim("max_lora_rank"):
            raise invalid("rank", f"{rank} is outside 1..openengine.adapters.max_lora_rank = {lim('max_lora_rank')}")
        if request.name in backend.adapters:
            raise Refusal(RefusalCode.ALREADY_EXISTS, f"name: adapter {request.name!r} is already loaded")
        capacity = max(lim("max_loras"), lim("max_cpu_loras"))
        loaded = self._of(model)
        if len(loaded) >= capacity:
            raise Refusal(RefusalCode.RESOURCE_EXHAUSTED,
                          f"{len(loaded)} adapters are loaded for {model!r}, openengine.adapters.max_loras = "
                          f"{lim('max_loras')}, max_cpu_loras = {lim('max_cpu_loras')}; unload one first")
        pinned = sum(1 for a in loaded if a.pinned)
        if request.pinned and pinned >= lim("max_loras"):
            raise Refusal(RefusalCode.RESOURCE_EXHAUSTED,
                          f"{pinned} adapters are pinned, openengine.adapters.max_loras = {lim('max_loras')}")
        adapter = Adapter(request.name, model, request.source, rank, request.pinned)
        backend.adapters[request.name] = adapter
        loaded_event = events_pb2.AdapterLoaded(name=adapter.name, model=model)
        backend.emit(events_pb2.RuntimeEvent(adapter_loaded=loaded_event), "adapter_loaded")
        return adapters_pb2.LoadAdapterResponse(adapter=self._info(adapter, adapter.name in self._resident()))

    async def UnloadAdapter(self, request, context):
        backend = self.backend
        model = self.model(request.model) if request.model else None
        adapter = backend.adapters.get(request.name)
        if adapter is not None and model is not None and adapter.model != model:
            adapter = None  # loaded, but for another model
        if adapter is not None:
            del backend.adapters[adapter.name]
            unloaded_event = events_pb2.AdapterUnloaded(name=adapter.name, model=adapter.model)
            backend.emit(events_pb2.RuntimeEvent(adapter_unloaded=unloaded_event), "adapter_unloaded")
        return adapters_pb2.UnloadAdapterResponse(unloaded=adapter is not None)

    async def ListAdapters(self, request, context):
        model = self.model(request.model) if request.model else None
        resident = self._resident()
        return adapters_pb2.ListAdaptersResponse(
            adapters=[self._info(a, a.name in resident) for a in self.backend.adapters.values()
                      if model is None or a.model == model])
