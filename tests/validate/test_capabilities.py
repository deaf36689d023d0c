"""Every capability rule, with a passing and a failing message (rule id and field path)."""

from __future__ import annotations

import pytest

from openengine.v1 import capabilities_pb2, generation_pb2, model_pb2, server_pb2
from openengine.validate import (
    DEFAULTS, RULES, Severity, check_capabilities, from_upstream, validate_capabilities,
)
from tests.validate.conftest import caps, profile, rules


def test_minimal_core_is_clean():
    assert validate_capabilities(caps()).violations == ()


def test_core_missing():
    msg = capabilities_pb2.Capabilities(profiles=[profile("com.example.batch")])
    found = check_capabilities(msg)
    assert "OEV101" in rules(found)


@pytest.mark.parametrize("name", ["", "OpenEngine.load", "load", "openengine..load", " openengine.load",
                                  "openengine.load-", "openengine.9load", "openengine.run--events"])
def test_non_canonical_names(name):
    found = check_capabilities(caps((name, 1, 0)))
    assert [v.path for v in found if v.rule_id == "OEV102"] == ["profiles[1].name"]


@pytest.mark.parametrize("name", ["com.example.batch", "sglang.hicache", "acme.fast-path", "openengine.runtime-events"])
def test_canonical_names_pass(name):
    assert "OEV102" not in rules(check_capabilities(caps((name, 1, 0))))


def test_major_zero():
    found = check_capabilities(caps(("com.example.batch", 0, 3)))
    assert [(v.rule_id, v.path) for v in found] == [("OEV103", "profiles[1].major")]


def test_duplicate_name_and_major_but_not_two_majors():
    assert "OEV104" in rules(check_capabilities(caps(("acme.x", 1, 0), ("acme.x", 1, 2))))
    assert "OEV104" not in rules(check_capabilities(caps(("acme.x", 1, 0), ("acme.x", 2, 0))))


def test_unknown_standard_name_warns_vendor_passes():
    found = check_capabilities(caps("openengine.teleport", "com.example.teleport"))
    assert [(v.rule_id, v.severity, v.path) for v in found] == [("OEV105", Severity.WARNING, "profiles[1].name")]


def test_unknown_major_warns_higher_minor_passes():
    assert rules(check_capabilities(caps(("openengine.load", 2, 0)))) == {"OEV106"}
    assert check_capabilities(caps(("openengine.load", 1, 9))) == []


def test_capability_message_only_when_advertised():
    msg = caps()
    msg.kv.SetInParent()
    assert [(v.rule_id, v.path) for v in check_capabilities(msg)] == [("OEV110", "kv")]
    ok = caps("openengine.kv")
    ok.kv.SetInParent()
    assert check_capabilities(ok) == []


@pytest.mark.parametrize("field,limit,bad,good", [
    ("core", "max_logprobs", 1025, 1024),
    ("core", "max_sequences", 0, 1),
    ("observability", "min_watch_interval_ms", 0, 1),
    ("adapters", "max_lora_rank", 513, 512),
    ("admin", "max_sleep_level", 9, 8),
    ("encoder", "handle_ttl_ms", 0, 1),
])
def test_limit_ranges(field, limit, bad, good):
    owner = {"core": (), "observability": ("openengine.load",), "adapters": ("openengine.adapters",),
             "admin": ("openengine.admin",), "encoder": ("openengine.encoder",)}[field]
    msg = caps(*owner)
    setattr(getattr(msg, field), limit, bad)
    found = check_capabilities(msg)
    assert [(v.rule_id, v.path, v.value) for v in found] == [("OEV111", f"{field}.{limit}", bad)]
    assert found[0].requirement == "REQ-CAP-008"
    setattr(getattr(msg, field), limit, good)
    assert check_capabilities(msg) == []


def test_enum_values_outside_the_registry():
    msg = caps()
    msg.core.guided_decoding_modes.extend([1, 0, 42])
    found = check_capabilities(msg)
    assert [(v.rule_id, v.path) for v in found] == [("OEV112", "core.guided_decoding_modes[1]"),
                                                   ("OEV112", "core.guided_decoding_modes[2]")]


def test_defaults_and_effective_values():
    msg = caps("openengine.load")
    msg.observability.min_watch_interval_ms = 5
    eff = validate_capabilities(msg).limits["openengine.load"]
    assert eff["min_watch_interval_ms"] == 5
    assert eff["default_heartbeat_ms"] == DEFAULTS["openengine.load"]["default_heartbeat_ms"] == 1000
    assert validate_capabilities(caps()).limits["openengine.admin"]["pause_modes"] == ["abort"]
    msg.core.guided_decoding_modes.append(2)
    assert validate_capabilities(msg).limits["openengine.core"]["guided_decoding_modes"] == ["regex"]


def test_effective_value_of_unadvertised_profile_is_none():
    report = validate_capabilities(caps())
    assert report.effective("openengine.load", "max_watchers") is None
    assert report.effective("openengine.core", "max_logprobs") == 20


def test_prerequisite_missing_and_satisfied():
    too_old = capabilities_pb2.Capabilities(profiles=[profile("openengine.core", 0, 9), profile("openengine.load")])
    assert "OEV120" in rules(check_capabilities(too_old))
    assert "OEV120" not in rules(check_capabilities(caps("openengine.load")))


def test_missing_core_is_one_root_finding_not_one_per_dependant():
    everything = ("openengine.load", "openengine.kv", "openengine.tasks", "openengine.sessions",
                  "openengine.adapters", "openengine.admin")
    found = check_capabilities(capabilities_pb2.Capabilities(profiles=[profile(n) for n in everything]))
    assert [v.rule_id for v in found] == ["OEV101"]


@pytest.mark.parametrize("limits,names,bad", [
    ({"speculative_decoding": True, "pipeline_parallel_size": 2}, (), True),
    ({"speculative_decoding": True, "pipeline_parallel_size": 1}, (), False),
    ({"speculative_decoding": True, "min_p": True}, (), True),
    ({"speculative_decoding": True, "logits_post_processor": True}, (), True),
    ({"speculative_decoding": True}, ("openengine.tasks",), True),
    ({"speculative_decoding": False}, ("openengine.tasks",), False),
    ({"logits_post_processor": True}, ("openengine.kv",), True),
    ({"logits_post_processor": True}, (), False),
])
def test_incompatible_combinations_on_effective_values(limits, names, bad):
    msg = caps(*names)
    for key, value in limits.items():
        setattr(msg.core, key, value)
    assert ("OEV121" in rules(check_capabilities(msg))) is bad


def test_role_scope(server_info):
    msg = caps("openengine.kv")
    found = validate_capabilities(msg, server_info=server_info).violations
    assert [(v.rule_id, v.requirement) for v in found] == [("OEV130", "REQ-CAP-011")]
    server_info.engine_role = server_pb2.ENGINE_ROLE_DECODE
    assert validate_capabilities(msg, server_info=server_info).violations == ()


def test_server_info_role_revisions_and_release(server_info):
    server_info.engine_role = server_pb2.ENGINE_ROLE_UNSPECIFIED
    server_info.capability_revision = 2
    server_info.schema_release = ""
    found = validate_capabilities(caps(revision=1), server_info=server_info).violations
    assert {(v.rule_id, v.path) for v in found} == {
        ("OEV136", "server_info.engine_role"), ("OEV136", "server_info.schema_release"), ("OEV135", "revision")}


def _model(name, *names, **fields):
    entry = capabilities_pb2.ModelCapabilities(model=name)
    entry.profiles.extend(profile(n) for n in names)
    for field, values in fields.items():
        sub = getattr(entry, field)
        sub.SetInParent()
        for k, v in values.items():
            setattr(sub, k, v)
    return entry


def test_model_scope_rules(server_info):
    engine = caps("openengine.adapters", "openengine.load")
    engine.models.append(_model("m", "openengine.adapters", adapters={"max_loras": 3}))
    ok = validate_capabilities(engine, server_info=server_info)
    assert ok.violations == ()
    assert ok.effective("openengine.adapters", "max_loras", model="m") == 3
    assert ok.effective("openengine.adapters", "max_loras") == 1

    def judged(base, *entries, **options):
        msg = capabilities_pb2.Capabilities()
        msg.CopyFrom(base)
        del msg.models[:]
        msg.models.extend(entries)
        return rules(validate_capabilities(msg, **options).violations)

    assert judged(caps(), _model("m", "openengine.tasks")) == {"OEV131"}
    assert judged(engine, _model("m", adapters={"max_loras": 2})) == {"OEV132"}
    assert judged(engine, _model("m", "openengine.load")) == {"OEV133"}
    assert judged(engine, _model("m"), server_info=server_info) == {"OEV134"}
    assert judged(engine, _model("m", "openengine.adapters"), _model("m", "openengine.adapters"),
                  server_info=server_info) == {"OEV137"}
    assert judged(engine, _model("other", "openengine.adapters"), server_info=server_info) == {"OEV137"}
    out_of_range = validate_capabilities(engine)
    engine.models[0].adapters.max_loras = 0
    out_of_range = validate_capabilities(engine)
    assert [v.path for v in out_of_range.violations] == ["models[0].adapters.max_loras"]


def test_upstreams_fields_must_say_what_the_core_limits_say(server_info):
    """REQ-CAP-014: ModelInfo.generation and ServerInfo.capacity state some core limits again; an
    unreported field says nothing, a reported one must agree; ModelInfo's token limits reach the
    report."""
    engine = caps()
    engine.core.max_logprobs = 5
    engine.core.output_logprobs = True
    engine.core.guided_decoding_modes.append(model_pb2.GUIDED_DECODING_MODE_REGEX)
    info = model_pb2.ModelInfo(model_id="m", max_context_length=512, max_output_tokens=64, vocab_size=100)
    info.generation.output_logprobs.supported = True
    info.generation.output_logprobs.max_top_n = 5
    info.generation.guided_decoding.modes.append(model_pb2.GUIDED_DECODING_MODE_REGEX)
    server_info.capacity.max_running_requests = 256
    report = validate_capabilities(engine, server_info=server_info, model_infos=[info])
    assert report.violations == ()
    assert (report.models["m"].max_context_length, report.models["m"].vocab_size) == (512, 100)
    info.generation.max_num_sequences = 4
    info.supports_lora = True
    server_info.capacity.max_batched_tokens = 1
    found = validate_capabilities(engine, server_info=server_info, model_infos={"m": info}).violations
    assert {(v.rule_id, v.path) for v in found} == {
        ("OEV138", "model_info[0].generation.max_num_sequences"), ("OEV138", "model_info[0].supports_lora"),
        ("OEV138", "server_info.capacity.max_batched_tokens")}


def test_an_upstream_only_engine_is_known_by_what_its_answers_report(server_info):
    info = model_pb2.ModelInfo(model_id="m", max_output_tokens=64)
    info.generation.output_logprobs.supported = True
    info.generation.output_logprobs.max_top_n = 3
    server_info.capacity.max_running_requests = 8
    server_info.schema_revision, server_info.capability_revision = 1, 0     # upstream's, as shipped
    report = from_upstream(server_info, [info])
    assert report.upstream_only and report.profiles == {} and report.violations == ()
    assert report.effective("openengine.core", "max_logprobs", model="m") == 3
    assert report.effective("openengine.core", "max_running_requests") == 8
    assert report.effective("openengine.core", "max_sequences", model="m") is None
    assert report.effective("openengine.load", "max_watchers") is None


def test_every_violation_is_reported_not_only_the_first():
    msg = capabilities_pb2.Capabilities(profiles=[profile("Bad", 0)])
    msg.core.max_logprobs = 5000
    msg.kv.kv_block_size = 0
    assert {"OEV101", "OEV102", "OEV103", "OEV110", "OEV111"} <= rules(check_capabilities(msg))


def test_every_rule_cites_a_requirement_of_the_spec():
    from oespec.spec import load_requirements

    known = {r.id for r in load_requirements("spec")}
    cited = {r.requirement for r in RULES.values() if r.requirement}
    assert cited - known == set()
