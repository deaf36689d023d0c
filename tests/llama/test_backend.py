"""The llama backend served by the SDK, read through a gRPC client: what it advertises, what it
refuses, and that a request through OpenEngine gets the tokens llama.cpp gives when called
directly, even beside requests that are cancelled."""

from __future__ import annotations

import grpc
import pytest

from openengine.llama.llama_backend import LlamaBackend, LlamaConfig
from openengine.serve import RunningServer, ServeConfig
from openengine.v1 import (
    control_service_pb2_grpc, discovery_pb2, discovery_service_pb2_grpc, generation_pb2,
    inference_service_pb2_grpc, model_pb2, server_pb2,
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


def generate(channel, prompt, *, stop=(), logprobs=None, **options):
    """Generate with upstream's request: `options` go to the sampling or stopping group by name,
    `stop` are stop texts, `logprobs` the output candidates asked for."""
    request = generation_pb2.GenerateRequest(prompt=prompt)
    for key, value in options.items():
        group = request.stopping if key in generation_pb2.StoppingOptions.DESCRIPTOR.fields_by_name \
            else request.sampling
        setattr(group, key, value)
    for text in stop:
        request.stopping.conditions.add(stop_text=text)
    if logprobs is not None:
        request.response.return_output_logprobs = True
        request.response.output_candidates.top_n = logprobs
    return inference_service_pb2_grpc.InferenceStub(channel).Generate(request, timeout=60)


def tokens_of(responses) -> list[int]:
    return [t.token_id for r in responses if r.HasField("token") for t in r.token.tokens]


def finished(responses):
    ends = [r for r in responses if r.HasField("finished")]
    assert len(ends) == 1 and responses[-1] is ends[0], "exactly one GenerationFinished, last"
    return ends[0]


def test_it_advertises_what_the_model_file_and_configuration_say(channel, tiny_model):
    caps = discovery_service_pb2_grpc.DiscoveryStub(channel).GetCapabilities(discovery_pb2.GetCapabilitiesRequest())
    assert sorted(p.name for p in caps.profiles) == ["openengine.admin", "openengine.core", "openengine.load"]
    assert list(caps.admin.pause_modes) == [1, 2, 3] and caps.admin.max_sleep_level == 1
    assert not caps.admin.updatable_limits
    assert caps.core.max_running_requests == MAX_RUNNING
    assert caps.core.max_logprobs == 5 and caps.core.output_logprobs
    assert caps.core.min_p and not caps.core.prompt_logprobs
    assert not caps.core.guided_decoding_modes
    control = control_service_pb2_grpc.ControlStub(channel)
    info = control.GetModelInfo(model_pb2.GetModelInfoRequest(model="openengine-tiny"))
    assert (info.max_context_length, info.max_output_tokens) == (512, 256)
    assert (info.vocab_size, info.eos_token_id) == (tiny_model.facts.vocab_size, 2)
    server = control.GetServerInfo(server_pb2.GetServerInfoRequest())
    assert list(server.supported_models) == ["openengine-tiny"] and server.engine_name == "llama.cpp"


def test_a_greedy_request_through_openengine_gets_llama_cpps_tokens(channel, tiny_model, direct):
    responses = list(generate(channel, PROMPTS[0], temperature=0.0, max_tokens=48, ignore_eos=True))
    end = finished(responses)
    assert tokens_of(responses) == direct(tiny_model.tokenize(PROMPTS[0]), 48)
    assert end.finished.reason == generation_pb2.FINISH_REASON_LENGTH and end.finished.output_index == 0
    prompt = len(tiny_model.tokenize(PROMPTS[0]))
    assert (end.usage.prompt_tokens, end.usage.completion_tokens, end.usage.total_tokens) == (prompt, 48, prompt + 48)
    assert all(not r.HasField("usage") for r in responses[:-1])


def test_a_stop_text_ends_the_output_and_is_reported(channel):
    free = list(generate(channel, PROMPTS[3], temperature=0.0, max_tokens=40, ignore_eos=True))
    text = "".join(r.token.text for r in free if r.HasField("token"))
    stop = text[len(text) // 2:][:3]
    assert stop.strip()
    stopped = list(generate(channel, PROMPTS[3], temperature=0.0, max_tokens=40, ignore_eos=True, stop=[stop]))
    end = finished(stopped).finished
    assert (end.reason, end.stop_match.stop_text) == (generation_pb2.FINISH_REASON_STOP, stop)
    assert "".join(r.token.text for r in stopped if r.HasField("token")) == text[:text.index(stop)]


def test_a_seeded_request_through_openengine_gets_llama_cpps_tokens(channel, tiny_model, direct):
    responses = list(generate(channel, PROMPTS[1], temperature=0.8, top_k=40, top_p=0.9, seed=7,
                              max_tokens=32, ignore_eos=True))
    assert tokens_of(responses) == direct(tiny_model.tokenize(PROMPTS[1]), 32, seed=7,
                                                 temp=0.8, top_k=40, top_p=0.9)


def test_cancelling_one_of_several_requests_leaves_the_others_tokens_unchanged(channel, tiny_model, direct):
    calls = [generate(channel, prompt, temperature=0.0, max_tokens=200, ignore_eos=True)
             for prompt in PROMPTS[:MAX_RUNNING]]
    first = next(calls[1])
    assert first.HasField("token")
    calls[1].cancel()
    for k in (0, 2):
        assert tokens_of(list(calls[k])) == direct(tiny_model.tokenize(PROMPTS[k]), 200)
    load = control_service_pb2_grpc.ControlStub(channel).GetLoad(server_pb2.GetLoadRequest())
    assert (load.running_requests, load.queued_requests, load.used_kv_blocks) == (0, 0, 0)
    assert load.total_kv_blocks == 512 * MAX_RUNNING


def test_abort_ends_a_running_request_cancelled_with_its_usage(channel):
    from openengine.v1 import lifecycle_pb2

    request = generation_pb2.GenerateRequest(request_id="llama-abort", prompt=PROMPTS[0])
    request.stopping.max_tokens, request.stopping.ignore_eos = 250, True
    call = inference_service_pb2_grpc.InferenceStub(channel).Generate(request, timeout=60)
    assert next(call).HasField("token")
    control = control_service_pb2_grpc.ControlStub(channel)
    answer = control.Abort(lifecycle_pb2.AbortRequest(request_id="llama-abort"), timeout=10)
    assert answer.status == lifecycle_pb2.ABORT_STATUS_ABORTED
    rest = list(call)
    end = finished(rest)
    assert end.request_id == "llama-abort" and end.finished.reason == generation_pb2.FINISH_REASON_CANCELLED
    assert 0 < end.usage.completion_tokens < 250
    with pytest.raises(grpc.RpcError) as unknown:
        control.Abort(lifecycle_pb2.AbortRequest(request_id="never-sent"), timeout=10)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_logprobs_and_text_reach_the_client(channel):
    responses = list(generate(channel, PROMPTS[2], temperature=0.0, max_tokens=6, logprobs=2, ignore_eos=True))
    infos = [t for r in responses if r.HasField("token") for t in r.token.tokens]
    assert len(infos) == 6 and all(t.HasField("logprob") for t in infos)
    assert all(t.rank == 1 and len(t.candidates) == 2 and t.candidates[0].token_id == t.token_id for t in infos)
    skipped = list(generate(channel, PROMPTS[2], temperature=0.0, max_tokens=6, ignore_eos=True))
    assert tokens_of(skipped) == tokens_of(responses)


@pytest.mark.parametrize(("prompt", "sampling", "says"), [
    ("hello" * 300, {"max_tokens": 256},   # the beginning-of-sequence token and 300 words
     "stopping.max_tokens: the prompt's 301 tokens plus 256 exceed ModelInfo.max_context_length = 512"),
    (PROMPTS[0], {"max_tokens": 4, "min_tokens": 5}, "stopping.min_tokens: 5 exceeds max_tokens 4"),
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
    assert "leave no room in the context (ModelInfo.max_context_length = 512)" in refused.value.details()
