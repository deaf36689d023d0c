"""The llama backend served by the SDK, read through a gRPC client: what it advertises, what it
refuses, and that a request through OpenEngine gets the tokens llama.cpp gives when called
directly, even beside requests that are cancelled."""

from __future__ import annotations

import grpc
import pytest

from openengine.llama.backend import LlamaBackend, LlamaConfig
from openengine.serve import RunningServer, ServeConfig
from openengine.v1 import (
    discovery_pb2, discovery_service_pb2_grpc, generation_pb2, inference_service_pb2_grpc, load_pb2,
    observability_service_pb2_grpc,
)

PROMPTS = ["hello engine", "the model says", "open stream of tokens", "conformance request"]
MAX_RUNNING = 3


@pytest.fixture(scope="module")
def served(tiny_model_path):
    backends = []

    def make():
        backend = LlamaBackend(LlamaConfig(model_path=str(tiny_model_path), max_running_requests=MAX_RUNNING,
                                           threads=1, max_logprobs=5))
        backends.append(backend)
        return backend
    with RunningServer(make, ServeConfig(port=0)) as server:
        yield server
    backends[0].close()


@pytest.fixture
def channel(served):
    with grpc.insecure_channel(served.address) as channel:
        yield channel


def generate(channel, prompt, **sampling):
    stub = inference_service_pb2_grpc.InferenceStub(channel)
    return stub.Generate(generation_pb2.GenerateRequest(
        text=prompt, sampling=generation_pb2.SamplingParams(**sampling)), timeout=60)


def tokens_of(responses) -> list[int]:
    return [t for r in responses for t in (r.chunk.token_ids if r.HasField("chunk") else r.final.token_ids)]


def test_it_advertises_what_the_model_file_and_configuration_say(channel, tiny_model):
    stub = discovery_service_pb2_grpc.DiscoveryStub(channel)
    caps = stub.GetCapabilities(discovery_pb2.GetCapabilitiesRequest())
    assert sorted(p.name for p in caps.profiles) == ["openengine.admin", "openengine.core", "openengine.load"]
    assert list(caps.admin.pause_modes) == [1, 2, 3] and caps.admin.max_sleep_level == 1
    assert not caps.admin.updatable_limits
    assert caps.generation.max_running_requests == MAX_RUNNING
    assert caps.generation.max_logprobs == 5
    assert caps.generation.min_p and caps.generation.logit_bias and not caps.generation.prompt_logprobs
    assert not caps.generation.guided_decoding_modes
    info = stub.GetModelInfo(discovery_pb2.GetModelInfoRequest(model="openengine-tiny"))
    assert (info.max_context_tokens, info.max_output_tokens) == (512, 256)
    assert info.tokenizer.vocab_size == tiny_model.facts.vocab_size
    assert (info.tokenizer.eos_token_id, info.tokenizer.bos_token_id) == (2, 1)
    engine = stub.GetEngineInfo(discovery_pb2.GetEngineInfoRequest())
    assert engine.served_models == ["openengine-tiny"] and engine.engine_name == "llama.cpp"


def test_a_greedy_request_through_openengine_gets_llama_cpps_tokens(channel, tiny_model, direct):
    responses = list(generate(channel, PROMPTS[0], temperature=0.0, max_tokens=48, ignore_eos=True))
    final = responses[-1].final
    assert tokens_of(responses) == direct(tiny_model.tokenize(PROMPTS[0]), 48)
    assert final.finish_reason == generation_pb2.FINISH_REASON_LENGTH
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (len(tiny_model.tokenize(PROMPTS[0])), 48)


def test_a_seeded_request_through_openengine_gets_llama_cpps_tokens(channel, tiny_model, direct):
    responses = list(generate(channel, PROMPTS[1], temperature=0.8, top_k=40, top_p=0.9, seed=7,
                              max_tokens=32, ignore_eos=True))
    assert tokens_of(responses) == direct(tiny_model.tokenize(PROMPTS[1]), 32, seed=7,
                                                 temp=0.8, top_k=40, top_p=0.9)


def test_cancelling_one_of_several_requests_leaves_the_others_tokens_unchanged(channel, tiny_model, direct):
    calls = [generate(channel, prompt, temperature=0.0, max_tokens=200, ignore_eos=True)
             for prompt in PROMPTS[:MAX_RUNNING]]
    first = next(calls[1])
    assert first.HasField("chunk")
    calls[1].cancel()
    for k in (0, 2):
        assert tokens_of(list(calls[k])) == direct(tiny_model.tokenize(PROMPTS[k]), 200)
    load = observability_service_pb2_grpc.ObservabilityStub(channel).GetLoad(load_pb2.GetLoadRequest())
    assert (load.running_requests, load.queued_requests, load.used_kv_blocks) == (0, 0, 0)
    assert load.total_kv_blocks == 512 * MAX_RUNNING


def test_logprobs_and_text_reach_the_client(channel):
    responses = list(generate(channel, PROMPTS[2], temperature=0.0, max_tokens=6, logprobs=2, ignore_eos=True))
    logprobs = [lp for r in responses for lp in (r.chunk.logprobs if r.HasField("chunk") else r.final.logprobs)]
    assert [lp.token_id for lp in logprobs] == tokens_of(responses)
    assert all(lp.rank == 1 and len(lp.top) == 2 and lp.top[0].token_id == lp.token_id for lp in logprobs)
    skipped = list(generate(channel, PROMPTS[2], temperature=0.0, max_tokens=6, ignore_eos=True))
    assert tokens_of(skipped) == tokens_of(responses)


@pytest.mark.parametrize(("prompt", "sampling", "says"), [
    ("hello" * 300, {"max_tokens": 256},   # the beginning-of-sequence token and 300 words
     "sampling.max_tokens: the prompt's 301 tokens plus 256 exceed ModelInfo.max_context_tokens = 512"),
    (PROMPTS[0], {"max_tokens": 4, "min_tokens": 5}, "sampling.min_tokens: 5 exceeds max_tokens 4"),
    (PROMPTS[0], {"seed": 2 ** 32}, "sampling.seed: 4294967296 is above 4294967294"),
], ids=["context", "min-tokens", "seed"])
def test_what_only_the_engine_knows_is_refused_before_any_message(channel, prompt, sampling, says):
    with pytest.raises(grpc.RpcError) as refused:
        list(generate(channel, prompt, **sampling))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in refused.value.details()


def test_a_prompt_that_fills_the_context_is_refused(channel):
    with pytest.raises(grpc.RpcError) as refused:
        list(generate(channel, "hello " * 600, max_tokens=1))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "leave no room in the context (ModelInfo.max_context_tokens = 512)" in refused.value.details()
