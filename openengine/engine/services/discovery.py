"""Discovery: engine identity, capabilities and model information."""

from __future__ import annotations


from openengine.engine.messages import (  # noqa: F401  (re-exported)
    advertised_report, capabilities_message, engine_info_message, fill_capability, model_info_message,
)
from openengine.engine.services._base import Base
from openengine.v1 import capabilities_pb2, discovery_pb2


class Discovery(Base):
    """What the engine answers; the messages themselves are built by the functions below, and the
    discovery faults act on them at their hook points."""

    def engine_info(self) -> discovery_pb2.EngineInfo:
        return self.rt.hooks.at("discovery.engine-info", engine_info_message(self.rt), rt=self.rt)

    def capabilities(self) -> capabilities_pb2.Capabilities:
        return self.rt.hooks.at("discovery.capabilities", capabilities_message(self.rt), rt=self.rt)

    def model_info(self, name: str = "") -> discovery_pb2.ModelInfo:
        return model_info_message(self.rt, name)

    def model_infos(self) -> list[discovery_pb2.ModelInfo]:
        return [self.model_info(name) for name in self.rt.models]

    async def GetEngineInfo(self, request, context):
        return self.engine_info()

    async def GetCapabilities(self, request, context):
        return self.capabilities()

    async def GetModelInfo(self, request, context):
        return self.model_info(self.model(request.model))
