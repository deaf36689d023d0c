"""Discovery: engine identity, capabilities and model information."""

from __future__ import annotations


from openengine.engine import alias
from openengine.engine import model as lm
from openengine.engine.contract import to_wire
from openengine.engine.services._base import Base
from openengine.v1 import capabilities_pb2, discovery_pb2


class Discovery(Base):
    def engine_info(self) -> discovery_pb2.EngineInfo:
        rt = self.rt
        cfg = rt.config
        role = cfg.role
        if rt.fault("capabilities-role-mismatch"):
            role_scoped = [p for p in rt.advertised if p.scope == "role"]
            allowed = set(role_scoped[0].roles) if role_scoped else {cfg.role}
            role = next(r for r in ("aggregated", "prefill", "decode", "encoder") if r not in allowed)
        from openengine.engine.contract import ROLE_NAMES
        return discovery_pb2.EngineInfo(
            instance_id=rt.instance_id, engine_name=cfg.engine_name, engine_version=_engine_version(),
            role=ROLE_NAMES[role], capability_revision=rt.revision, schema_revision=rt.catalogue.schema_revision or 1,
            minimum_client_revision=alias.minimum_client_revision(rt, rt.catalogue.schema_revision or 1),
            parallelism=discovery_pb2.Parallelism(
                tensor_parallel_size=1,
                pipeline_parallel_size=int(rt.limit("openengine.core", "pipeline_parallel_size")),
                data_parallel_size=cfg.data_parallel_size, decode_context_parallel_size=1),
            served_models=list(rt.models))

    def capabilities(self) -> capabilities_pb2.Capabilities:
        rt = self.rt
        caps = capabilities_pb2.Capabilities(revision=rt.revision)
        for p in rt.advertised:
            caps.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
            if p.capability_field:
                fill_capability(getattr(caps, p.capability_field), p, rt.limits[p.name])
        if rt.fault("capabilities-missing-core"):
            kept = [p for p in caps.profiles if p.name != rt.catalogue.core]
            del caps.profiles[:]
            caps.profiles.extend(kept)
        if rt.fault("capabilities-duplicate-profile"):
            last = capabilities_pb2.Capabilities().profiles.add()
            last.CopyFrom(caps.profiles[-1])
            caps.profiles.append(last)
        if rt.fault("capabilities-unadvertised-submessage"):
            missing = next((p for p in rt.catalogue.profiles if p.capability_field and not rt.has(p.name)), None)
            if missing is not None:
                getattr(caps, missing.capability_field).SetInParent()
        if rt.fault("capabilities-limit-out-of-range"):
            caps.generation.max_sequences = 0
        if rt.fault("capabilities-revision-mismatch"):
            caps.revision = rt.revision + 1
        return caps

    def model_info(self, name: str = "") -> discovery_pb2.ModelInfo:
        rt = self.rt
        name = name or rt.model_name
        m = rt.models[name].config
        info = discovery_pb2.ModelInfo(
            model=m.name, max_context_tokens=m.max_context_tokens, max_output_tokens=m.max_output_tokens,
            tokenizer=discovery_pb2.TokenizerInfo(name=lm.TOKENIZER_NAME, vocab_size=lm.VOCAB_SIZE,
                                                  eos_token_id=lm.EOS_TOKEN_ID, text_input=True, text_output=True),
            multimodal=rt.has("openengine.encoder"))
        mc = info.capabilities
        for p in rt.advertised:
            if p.scope != "model" or not rt.lists(name, p.name):
                continue
            mc.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
            field = next((f.name for f in capabilities_pb2.ModelCapabilities.DESCRIPTOR.fields
                          if f.message_type is p.capability_message), None)
            if field:
                fill_capability(getattr(mc, field), p, rt.model_limit_values(name, p.name))
        return info

    def model_infos(self) -> list[discovery_pb2.ModelInfo]:
        return [self.model_info(name) for name in self.rt.models]

    async def GetEngineInfo(self, request, context):
        return self.engine_info()

    async def GetCapabilities(self, request, context):
        return self.capabilities()

    async def GetModelInfo(self, request, context):
        return self.model_info(self.model(request.model))


def fill_capability(message, profile, values) -> None:
    """Set every limit field of a capability message from effective values."""
    message.SetInParent()
    for lim in profile.limits:
        value = to_wire(lim, values[lim.name])
        if lim.repeated:
            getattr(message, lim.name).extend(value)
        else:
            setattr(message, lim.name, value)


def _engine_version() -> str:
    try:
        from importlib.metadata import version
        return version("openengine-profiles")
    except Exception:
        return "0"
