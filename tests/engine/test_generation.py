"""Generate, Abort and the scheduler behind them, over the wire with upstream's messages."""

from __future__ import annotations

import time

import grpc
import pytest

from openengine.v1 import generation_pb2 as g
from openengine.v1 import lifecycle_pb2, server_pb2

from tests.engine.conftest import running


def generate(stubs, prompt="hello", request_id="", **fields):
    return list(stubs.inference.Generate(g.GenerateRequest(request_id=request_id, prompt=prompt, **fields), timeout=20))


def outputs(responses):
    """output_index -> (token ids, text, GenerationFinished)."""
    out: dict[int, tuple[list[int], str, object]] = {}
    for r in responses:
        kind = r.WhichOneof("event")
        if kind == "token":
            ids, text, done = out.get(r.token.output_index, ([], "", None))
            out[r.token.output_index] = (ids + [t.token_id for t in r.token.tokens], text + r.token.text, done)
        elif kind == "finished":
            ids, text, _ = out.get(r.finished.output_index, ([], "", None))
            out[r.finished.output_index] = (ids, text, r.finished)
    return out


def test_a_stream_of_upstream_events_with_the_request_id_and_usage_once_at_the_end(shared):
    _, stubs = shared
    responses = generate(stubs, request_id="gen-1", stopping=g.StoppingOptions(max_tokens=8),
                         sampling=g.SamplingParams(num_sequences=2))
    assert {r.request_id for r in responses} == {"gen-1"}
    assert [r.HasField("usage") for r in responses] == [False] * (len(responses) - 1) + [True]
    out = outputs(responses)
    assert sorted(out) == [0, 1]
    for ids, text, finished in out.values():
        assert len(ids) == 8 and finished.reason == g.FINISH_REASON_LENGTH and text == bytes(ids).decode()
    usage = responses[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (5, 16, 21)


def test_stop_conditions_and_skip_detokenize(shared):
    _, stubs = shared
    free = outputs(generate(stubs, "xyz", stopping=g.StoppingOptions(max_tokens=40)))[0][1]
    stop = free[10:12]
    ids, text, finished = outputs(generate(stubs, "xyz", stopping=g.StoppingOptions(
        max_tokens=40, conditions=[g.StopCondition(stop_text=stop)])))[0]
    assert finished.reason == g.FINISH_REASON_STOP and finished.stop_match.stop_text == stop
    assert text == free[:free.index(stop)]
    token = ord(free[5])
    responses = generate(stubs, "xyz", stopping=g.StoppingOptions(max_tokens=40, conditions=[
        g.StopCondition(stop_token_id=token)]))
    ids, text, finished = outputs(responses)[0]
    # The stop token is kept out of the output and counted as generated.
    assert finished.stop_match.stop_token_id == token and token not in ids and text == free[:free.index(chr(token))]
    assert responses[-1].usage.completion_tokens == len(ids) + 1
    ids, text, _ = outputs(generate(stubs, "xyz", skip_detokenize=True, stopping=g.StoppingOptions(max_tokens=5)))[0]
    assert len(ids) == 5 and text == ""


@pytest.mark.parametrize("fields, field", [
    (dict(sampling=g.SamplingParams(num_sequences=5)), "sampling.num_sequences"),
    (dict(response=g.ResponseOptions(return_output_logprobs=True, output_candidates=g.CandidateTokenSelection(top_n=6))),
     "response.output_candidates"),
    (dict(stopping=g.StoppingOptions(max_tokens=100000)), "stopping.max_tokens"),
    (dict(guided=g.GuidedDecoding(regex="a+")), "guided"),
    (dict(kv=g.KvOptions(session={"session_id": "kv-1"})), "kv"),
])
def test_requests_beyond_what_is_advertised_are_invalid_argument(shared, fields, field):
    _, stubs = shared
    with pytest.raises(grpc.RpcError) as err:
        generate(stubs, **fields)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()


def _stream(stubs, request_id, **fields):
    return stubs.inference.Generate(g.GenerateRequest(request_id=request_id, prompt="long",
                                                      stopping=g.StoppingOptions(max_tokens=200), **fields), timeout=30)


def _wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def _cancelled(call):
    responses = list(call)
    finished = [r.finished for r in responses if r.HasField("finished")]
    return bool(finished) and all(f.reason == g.FINISH_REASON_CANCELLED for f in finished) \
        and responses[-1].HasField("usage") and call.code() == grpc.StatusCode.OK


def test_abort_targets_as_upstream_defines_them():
    with running(role="decode", profiles=("kv",), limits={"core": {"max_running_requests": 1}}) as (engine, stubs):
        abort = stubs.control.Abort
        a = _stream(stubs, "a")
        next(a)
        session = {"session_id": "kv-1", "transfer_backend": "nixl"}
        b = _stream(stubs, "b", kv=g.KvOptions(session=session))
        load = lambda: stubs.control.GetLoad(server_pb2.GetLoadRequest())  # noqa: E731
        assert _wait(lambda: load().queued_requests == 1)
        assert abort(lifecycle_pb2.AbortRequest(kv_session=session)).status == lifecycle_pb2.ABORT_STATUS_ABORTED
        assert _cancelled(b) and not any(r.HasField("token") for r in list(b))
        assert abort(lifecycle_pb2.AbortRequest(request_id="a")).status == lifecycle_pb2.ABORT_STATUS_ABORTED
        assert _cancelled(a)
        assert abort(lifecycle_pb2.AbortRequest(request_id="a")).status == lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED
        everything = abort(lifecycle_pb2.AbortRequest(all_requests=lifecycle_pb2.AllRequests()))
        assert everything.status == lifecycle_pb2.ABORT_STATUS_ABORTED
        for request, code in ((lifecycle_pb2.AbortRequest(request_id="nope"), grpc.StatusCode.NOT_FOUND),
                              (lifecycle_pb2.AbortRequest(), grpc.StatusCode.INVALID_ARGUMENT)):
            with pytest.raises(grpc.RpcError) as err:
                abort(request)
            assert err.value.code() == code


def test_prefill_ends_with_prefill_ready_and_decode_continues_from_its_session():
    with running(role="prefill", profiles=("kv",)) as (prefill, stubs):
        responses = generate(stubs, "a prompt of a few blocks of tokens", stopping=g.StoppingOptions(max_tokens=4))
        last = responses[-1]
        assert last.HasField("prefill_ready") and not any(r.HasField("token") for r in responses)
        session = last.prefill_ready.kv_session
        assert session.session_id and session.endpoints[0].port == int(prefill.address.rpartition(":")[2])
        assert last.usage.prompt_tokens == 34 and last.usage.completion_tokens == 0
    with running(role="decode", profiles=("kv",)) as (_, stubs):
        responses = generate(stubs, "a prompt of a few blocks of tokens", kv=g.KvOptions(session=session),
                             stopping=g.StoppingOptions(max_tokens=4))
        assert responses[-1].usage.cached_prompt_tokens == 34 and len(outputs(responses)[0][0]) == 4


def test_load_follows_running_and_queued_requests_and_cancellation_frees_them():
    with running(profiles=("load",), limits={"core": {"max_running_requests": 2}}) as (engine, stubs):
        calls = [_stream(stubs, f"q{i}") for i in range(5)]
        get = lambda: stubs.control.GetLoad(server_pb2.GetLoadRequest())  # noqa: E731
        assert _wait(lambda: (get().running_requests, get().queued_requests) == (2, 3))
        assert get().waiting_tokens == 3 * len(b"long")
        for call in calls:
            call.cancel()
        assert _wait(lambda: (get().running_requests, get().queued_requests) == (0, 0))


def test_prefix_cache_reports_cached_prompt_tokens(shared):
    _, stubs = shared
    prompt = "0123456789abcdef" * 3
    generate(stubs, prompt, stopping=g.StoppingOptions(max_tokens=2))
    again = generate(stubs, prompt, stopping=g.StoppingOptions(max_tokens=2))
    assert again[-1].usage.cached_prompt_tokens == 48
    bypass = generate(stubs, prompt, kv=g.KvOptions(bypass_prefix_cache=True), stopping=g.StoppingOptions(max_tokens=2))
    assert bypass[-1].usage.cached_prompt_tokens == 0


def test_a_full_queue_refuses_with_a_retryable_overload():
    limits = {"core": {"max_running_requests": 1, "max_queued_requests": 1}}
    with running(profiles=("core",), limits=limits) as (_, stubs):
        calls = [_stream(stubs, f"f{i}") for i in range(2)]
        get = lambda: stubs.control.GetLoad(server_pb2.GetLoadRequest())  # noqa: E731
        assert _wait(lambda: (get().running_requests, get().queued_requests) == (1, 1))
        with pytest.raises(grpc.RpcError) as err:
            generate(stubs, stopping=g.StoppingOptions(max_tokens=1))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert get().rejected_requests == 1
        for call in calls:
            call.cancel()
