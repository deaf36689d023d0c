"""The messages an engine answers with, built from what its backend declares and reports:
EngineInfo, Capabilities and ModelInfo from the description and the advertised profiles, LoadInfo
from the backend's `Load`."""

from __future__ import annotations

from openengine.contract import role_numbers
from openengine.serve.backend import Load
from openengine.serve.limits import to_wire
from openengine.v1 import capabilities_pb2, discovery_pb2, load_pb2
from openengine.validate import RANK_SUMMED_FIELDS, CapabilityReport, validate_capabilities

ROLE_NUMBERS = role_numbers()


def engine_info(state) -> discovery_pb2.EngineInfo:
    d = state.description
    schema_revision = state.catalogue.schema_revision or 1
    pipeline = state.limit(state.catalogue.core, "pipeline_parallel_size")
    return discovery_pb2.EngineInfo(
        instance_id=state.instance_id, engine_name=d.engine_name, engine_version=d.engine_version,
        role=ROLE_NUMBERS[d.role], capability_revision=state.revision, schema_revision=schema_revision,
        # The oldest revision whose clients are served: the earliest alias's, else this one.
        minimum_client_revision=min([schema_revision, *(a.revision for a in state.aliases)]),
        parallelism=discovery_pb2.Parallelism(
            tensor_parallel_size=d.tensor_parallel_size, pipeline_parallel_size=int(pipeline),
            data_parallel_size=d.data_parallel_size, decode_context_parallel_size=1),
        served_models=[m.name for m in d.models])


def capabilities(state) -> capabilities_pb2.Capabilities:
    caps = capabilities_pb2.Capabilities(revision=state.revision)
    for p in state.advertised:
        caps.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
        if p.capability_field:
            fill_capability(getattr(caps, p.capability_field), p, state.selection.limits[p.name])
    return caps


def model_info(state, name: str) -> discovery_pb2.ModelInfo:
    m = state.models[name]
    t = m.tokenizer
    tokenizer = discovery_pb2.TokenizerInfo(name=t.name, vocab_size=t.vocab_size, text_input=t.text_input,
                                            text_output=t.text_output)
    if t.eos_token_id is not None:
        tokenizer.eos_token_id = t.eos_token_id
    if t.bos_token_id is not None:
        tokenizer.bos_token_id = t.bos_token_id
    info = discovery_pb2.ModelInfo(model=m.name, max_context_tokens=m.max_context_tokens,
                                   max_output_tokens=m.max_output_tokens, tokenizer=tokenizer,
                                   multimodal=m.multimodal)
    for p in state.model_profiles(name):
        info.capabilities.profiles.add(name=p.name, major=p.version[0], minor=p.version[1])
        field = next((f.name for f in capabilities_pb2.ModelCapabilities.DESCRIPTOR.fields
                      if f.message_type is p.capability_message), None)
        if field:
            fill_capability(getattr(info.capabilities, field), p, state.model_limit_values(name, p.name))
    return info


def advertised_report(state) -> CapabilityReport:
    """What the engine advertises, read as a client reads it: what requests are admitted against
    and what the engine checks itself against at start."""
    return validate_capabilities(capabilities(state), engine_info=engine_info(state),
                                 model_infos=[model_info(state, name) for name in state.models])


def fill_capability(message, profile, values) -> None:
    """Set every limit field of a capability message from effective values."""
    message.SetInParent()
    for lim in profile.limits:
        value = to_wire(lim, values[lim.name])
        if lim.repeated:
            getattr(message, lim.name).extend(value)
        else:
            setattr(message, lim.name, value)


def load_info(state, per_rank: bool = False) -> load_pb2.LoadInfo:
    """The backend's numbers as a LoadInfo (REQ-LOAD-001): stamped with the instance id and the
    time; with ranks, every summed total is the sum over them (REQ-LOAD-023), and the ranks are
    included only when asked for and advertised."""
    load: Load = state.backend.load()
    info = load_pb2.LoadInfo(
        instance_id=state.instance_id, timestamp=state.clock.timestamp(),
        running_requests=load.running_requests, queued_requests=load.queued_requests,
        used_kv_blocks=load.used_kv_blocks, total_kv_blocks=load.total_kv_blocks,
        running_tokens=load.running_tokens, waiting_tokens=load.waiting_tokens,
        prefill_batch_size=load.prefill_batch_size, decode_batch_size=load.decode_batch_size,
        active_kv_sessions=load.active_kv_sessions, attributes=load.attributes,
        rejected_requests=state.rejected_requests)
    if load.ranks:
        ranks = [load_pb2.RankLoad(
            data_parallel_rank=r.rank, running_requests=r.running_requests, queued_requests=r.queued_requests,
            used_kv_blocks=r.used_kv_blocks, total_kv_blocks=r.total_kv_blocks, running_tokens=r.running_tokens,
            waiting_tokens=r.waiting_tokens) for r in load.ranks]
        for name in RANK_SUMMED_FIELDS:
            setattr(info, name, sum(getattr(rank, name) for rank in ranks))
        load_profile = state.catalogue.profile("openengine.load")
        if per_rank and load_profile is not None and state.has(load_profile.name) \
                and state.limit(load_profile.name, "per_rank"):
            info.ranks.extend(ranks)
    return info
