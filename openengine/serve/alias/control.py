"""`openengine.v1.Control`, the control service of schema revision 3's split, answered by v1.

Revision 3's `Inference/Generate` is not aliased: v1 serves its own Generate under that name.
"""

from __future__ import annotations

from openengine.serve.alias import kv
from openengine.serve.alias._common import AliasBase, enum_by_suffix, model_info_fields
from openengine.serve.backend import Refusal, RefusalCode
from openengine.legacy.rev3.v1 import control_pb2 as r3
from openengine.v1 import adapters_pb2, common_pb2, discovery_pb2, kv_pb2, lifecycle_pb2


class ControlAlias(AliasBase):
    service = "openengine.v1.Control"
    earlier = r3
    nothing_aborted = r3.ABORT_STATUS_ALREADY_FINISHED

    async def GetServerInfo(self, request, context):
        info = await self.unary("openengine.v1.Discovery/GetEngineInfo", discovery_pb2.GetEngineInfoRequest(), context)
        caps = await self.unary("openengine.v1.Discovery/GetCapabilities", discovery_pb2.GetCapabilitiesRequest(), context)
        parallel = info.parallelism
        parallelism = r3.ParallelismInfo(tensor_parallel_size=parallel.tensor_parallel_size,
                                         pipeline_parallel_size=parallel.pipeline_parallel_size,
                                         data_parallel_size=parallel.data_parallel_size,
                                         decode_context_parallel_size=parallel.decode_context_parallel_size)
        if parallel.HasField("data_parallel_rank"):
            parallelism.data_parallel_rank = parallel.data_parallel_rank
        capacity = r3.DeploymentCapacity()
        if caps.generation.HasField("max_running_requests"):
            capacity.max_running_requests = caps.generation.max_running_requests
        if caps.HasField("kv") and caps.kv.HasField("kv_block_size"):
            capacity.kv_block_size = caps.kv.kv_block_size
        if caps.HasField("adapters") and caps.adapters.HasField("max_loras"):
            capacity.max_loras = caps.adapters.max_loras
        return r3.ServerInfo(
            engine_name=info.engine_name, engine_version=info.engine_version,
            engine_role=enum_by_suffix(info.role, common_pb2.Role, r3.EngineRole), instance_id=info.instance_id,
            supported_models=info.served_models, parallelism=parallelism,
            schema_revision=info.schema_revision, minimum_client_revision=info.minimum_client_revision,
            schema_release=f"schema-revision-{info.schema_revision}", capacity=capacity)

    async def GetModelInfo(self, request: r3.GetModelInfoRequest, context):
        info = await self.unary("openengine.v1.Discovery/GetModelInfo",
                                discovery_pb2.GetModelInfoRequest(model=request.model), context)
        return r3.ModelInfo(**model_info_fields(info))

    def abort_request(self, request: r3.AbortRequest) -> lifecycle_pb2.AbortRequest:
        v1 = lifecycle_pb2.AbortRequest()
        target = request.WhichOneof("target")
        if target == "all_requests":
            v1.all = True
        elif target == "kv_session":
            v1.kv_session_id = request.kv_session.session_id
        elif target == "request_id":
            v1.request_ids.values.append(request.request_id)
        return v1

    async def _adapters(self, context) -> dict[str, adapters_pb2.AdapterInfo]:
        listed = await self.unary("openengine.v1.Adapters/ListAdapters", adapters_pb2.ListAdaptersRequest(), context)
        return {a.name: a for a in listed.adapters}

    async def LoadLora(self, request: r3.LoadLoraRequest, context):
        wanted = request.adapter
        # Revision 3 makes loading the same adapter twice a success; v1 answers ALREADY_EXISTS.
        loaded = (await self._adapters(context)).get(wanted.lora_name)
        if loaded is not None and loaded.source == wanted.source_path:
            return r3.LoadLoraResponse(adapter=_lora(loaded, wanted.lora_id), already_loaded=True)
        answer = await self.unary("openengine.v1.Adapters/LoadAdapter", adapters_pb2.LoadAdapterRequest(
            name=wanted.lora_name, source=wanted.source_path), context)
        return r3.LoadLoraResponse(adapter=_lora(answer.adapter, wanted.lora_id))

    async def UnloadLora(self, request: r3.UnloadLoraRequest, context):
        loaded = (await self._adapters(context)).get(request.lora_name)
        answer = await self.unary("openengine.v1.Adapters/UnloadAdapter",
                                  adapters_pb2.UnloadAdapterRequest(name=request.lora_name), context)
        if not answer.unloaded or loaded is None:
            raise Refusal(RefusalCode.NOT_FOUND, f"lora_name: no adapter {request.lora_name!r} is loaded")
        return r3.UnloadLoraResponse(adapter=_lora(loaded))

    async def ListLoras(self, request, context):
        return r3.ListLorasResponse(adapters=[_lora(a) for a in (await self._adapters(context)).values()])

    async def GetKvEventSources(self, request: r3.GetKvEventSourcesRequest, context):
        answer = await self.unary("openengine.v1.Kv/GetKvEventSources", kv_pb2.GetKvEventSourcesRequest(), context)
        return kv.event_sources(r3, request, answer)

    async def SubscribeKvEvents(self, request: r3.SubscribeKvEventsRequest, context):
        async for batch in self.stream("openengine.v1.Kv/SubscribeKvEvents", kv.subscribe_request(request), context):
            if batch.dropped:
                yield r3.SubscribeKvEventsResponse(error=r3.EngineError(
                    code=r3.ERROR_CODE_INTERNAL, message=kv.DROPPED.format(n=batch.dropped), retryable=True))
                return
            yield r3.SubscribeKvEventsResponse(batch=kv.event_batch(r3, batch))


def _lora(adapter: adapters_pb2.AdapterInfo, lora_id: int = 0) -> r3.LoraAdapter:
    """v1 adapters have no numeric id: the one a load names is echoed, lists report 0."""
    return r3.LoraAdapter(lora_id=lora_id, lora_name=adapter.name, source_path=adapter.source)
