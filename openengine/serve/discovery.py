"""What an engine says about itself, built from what its backend declares and the advertised
profiles: Capabilities (Discovery/GetCapabilities), and upstream's ServerInfo and ModelInfo
(Control/GetServerInfo, GetModelInfo). ServerInfo.capacity and ModelInfo.generation are filled
from the same limit values as the capability messages, so the two views never disagree."""

from __future__ import annotations

from typing import Any, Mapping

from openengine.contract import CORE, catalogue, role_numbers
from openengine.serve.limits import to_wire
from openengine.v1 import capabilities_pb2, kv_pb2, model_pb2, server_pb2
from openengine.validate import CapabilityReport, validate_capabilities

ROLE_NUMBERS = role_numbers()
KV = "openengine.kv"
ADAPTERS = "openengine.adapters"
TOP_N = model_pb2.CANDIDATE_TOKEN_SELECTION_MODE_TOP_N
# Registry spelling -> upstream GuidedDecodingMode number (the registry reuses upstream's enum).
GUIDED_MODES = catalogue().limit(f"{CORE}.guided_decoding_modes").enum_spellings()


class Discovery:
    """openengine.v1.Discovery."""

    def __init__(self, state):
        self.state = state

    async def GetCapabilities(self, request, context):
        return capabilities(self.state)


def capabilities(state) -> capabilities_pb2.Capabilities:
    caps = capabilities_pb2.Capabilities(revision=state.revision)
    for p in state.advertised:
        caps.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
        if p.capability_field and p.scope != "model":
            fill_capability(getattr(caps, p.capability_field), p, state.selection.limits[p.name])
    for name in state.models:
        model = caps.models.add(model=name)
        for p in state.model_profiles(name):
            model.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
            if p.capability_field:
                fill_capability(getattr(model, p.capability_field), p, state.model_limit_values(name, p.name))
    return caps


def fill_capability(message, profile, values: Mapping[str, Any]) -> None:
    """Set every limit field of a capability message from effective values."""
    message.SetInParent()
    for lim in profile.limits:
        value = to_wire(lim, values[lim.name])
        if lim.repeated:
            getattr(message, lim.name).extend(value)
        else:
            setattr(message, lim.name, value)


def server_info(state) -> server_pb2.ServerInfo:
    d, cat = state.description, state.catalogue
    core = state.selection.limits[CORE]
    info = server_pb2.ServerInfo(
        engine_name=d.engine_name, engine_version=d.engine_version, engine_role=ROLE_NUMBERS[d.role],
        instance_id=state.instance_id, supported_models=list(state.models),
        parallelism=server_pb2.ParallelismInfo(
            tensor_parallel_size=d.tensor_parallel_size, pipeline_parallel_size=core["pipeline_parallel_size"],
            data_parallel_size=d.data_parallel_size, decode_context_parallel_size=1),
        kv_connector=kv_pb2.KvConnectorInfo(enabled=state.has(KV)),
        schema_revision=cat.schema_revision, minimum_client_revision=cat.minimum_client_revision,
        schema_release=cat.schema_release,
        capacity=server_pb2.DeploymentCapacity(max_running_requests=core["max_running_requests"],
                                               max_batched_tokens=core["max_batch_tokens"]),
        capability_revision=state.revision)
    if state.has(KV):
        kv = state.selection.limits[KV]
        info.capacity.kv_block_size = kv["kv_block_size"]
        if kv["total_kv_blocks"]:
            info.capacity.total_kv_blocks = kv["total_kv_blocks"]
        if kv["kv_transfer_backends"]:
            info.kv_connector.transfer_backend = kv["kv_transfer_backends"][0]
    if state.has(ADAPTERS):
        info.capacity.max_loras = state.selection.limits[ADAPTERS]["max_loras"]
    return info


def model_info(state, name: str) -> model_pb2.ModelInfo:
    m = state.models[name]
    t = m.tokenizer
    core = state.selection.limits[CORE]
    info = model_pb2.ModelInfo(
        model_id=m.name, served_model_name=m.name, max_context_length=m.max_context_tokens,
        max_output_tokens=m.max_output_tokens, tokenizer_modes=[t.name], supports_text_input=t.text_input,
        supports_token_ids_input=core["token_ids_input"], generation=generation_capabilities(core),
        supports_lora=state.lists(name, ADAPTERS), supports_multimodal=m.multimodal, vocab_size=t.vocab_size)
    if t.eos_token_id is not None:
        info.eos_token_id = t.eos_token_id
    return info


def generation_capabilities(core: Mapping[str, Any]) -> model_pb2.GenerationCapabilities:
    """Upstream's view of the core limits: what Generate accepts."""
    top_n = core["max_logprobs"]

    def logprobs(supported: bool) -> model_pb2.LogprobCapabilities:
        if not supported:
            return model_pb2.LogprobCapabilities(supported=False)
        return model_pb2.LogprobCapabilities(supported=True, candidate_selection_modes=[TOP_N] if top_n else [],
                                             max_top_n=top_n)

    modes = [GUIDED_MODES[mode] for mode in core["guided_decoding_modes"]]
    return model_pb2.GenerationCapabilities(
        prompt_logprobs=logprobs(core["prompt_logprobs"]), output_logprobs=logprobs(core["output_logprobs"]),
        guided_decoding=model_pb2.GuidedDecodingCapabilities(supported=bool(modes), modes=modes),
        max_num_sequences=core["max_sequences"], supports_priority=core["priority"], supports_stop_in_output=True)


def advertised_report(state) -> CapabilityReport:
    """What the engine advertises, read as a client reads it: what requests are admitted against
    and what the engine checks itself against at start."""
    return validate_capabilities(capabilities(state), server_info=server_info(state),
                                 model_infos=[model_info(state, name) for name in state.models])
