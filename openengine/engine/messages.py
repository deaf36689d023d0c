"""The discovery messages the engine answers with (EngineInfo, Capabilities, ModelInfo), built
from its runtime, and the capability report requests are admitted against."""

from __future__ import annotations

from openengine.engine import alias
from openengine.engine import model as lm
from openengine.engine.contract import ROLE_NAMES, to_wire
from openengine.v1 import capabilities_pb2, discovery_pb2
from openengine.validate import CapabilityReport, validate_capabilities


def engine_info_message(rt) -> discovery_pb2.EngineInfo:
    cfg = rt.config
    schema_revision = rt.catalogue.schema_revision or 1
    return discovery_pb2.EngineInfo(
        instance_id=rt.instance_id, engine_name=cfg.engine_name, engine_version=_engine_version(),
        role=ROLE_NAMES[cfg.role], capability_revision=rt.revision, schema_revision=schema_revision,
        minimum_client_revision=alias.minimum_client_revision(rt, schema_revision),
        parallelism=discovery_pb2.Parallelism(
            tensor_parallel_size=1,
            pipeline_parallel_size=int(rt.limit("openengine.core", "pipeline_parallel_size")),
            data_parallel_size=cfg.data_parallel_size, decode_context_parallel_size=1),
        served_models=list(rt.models))


def capabilities_message(rt) -> capabilities_pb2.Capabilities:
    caps = capabilities_pb2.Capabilities(revision=rt.revision)
    for p in rt.advertised:
        caps.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
        if p.capability_field:
            fill_capability(getattr(caps, p.capability_field), p, rt.limits[p.name])
    return caps


def model_info_message(rt, name: str = "") -> discovery_pb2.ModelInfo:
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


def advertised_report(rt) -> CapabilityReport:
    """What the engine advertises, read as a client reads it (without the discovery faults): the
    capabilities the engine admits requests against."""
    return validate_capabilities(capabilities_message(rt), engine_info=engine_info_message(rt),
                                 model_infos=[model_info_message(rt, name) for name in rt.models])


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
