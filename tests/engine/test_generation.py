"""Generate, Abort and the scheduler behind them."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from openengine.v1 import common_pb2, generation_pb2, kv_pb2, lifecycle_pb2, load_pb2

from tests.engine.conftest import running



def generate(stubs, text="hello", **sampling):
    req = generation_pb2.GenerateRequest(text=text, sampling=generation_pb2.SamplingParams(**sampling))
    return list(stubs.inference.Generate(req, timeout=20))


def outputs(messages):
    """index -> (token ids, final)"""
    out = {}
    for m in messages:
        kind = m.WhichOneof("kind")
        body = getattr(m, kind)
        if kind == "error":
            out["error"] = body
            continue
        ids, final = out.setdefault(body.index, ([], None))
        ids.extend(body.token_ids)
        if kind == "final":
            out[body.index] = (ids, body)
    return out


def test_streams_chunks_then_a_final_with_usage(shared):
    _, stubs = shared
    messages = generate(stubs, max_tokens=8)
    assert [m.WhichOneof("kind") for m in messages][-1] == "final"
    assert any(m.WhichOneof("kind") == "chunk" for m in messages)
    ids, final = outputs(messages)[0]
    assert len(ids) == 8
    assert final.finish_reason == generation_pb2.FINISH_REASON_LENGTH
    assert final.usage.prompt_tokens == len(b"hello") and final.usage.completion_tokens == 8


def test_output_is_a_pure_function_of_prompt_and_seed(shared):
    _, stubs = shared
    a = outputs(generate(stubs, "abc", max_tokens=10, seed=7, temperature=0.8))[0][0]
    b = outputs(generate(stubs, "abc", max_tokens=10, seed=7, temperature=0.8))[0][0]
    c = outputs(generate(stubs, "abc", max_tokens=10, seed=8, temperature=0.8))[0][0]
    d = outputs(generate(stubs, "abd", max_tokens=10, seed=7, temperature=0.8))[0][0]
    assert a == b
    assert a != c and a != d


def test_n_sequences_and_stop_strings(shared):
    _, stubs = shared
    out = outputs(generate(stubs, "xyz", max_tokens=30, n=3, seed=1, temperature=1.0))
    assert set(out) == {0, 1, 2}
    text = bytes(out[0][0]).decode()
    stop = text[10:12]
    stopped = outputs(generate(stubs, "xyz", max_tokens=30, seed=1, temperature=1.0, stop=[stop]))[0]
    assert stopped[1].finish_reason == generation_pb2.FINISH_REASON_STOP and stopped[1].stop_reason == stop
    assert bytes(stopped[0]).decode() == text[:text.index(stop)]
    kept = outputs(generate(stubs, "xyz", max_tokens=30, seed=1, temperature=1.0, stop=[stop],
                            include_stop_in_output=True))[0]
    assert bytes(kept[0]).decode() == text[:text.index(stop) + len(stop)]


def test_guided_choice_and_logprobs(shared):
    _, stubs = shared
    out = outputs(generate(stubs, "pick", max_tokens=20, guided=generation_pb2.GuidedDecoding(
        choice=common_pb2.StringList(values=["alpha", "beta"]))))[0]
    assert bytes(out[0]).decode() in ("alpha", "beta") and out[1].finish_reason == generation_pb2.FINISH_REASON_STOP
    messages = generate(stubs, max_tokens=3, logprobs=2)
    chunk = next(m.chunk for m in messages if m.WhichOneof("kind") == "chunk")
    assert len(chunk.logprobs[0].top) == 2


@pytest.mark.parametrize("sampling, field", [
    (dict(n=5), "sampling.n"),
    (dict(logprobs=6), "sampling.logprobs"),
    (dict(max_tokens=100000), "sampling.max_tokens"),
    (dict(guided=generation_pb2.GuidedDecoding(regex="a+")), "sampling.guided"),
])
def test_requests_beyond_advertised_limits_are_invalid_argument(shared, sampling, field):
    _, stubs = shared
    with pytest.raises(grpc.RpcError) as err:
        generate(stubs, **sampling)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field)


def test_features_of_unadvertised_profiles_are_refused():
    with running(profiles=("core",)) as (_, stubs):
        for req, field in [
            (generation_pb2.GenerateRequest(text="a", adapter="x"), "adapter"),
            (generation_pb2.GenerateRequest(text="a", session_id="s"), "session_id"),
            (generation_pb2.GenerateRequest(text="a", kv_transfer=kv_pb2.KvTransferParams(role=1)), "kv_transfer"),
        ]:
            with pytest.raises(grpc.RpcError) as err:
                list(stubs.inference.Generate(req, timeout=5))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith(field)


def _start_stream(stubs, request_id, **kw):
    call = stubs.inference.Generate(generation_pb2.GenerateRequest(
        request_id=request_id, text="long", sampling=generation_pb2.SamplingParams(max_tokens=200), **kw), timeout=30)
    return call


def _wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_abort_by_id_ends_the_stream_with_the_terminal_error():
    with running(profiles=("load",)) as (engine, stubs):
        call = _start_stream(stubs, "r1")
        next(call)
        res = stubs.lifecycle.Abort(lifecycle_pb2.AbortRequest(request_ids=common_pb2.StringList(values=["r1", "nope"])))
        assert res.aborted == 1
        rest = list(call)
        assert rest[-1].WhichOneof("kind") == "error"
        assert rest[-1].error.code == common_pb2.ERROR_CODE_ABORTED
        assert call.code() == grpc.StatusCode.OK


def test_abort_all_and_by_kv_session():
    with running(role="decode", profiles=("kv", "load"),
                 limits={"core": {"max_running_requests": 1}}) as (engine, stubs):
        a = _start_stream(stubs, "a")
        next(a)
        b = _start_stream(stubs, "b", kv_transfer=kv_pb2.KvTransferParams(
            role=kv_pb2.KV_TRANSFER_ROLE_CONSUMER, session_id="kv-1"))
        assert _wait(lambda: stubs.observability.GetLoad(load_pb2.GetLoadRequest()).queued_requests == 1)
        assert stubs.lifecycle.Abort(lifecycle_pb2.AbortRequest(kv_session_id="kv-1")).aborted == 1
        assert list(b)[-1].error.code == common_pb2.ERROR_CODE_ABORTED
        assert stubs.lifecycle.Abort(lifecycle_pb2.AbortRequest(all=True)).aborted == 1
        assert list(a)[-1].error.code == common_pb2.ERROR_CODE_ABORTED
        with pytest.raises(grpc.RpcError) as err:
            stubs.lifecycle.Abort(lifecycle_pb2.AbortRequest())
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_prefill_producer_returns_kv_transfer_params():
    with running(role="prefill", profiles=("kv",)) as (engine, stubs):
        messages = list(stubs.inference.Generate(generation_pb2.GenerateRequest(
            text="prompt text", kv_transfer=kv_pb2.KvTransferParams(role=kv_pb2.KV_TRANSFER_ROLE_PRODUCER,
                                                                    session_id="s", backend="nixl")), timeout=10))
        final = messages[-1].final
        assert final.usage.completion_tokens == 1
        assert final.kv_transfer.remote_engine_id == engine.state.instance_id
        assert final.kv_transfer.transfer_handle and final.kv_transfer.backend == "nixl"


def test_load_follows_real_running_and_queued_requests_and_cancellation_frees_them():
    with running(profiles=("load",), limits={"core": {"max_running_requests": 2}}) as (engine, stubs):
        calls = [_start_stream(stubs, f"q{i}") for i in range(5)]
        get = lambda: stubs.observability.GetLoad(load_pb2.GetLoadRequest())  # noqa: E731
        assert _wait(lambda: (get().running_requests, get().queued_requests) == (2, 3))
        assert get().waiting_tokens == 3 * len(b"long")
        for call in calls:
            call.cancel()
        assert _wait(lambda: (get().running_requests, get().queued_requests) == (0, 0))
        assert engine.call(lambda: len(engine.backend.scheduler.in_flight())) == 0


def test_prefix_cache_reports_cached_prompt_tokens(shared):
    _, stubs = shared
    prompt = "0123456789abcdef" * 3
    generate(stubs, prompt, max_tokens=2)
    again = outputs(generate(stubs, prompt, max_tokens=2))[0][1]
    assert again.usage.cached_prompt_tokens == 48
    bypass = outputs(list(stubs.inference.Generate(generation_pb2.GenerateRequest(
        text=prompt, bypass_prefix_cache=True, sampling=generation_pb2.SamplingParams(max_tokens=2)))))[0][1]
    assert bypass.usage.cached_prompt_tokens == 0
