"""Several served models: per-model ModelInfo and model-scoped profiles (REQ-CAP-012, REQ-CAP-013,
REQ-TASKS-001), routing by `model`, per-model limits, and the `models:` configuration."""

from __future__ import annotations

import grpc
import pytest

from openengine.engine import ConfigError, EngineConfig, ModelConfig, ReferenceBackend, check, config_from_mapping
from openengine.engine import serve_config
from openengine.serve import CannotServe, Server
from openengine.v1 import admin_pb2, lora_pb2, model_pb2, tasks_pb2
from openengine.v1 import generation_pb2 as g

from tests.engine.conftest import AUTH

CHAT = ModelConfig(name="chat", max_context_tokens=2048, max_output_tokens=128,
                   profiles=("adapters",), limits={"adapters": {"max_lora_rank": 32, "max_loras": 1,
                                                                "max_cpu_loras": 2}})
EMBED = ModelConfig(name="embedder", max_context_tokens=512, max_output_tokens=16,
                    profiles=("tasks", "adapters"), limits={"tasks": {"supported_tasks": ["embed"]}})
TWO = (CHAT, EMBED)


@pytest.fixture(scope="module")
def two():
    from tests.engine.conftest import running

    with running(models=TWO) as pair:
        yield pair


def _info(stubs, model):
    return stubs.control.GetModelInfo(model_pb2.GetModelInfoRequest(model=model))


def _model_caps(stubs, model):
    return next(m for m in stubs.caps().models if m.model == model)


def _profiles(caps):
    return {p.name for p in caps.profiles}


def _server(config: EngineConfig) -> Server:
    return Server(ReferenceBackend(check(config)), serve_config(config))


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def test_server_info_lists_every_model(two):
    _, stubs = two
    assert list(stubs.info().supported_models) == ["chat", "embedder"]
    assert stubs.model("chat").served_model_name == "chat"


def test_model_info_and_model_capabilities_per_model(two):
    _, stubs = two
    chat, embed = _info(stubs, "chat"), _info(stubs, "embedder")
    assert (chat.max_context_length, chat.max_output_tokens) == (2048, 128)
    assert (embed.max_context_length, embed.max_output_tokens) == (512, 16)
    chat, embed = _model_caps(stubs, "chat"), _model_caps(stubs, "embedder")
    assert _profiles(chat) == {"openengine.adapters"}
    assert _profiles(embed) == {"openengine.tasks", "openengine.adapters"}
    # REQ-CAP-012: the capability message only for the models that list the profile.
    assert not chat.HasField("tasks")
    assert chat.adapters.max_lora_rank == 32 and embed.adapters.max_lora_rank == 64
    assert len(embed.tasks.supported_tasks) == 1
    assert _code(lambda: _info(stubs, "no-such-model")) == grpc.StatusCode.NOT_FOUND


def test_capabilities_pass_the_generated_validators(two):
    from openengine.validate import validate_capabilities

    _, stubs = two
    infos = [_info(stubs, m) for m in stubs.info().supported_models]
    report = validate_capabilities(stubs.caps(), server_info=stubs.info(), model_infos=infos)
    assert not report.errors, report.errors
    advertised = {p.name for p in stubs.caps().profiles}
    assert {"openengine.tasks", "openengine.adapters"} <= advertised


def test_task_rpc_only_for_the_model_that_lists_tasks(two):
    _, stubs = two
    inputs = [tasks_pb2.TaskInput(text="hello")]
    done = stubs.tasks.Embed(tasks_pb2.EmbedRequest(model="embedder", inputs=inputs))
    assert len(done.embeddings) == 1
    # REQ-TASKS-001: a model without openengine.tasks, and a family the model does not list.
    assert _code(lambda: stubs.tasks.Embed(tasks_pb2.EmbedRequest(model="chat", inputs=inputs))) \
        == grpc.StatusCode.INVALID_ARGUMENT
    assert _code(lambda: stubs.tasks.Embed(tasks_pb2.EmbedRequest(inputs=inputs))) == grpc.StatusCode.INVALID_ARGUMENT
    assert _code(lambda: stubs.tasks.Classify(tasks_pb2.ClassifyRequest(model="embedder", inputs=inputs))) \
        == grpc.StatusCode.INVALID_ARGUMENT
    assert _code(lambda: stubs.tasks.Embed(tasks_pb2.EmbedRequest(model="other", inputs=inputs))) \
        == grpc.StatusCode.NOT_FOUND


def test_generate_routes_by_model_and_uses_its_limits(two):
    _, stubs = two

    def generate(model, max_tokens):
        req = g.GenerateRequest(model=model, prompt="hi", stopping=g.StoppingOptions(max_tokens=max_tokens))
        return list(stubs.inference.Generate(req))

    assert generate("embedder", 16)[-1].HasField("finished")
    assert generate("", 100)[-1].HasField("finished")  # the default model allows 128
    assert _code(lambda: generate("embedder", 17)) == grpc.StatusCode.INVALID_ARGUMENT
    assert _code(lambda: generate("no-such-model", 4)) == grpc.StatusCode.NOT_FOUND


def test_an_adapter_serves_the_models_that_list_adapters(start):
    _, stubs = start(profiles=("adapters",), models=(CHAT, ModelConfig(name="plain", profiles=())))
    adapter = lora_pb2.LoraAdapter(lora_id=1, lora_name="sql", source_path="/adapters/sql")
    stubs.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=adapter))
    req = g.GenerateRequest(model="chat", lora_name="sql", prompt="hi", stopping=g.StoppingOptions(max_tokens=2))
    assert list(stubs.inference.Generate(req))[-1].HasField("finished")
    req.model = "plain"
    assert _code(lambda: list(stubs.inference.Generate(req))) == grpc.StatusCode.INVALID_ARGUMENT


def test_update_config_for_one_model_changes_only_that_model(start):
    _, stubs = start(models=TWO)
    update = admin_pb2.UpdateConfigRequest(updates=[admin_pb2.LimitUpdate(
        limit="openengine.adapters.max_loras", model="embedder", uint_value=1)])
    resp = stubs.admin.UpdateConfig(update, metadata=AUTH)
    assert resp.changed_limits == ["openengine.adapters.max_loras"]
    assert _model_caps(stubs, "embedder").adapters.max_loras == 1
    assert _model_caps(stubs, "chat").adapters.max_loras == 1    # its own value
    # An empty model means every model, including one that set its own value.
    update.updates[0].model, update.updates[0].uint_value = "", 3
    stubs.admin.UpdateConfig(update, metadata=AUTH)
    assert {_model_caps(stubs, m).adapters.max_loras for m in ("chat", "embedder")} == {3}
    update.updates[0].limit, update.updates[0].model = "openengine.tasks.max_inputs_per_request", "chat"
    assert _code(lambda: stubs.admin.UpdateConfig(update, metadata=AUTH, timeout=5)) \
        == grpc.StatusCode.INVALID_ARGUMENT


def test_a_model_scoped_profile_no_model_lists_is_not_advertised():
    config = EngineConfig(profiles=("load",), models=(ModelConfig(name="a", profiles=()),))
    names = {p.name for p in _server(config).state.advertised}
    assert "openengine.tasks" not in names and "openengine.adapters" not in names


def test_models_from_a_configuration_mapping():
    config = config_from_mapping({"models": [
        {"name": "chat", "max_context_tokens": 2048, "max_output_tokens": 128, "profiles": ["adapters"],
         "limits": {"adapters": {"max_lora_rank": 32}}},
        {"name": "embedder", "profiles": "tasks"},
    ]})
    assert [m.name for m in config.served_models] == ["chat", "embedder"]
    assert config.served_models[0].limits == {"adapters": {"max_lora_rank": 32}}
    assert config.served_models[1].profiles == ("tasks",)
    assert {"openengine.tasks", "openengine.adapters"} <= {p.name for p in _server(config).state.advertised}


@pytest.mark.parametrize("models, fragment", [
    ([{"name": "a", "profiles": ["load"]}], "not a model-scoped profile"),
    ([{"name": "a", "limits": {"adapters": {"no_such_limit": 1}}}], "no limit"),
])
def test_bad_models_are_refused_by_the_sdk(models, fragment):
    with pytest.raises(CannotServe) as err:
        _server(config_from_mapping({"models": models}))
    assert any(fragment in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("models, fragment", [
    ([{"name": "a"}, {"name": "a"}], "twice"),
    ([{"name": "a", "max_context_tokens": 8, "max_output_tokens": 9}], "max_output_tokens"),
])
def test_bad_models_are_refused_by_the_engine(models, fragment):
    with pytest.raises(ConfigError) as err:
        check(config_from_mapping({"models": models}))
    assert any(fragment in p for p in err.value.problems)


def test_model_and_models_together_are_refused():
    with pytest.raises(ConfigError):
        config_from_mapping({"model": {"name": "a"}, "models": [{"name": "b"}]})
    with pytest.raises(ConfigError):
        config_from_mapping({"models": []})
