"""Which profiles an engine advertises, and which configurations it refuses: the engine's own
settings when they are read (located in a file), profiles and limits when the SDK is given them."""

from __future__ import annotations

import pytest

from openengine.contract import catalogue
from openengine.engine import ConfigError, EngineConfig, ReferenceBackend, check, serve_config
from openengine.engine.config import REFERENCE_LIMITS, config_from_mapping, load_config_file
from openengine.serve import CannotServe, Server

CAT = catalogue()


def served(config: EngineConfig) -> list[str]:
    """The profiles the SDK would advertise for `config` (nothing is started)."""
    return [p.name for p in Server(ReferenceBackend(check(config)), serve_config(config)).state.advertised]


def test_core_is_always_included_and_short_names_resolve():
    assert served(EngineConfig(profiles=("load", "openengine.runtime-events"))) == \
        ["openengine.core", "openengine.load", "openengine.runtime-events"]


def test_all_means_every_profile_the_role_allows_with_the_reference_limits():
    for role in ("aggregated", "prefill", "decode", "encoder"):
        expected = [p.name for p in CAT.profiles if p.scope != "role" or role in p.roles]
        assert served(EngineConfig(role=role)) == expected
    for profile, values in REFERENCE_LIMITS.items():
        assert all(CAT.profile(profile).limit(name) is not None for name in values), profile


@pytest.mark.parametrize("kw, needle", [
    (dict(profiles=("kv",)), "openengine.kv is for the roles prefill, decode"),
    (dict(profiles=("encoder",), role="prefill"), "openengine.encoder is for the roles encoder"),
    (dict(profiles=("nope",)), "'nope' is not a profile"),
    (dict(limits={"core": {"max_sequences": 0}}), "below its minimum"),
    (dict(limits={"core": {"max_sequences": "many"}}), "takes an integer"),
    (dict(limits={"core": {"guided_decoding_modes": ["telepathy"]}}), "is not one of"),
    (dict(limits={"core": {"no_such_limit": 1}}), "has no limit 'no_such_limit'"),
])
def test_what_the_sdk_cannot_serve_is_refused_with_the_reason(kw, needle):
    with pytest.raises(CannotServe) as err:
        served(EngineConfig(**kw))
    assert any(needle in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("kw, needle", [
    (dict(role="boss"), "role 'boss'"),
    (dict(token_delay_ms=-1), "token_delay_ms"),
    (dict(data_parallel_size=0), "data_parallel_size"),
    (dict(admin={"tls_cert": "c.pem"}), "admin mTLS needs all of"),
])
def test_what_only_the_engine_judges_is_refused_with_the_reason(kw, needle):
    from openengine.serve import AdminAccess
    if "admin" in kw:
        kw["admin"] = AdminAccess(**kw["admin"])
    with pytest.raises(ConfigError) as err:
        check(EngineConfig(**kw))
    assert any(needle in p for p in err.value.problems), err.value.problems


def test_config_file_yaml_and_json(tmp_path):
    y = tmp_path / "engine.yaml"
    y.write_text("role: decode\nprofiles: [kv, load]\nlimits:\n  kv:\n    kv_transfer_backends: [nixl]\n"
                 "model:\n  name: m1\n")
    cfg = config_from_mapping(load_config_file(y))
    assert served(cfg) == ["openengine.core", "openengine.load", "openengine.kv"]
    assert cfg.limits == {"kv": {"kv_transfer_backends": ["nixl"]}} and cfg.served_models[0].name == "m1"
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
    import json
    from dataclasses import fields
    from importlib import resources

    from openengine.engine.config import ModelConfig
    from openengine.serve import AdminAccess, ConnectionPolicy

    schema = json.loads(resources.files("openengine.engine").joinpath("engine_config.schema.json").read_text("utf-8"))
    assert set(schema["properties"]) == {f.name for f in fields(EngineConfig)}
    assert set(schema["properties"]["admin"]["properties"]) == {f.name for f in fields(AdminAccess)}
    assert set(schema["properties"]["connections"]["properties"]) == {f.name for f in fields(ConnectionPolicy)}
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


def test_a_config_file_is_judged_against_the_compiled_contract_at_its_place(tmp_path, monkeypatch):
    """Roles, profiles and limits by name; no JSON Schema library is needed (the runtime install
    has none)."""
    import builtins

    real_import = builtins.__import__

    def no_jsonschema(name, *args, **kw):
        if name.split(".")[0] == "jsonschema":
            raise ImportError("no jsonschema in the runtime install")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_jsonschema)
    y = tmp_path / "engine.yaml"
    y.write_text("role: decoder\nprofiles: [load, lod]\nlimits:\n  core: {max_sequences: 2, bogus: 1}\n"
                 "connections: {idle_timeout_s: soon}\nmodel: {name: m}\nmodels: [{name: n}]\n")
    with pytest.raises(ConfigError) as exc:
        load_config_file(y)
    problems = exc.value.problems
    assert f"{y}:7:1: (document): both model and models are set" in problems[0]
    assert problems[1].startswith(f"{y}:1:7: role: unknown role 'decoder' (hint: use one of: aggregated")
    assert problems[2].startswith(f"{y}:2:18: profiles: unknown profile 'lod'")
    assert problems[3].startswith(f"{y}:4:28: limits.core: openengine.core has no limit 'bogus'")
    assert problems[4].startswith(f"{y}:5:31: connections.idle_timeout_s: 'soon' is not a number")
    assert len(problems) == 5 and all("(hint: " in p for p in problems)
