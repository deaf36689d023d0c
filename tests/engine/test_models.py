"""Several served models: per-model ModelInfo and model-scoped profiles (REQ-CAP-012, REQ-CAP-013,
REQ-TASKS-001), routing by `model`, per-model adapter limits, and the `models:` configuration."""

from __future__ import annotations

import grpc
import pytest

from openengine.engine import ConfigError, EngineConfig, ModelConfig, config_from_mapping, resolve_config
from openengine.v1 import (
    adapters_pb2, admin_pb2, discovery_pb2, generation_pb2, tasks_pb2,
)

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
    return stubs.discovery.GetModelInfo(discovery_pb2.GetModelInfoRequest(model=model))


def _profiles(info):
    return {p.name for p in info.capabilities.profiles}


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def test_engine_info_lists_every_model_and_the_first_is_the_default(two):
    _, stubs = two
    assert list(stubs.info().served_models) == ["chat", "embedder"]
    assert stubs.model().model == "chat"


def test_model_info_per_model(two):
    _, stubs = two
    chat, embed = _info(stubs, "chat"), _info(stubs, "embedder")
    assert (chat.max_context_tokens, chat.max_output_tokens) == (2048, 128)
    assert (embed.max_context_tokens, embed.max_output_tokens) == (512, 16)
    assert _profiles(chat) == {"openengine.adapters"}
    assert _profiles(embed) == {"openengine.tasks", "openengine.adapters"}
    # REQ-CAP-012: the capability message only for the models that list the profile.
    assert not chat.capabilities.HasField("tasks")
    assert chat.capabilities.adapters.max_lora_rank == 32
    assert embed.capabilities.adapters.max_lora_rank == stubs.caps().adapters.max_lora_rank == 64
    assert len(embed.capabilities.tasks.supported_tasks) == 1
    assert _code(lambda: _info(stubs, "no-such-model")) == grpc.StatusCode.NOT_FOUND


def test_capabilities_pass_the_generated_validators(two):
    from openengine.validate import validate_capabilities

    _, stubs = two
    infos = [_info(stubs, m) for m in stubs.info().served_models]
    report = validate_capabilities(stubs.caps(), engine_info=stubs.info(), model_infos=infos)
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
        req = generation_pb2.GenerateRequest(model=model, text="hi",
                                             sampling=generation_pb2.SamplingParams(max_tokens=max_tokens))
        return list(stubs.inference.Generate(req))

    assert generate("embedder", 16)[-1].HasField("final")
    assert generate("", 100)[-1].HasField("final")  # the default model allows 128
    assert _code(lambda: generate("embedder", 17)) == grpc.StatusCode.INVALID_ARGUMENT
    assert _code(lambda: generate("no-such-model", 4)) == grpc.StatusCode.NOT_FOUND


def test_adapter_limits_are_per_model(start):
    _, stubs = start(models=TWO)

    def load(name, model, rank=1):
        return stubs.adapters.LoadAdapter(adapters_pb2.LoadAdapterRequest(
            name=name, model=model, source=f"test://{name}", rank=rank))

    assert _code(lambda: load("big", "chat", rank=33)) == grpc.StatusCode.INVALID_ARGUMENT
    assert load("big", "embedder", rank=33).adapter.model == "embedder"
    assert load("a1", "chat").adapter.model == "chat"
    assert load("a2", "chat").adapter.model == "chat"
    # chat holds max(max_loras, max_cpu_loras) = 2; the embedder's adapters do not count.
    assert _code(lambda: load("a3", "chat")) == grpc.StatusCode.RESOURCE_EXHAUSTED
    listed = stubs.adapters.ListAdapters(adapters_pb2.ListAdaptersRequest(model="chat"))
    assert sorted(a.name for a in listed.adapters) == ["a1", "a2"]
    assert sum(a.resident for a in listed.adapters) == 1  # chat's max_loras = 1
    # An adapter serves only the model it was loaded for.
    req = generation_pb2.GenerateRequest(model="chat", adapter="big", text="hi",
                                         sampling=generation_pb2.SamplingParams(max_tokens=2))
    assert _code(lambda: list(stubs.inference.Generate(req))) == grpc.StatusCode.INVALID_ARGUMENT
    req.model = "embedder"
    assert list(stubs.inference.Generate(req))[-1].HasField("final")


def test_update_config_for_one_model_changes_only_that_model(start):
    _, stubs = start(models=TWO)
    update = admin_pb2.UpdateConfigRequest(updates=[admin_pb2.LimitUpdate(
        limit="openengine.adapters.max_loras", model="embedder", uint_value=1)])
    resp = stubs.admin.UpdateConfig(update, metadata=AUTH)
    assert resp.changed_limits == ["openengine.adapters.max_loras"]
    assert _info(stubs, "embedder").capabilities.adapters.max_loras == 1
    assert stubs.caps().adapters.max_loras == 2
    # An empty model means every model, including one that set its own value.
    update.updates[0].model, update.updates[0].uint_value = "", 3
    stubs.admin.UpdateConfig(update, metadata=AUTH)
    assert {_info(stubs, m).capabilities.adapters.max_loras for m in ("chat", "embedder")} == {3}
    update.updates[0].limit, update.updates[0].model = "openengine.tasks.max_inputs_per_request", "chat"
    assert _code(lambda: stubs.admin.UpdateConfig(update, metadata=AUTH, timeout=5)) \
        == grpc.StatusCode.INVALID_ARGUMENT


def test_a_model_scoped_profile_no_model_lists_is_not_advertised():
    resolved = resolve_config(EngineConfig(models=(ModelConfig(name="a", profiles=()),)))
    names = {p.name for p in resolved.advertised}
    assert "openengine.tasks" not in names and "openengine.adapters" not in names
    assert resolved.models[0].profiles == ()


def test_single_model_form_still_lists_every_model_scoped_profile():
    resolved = resolve_config(EngineConfig())
    assert [m.name for m in resolved.models] == ["reference-byte-model"]
    assert set(resolved.models[0].profiles) == {"openengine.tasks", "openengine.adapters"}


def test_models_from_a_configuration_mapping():
    config = config_from_mapping({"models": [
        {"name": "chat", "max_context_tokens": 2048, "max_output_tokens": 128, "profiles": ["adapters"],
         "limits": {"adapters": {"max_lora_rank": 32}}},
        {"name": "embedder", "profiles": "tasks"},
    ]})
    assert [m.name for m in config.served_models] == ["chat", "embedder"]
    resolved = resolve_config(config)
    assert resolved.models[0].overrides == {"openengine.adapters": {"max_lora_rank": 32}}
    assert resolved.models[1].profiles == ("openengine.tasks",)


@pytest.mark.parametrize("models, fragment", [
    ([{"name": "a", "profiles": ["load"]}], "not model-scoped"),
    ([{"name": "a", "profiles": ["adapters"], "limits": {"tasks": {"embedding_size": 8}}}], "does not list"),
    ([{"name": "a", "limits": {"adapters": {"no_such_limit": 1}}}], "no limit"),
    ([{"name": "a"}, {"name": "a"}], "twice"),
    ([{"name": "a", "max_context_tokens": 8, "max_output_tokens": 9}], "max_output_tokens"),
])
def test_bad_models_are_refused(models, fragment):
    with pytest.raises(ConfigError) as err:
        resolve_config(config_from_mapping({"models": models}))
    assert any(fragment in p for p in err.value.problems)


def test_model_and_models_together_are_refused():
    with pytest.raises(ConfigError):
        config_from_mapping({"model": {"name": "a"}, "models": [{"name": "b"}]})
    with pytest.raises(ConfigError):
        config_from_mapping({"models": []})
