"""Which profiles an engine advertises, and which configurations it refuses at start."""

from __future__ import annotations

import pytest

from openengine.engine import ConfigError, EngineConfig, FAULTS, catalogue, resolve_config
from openengine.engine.config import REFERENCE_LIMITS, config_from_mapping, load_config_file
from openengine.serve.limits import coerce

CAT = catalogue()


def names(resolved):
    return [p.name for p in resolved.advertised]


def test_core_is_always_included_and_short_names_resolve():
    resolved = resolve_config(EngineConfig(profiles=("load", "openengine.runtime-events")))
    assert names(resolved) == ["openengine.core", "openengine.load", "openengine.runtime-events"]


def test_all_means_every_profile_the_role_allows():
    for role in ("aggregated", "prefill", "decode", "encoder"):
        resolved = resolve_config(EngineConfig(role=role))
        expected = [p.name for p in CAT.profiles if p.scope != "role" or role in p.roles]
        assert names(resolved) == expected


def test_catalogue_comes_from_the_descriptors():
    # Every RPC of the compiled services carries its profile; every profile has its limits.
    assert CAT.core == "openengine.core"
    assert CAT.rpc("openengine.v1.Observability", "WatchLoad").profile == "openengine.load"
    load = CAT.profile("openengine.load")
    assert load.limit("min_watch_interval_ms").default == 10
    assert CAT.profile("openengine.kv").roles == ("prefill", "decode")


@pytest.mark.parametrize("kw, needle", [
    (dict(profiles=("kv",)), "openengine.kv is scoped to role"),
    (dict(profiles=("encoder",), role="prefill"), "openengine.encoder is scoped to role"),
    (dict(profiles=("nope",)), "unknown profile 'nope'"),
    (dict(role="boss"), "role 'boss'"),
    (dict(limits={"core": {"max_sequences": 0}}), "below its minimum"),
    (dict(limits={"core": {"max_sequences": "many"}}), "takes an integer"),
    (dict(limits={"core": {"guided_decoding_modes": ["telepathy"]}}), "is not one of"),
    (dict(limits={"core": {"no_such_limit": 1}}), "has no limit 'no_such_limit'"),
    (dict(profiles=("load",), limits={"adapters": {"max_loras": 2}}), "not enabled"),
    (dict(limits={"core": {"speculative_decoding": True, "pipeline_parallel_size": 2, "logit_bias": False,
                           "min_p": False}}), "cannot be served"),
    (dict(profiles=("tasks",), limits={"core": {"speculative_decoding": True, "logit_bias": False,
                                                "min_p": False}}), "openengine.tasks cannot be served"),
    (dict(faults=("no-such-fault",)), "unknown fault"),
])
def test_invalid_configurations_are_refused_with_the_reason(kw, needle):
    with pytest.raises(ConfigError) as err:
        resolve_config(EngineConfig(**kw))
    assert any(needle in p for p in err.value.problems), err.value.problems


def test_a_valid_incompatible_looking_config_is_accepted_when_conditions_do_not_hold():
    resolved = resolve_config(EngineConfig(profiles=("load",), limits={
        "core": {"speculative_decoding": True, "logit_bias": False, "min_p": False}}))
    assert resolved.limit("openengine.core", "speculative_decoding") is True


def test_reference_limits_name_real_limits():
    for profile, values in REFERENCE_LIMITS.items():
        info = CAT.profile(profile)
        assert info is not None, profile
        for name, value in values.items():
            assert info.limit(name) is not None, f"{profile}.{name}"
            coerce(info.limit(name), value)


def test_config_file_yaml_and_json(tmp_path):
    y = tmp_path / "engine.yaml"
    y.write_text("role: decode\nprofiles: [kv, load]\nlimits:\n  kv:\n    kv_transfer_backends: [nixl]\n"
                 "model:\n  name: m1\n")
    cfg = config_from_mapping(load_config_file(y))
    resolved = resolve_config(cfg)
    assert names(resolved) == ["openengine.core", "openengine.load", "openengine.kv"]
    assert resolved.limit("openengine.kv", "kv_transfer_backends") == ["nixl"]
    j = tmp_path / "engine.json"
    j.write_text('{"profiles": "load", "bogus": 1}')
    with pytest.raises(ConfigError, match="bogus"):
        config_from_mapping(load_config_file(j))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="YAML syntax error") as exc:
        load_config_file(bad)
    assert exc.value.problems[0].startswith(f"{bad}:1:2:")


def test_a_typo_in_engine_yaml_is_located_with_a_hint(tmp_path):
    y = tmp_path / "engine.yaml"
    y.write_text("role: decode\nprofiles: [kv, load]\nlimts:\n  core: {max_sequences: 2}\n"
                 "models:\n  - {name: m, max_context_tokns: 8192}\nadmin: {port: fifty}\n")
    with pytest.raises(ConfigError) as exc:
        load_config_file(y)
    problems = exc.value.problems
    assert problems[0].startswith(f"{y}:3:1: (document): unknown key 'limts'") and "did you mean 'limits'" in problems[0]
    assert problems[1].startswith(f"{y}:6:15: models[0]: unknown key 'max_context_tokns'")
    assert "did you mean 'max_context_tokens'" in problems[1]
    assert problems[2].startswith(f"{y}:7:15: admin.port:") and "hint:" in problems[2]


def test_the_config_schema_knows_exactly_the_settings_the_loader_takes():
    from dataclasses import fields

    from openengine.engine.config import AdminConfig, ModelConfig, _TOP_KEYS, config_schema

    schema = config_schema()
    assert set(schema["properties"]) == _TOP_KEYS
    assert set(schema["properties"]["admin"]["properties"]) == {f.name for f in fields(AdminConfig)}
    assert set(schema["$defs"]["model"]["properties"]) == {f.name for f in fields(ModelConfig)}


def test_the_readme_example_passes_the_published_schema():
    """The README's engine.yaml example names the published schema in its modeline and is valid."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    block = re.search(r"```yaml\n(# yaml-language-server: \$schema=schemas/engine_config.schema.json\n.*?)```",
                      readme, re.S)
    assert block, "the README's engine.yaml example lacks its schema modeline"
    y = root / "build" / "readme-engine.yaml"
    y.parent.mkdir(exist_ok=True)
    y.write_text(block.group(1))
    config_from_mapping(load_config_file(y))


def test_every_fault_cites_requirements_the_spec_defines():
    from pathlib import Path
    spec = Path(__file__).resolve().parents[2] / "spec"
    if not spec.is_dir():
        pytest.skip("no spec/ next to the tests")
    from oespec.spec import load_requirements
    known = {i for r in load_requirements(spec) for i in r.ids}
    for fault in FAULTS.values():
        assert fault.requirements, fault.name
        for req in fault.requirements:
            assert req in known, f"{fault.name} cites {req}, which spec/ does not define"


def test_a_config_file_is_judged_against_the_compiled_contract_at_its_place(tmp_path, monkeypatch):
    """Limits by their type and range in the contract, roles, profiles, aliases and faults by name;
    no JSON Schema library is needed (the runtime install has none)."""
    import builtins

    real_import = builtins.__import__

    def no_jsonschema(name, *args, **kw):
        if name.split(".")[0] == "jsonschema":
            raise ImportError("no jsonschema in the runtime install")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_jsonschema)
    y = tmp_path / "engine.yaml"
    y.write_text("role: decoder\nprofiles: [load, lod]\nlimits:\n  core: {max_sequences: 0, bogus: 1}\n"
                 "alias: [openengine, ctrl]\nfaults: [no-such-fault]\nmodel: {name: m}\nmodels: [{name: n}]\n")
    with pytest.raises(ConfigError) as exc:
        load_config_file(y)
    problems = exc.value.problems
    assert f"{y}:8:1: (document): both model and models are set" in problems[0]
    assert problems[1].startswith(f"{y}:1:7: role: unknown role 'decoder' (hint: use one of: aggregated")
    assert problems[2].startswith(f"{y}:2:18: profiles: unknown profile 'lod'")
    assert problems[3].startswith(f"{y}:4:25: limits.core.max_sequences: openengine.core.max_sequences = 0 is below")
    assert problems[4].startswith(f"{y}:4:28: limits.core: openengine.core has no limit 'bogus'")
    assert problems[5].startswith(f"{y}:5:21: alias: unknown alias 'ctrl'")
    assert problems[6].startswith(f"{y}:6:10: faults: unknown fault 'no-such-fault'")
    assert len(problems) == 7 and all("(hint: " in p for p in problems)
