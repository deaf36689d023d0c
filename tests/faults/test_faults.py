"""Faults seen by a plain gRPC client: an engine committing one breaks its rule in a way a few
direct calls show, and without it the same check passes. (Each fault is also caught by the
conformance case meant for it: tests/conformance/test_faults.py.) And the table itself: every
fault names what it breaks and changes one part, through a public seam."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from openengine.engine import EngineConfig
from openengine.v1 import admin_pb2, events_pb2, lifecycle_pb2, load_pb2, observability_service_pb2_grpc
from openengine.v1 import server_pb2, sessions_pb2
from openengine.v1 import generation_pb2 as g

from tests.engine.conftest import AUTH, TOKEN, Stubs, config, running
from tests.faults import FAULTS, faulty_engine

ROOT = Path(__file__).resolve().parents[2]
H = health_pb2.HealthCheckResponse
ALL = ("load", "admin", "runtime-events", "sessions")


def test_every_fault_breaks_named_requirements_through_one_seam():
    for fault in FAULTS.values():
        assert fault.breaks and fault.requirements and fault.part, fault.name
        assert (fault.wire is None) != (fault.engine is None), fault.name


def test_every_fault_cites_requirements_the_spec_defines():
    from oespec.spec import load_requirements

    known = {i for r in load_requirements(ROOT / "spec") for i in r.ids}
    for fault in FAULTS.values():
        assert set(fault.requirements) <= known, f"{fault.name} cites what spec/ does not define"


def test_the_list_says_what_each_fault_breaks():
    out = subprocess.run([sys.executable, "-m", "tests.faults", "--list"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(FAULTS)
    for line, fault in zip(lines, FAULTS.values()):
        assert all(r in line for r in fault.requirements) and line.endswith(f"[{fault.part}]"), line


def test_product_code_never_imports_the_faults():
    for tree in ("openengine", "oespec"):
        for path in (ROOT / tree).rglob("*.py"):
            text = path.read_text()
            assert "tests.faults" not in text and "from tests" not in text, path


@contextlib.contextmanager
def faulty(names=(), **kw):
    engine = faulty_engine(config(**kw), names).start()
    channel = grpc.insecure_channel(engine.address)
    try:
        yield engine, Stubs(channel)
    finally:
        channel.close()
        engine.stop()


# -- the checks: each holds on a conforming engine ---------------------------------------------------


def watch(stubs, n, **kw):
    call = stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(**kw), timeout=10)
    out = []
    try:
        for msg in call:
            out.append(msg)
            if len(out) == n:
                break
    finally:
        call.cancel()
    return out


def sequence_increases(stubs):
    return [m.sequence for m in watch(stubs, 7, interval_ms=10)] == list(range(7))


def settings_first(stubs):
    return watch(stubs, 1)[0].WhichOneof("kind") == "settings"


def timestamps_monotonic(stubs):
    stamps = [m.timestamp_unix_nanos for m in watch(stubs, 5, interval_ms=10)]
    return stamps == sorted(stamps)


def initial_snapshot(stubs):
    return watch(stubs, 2, interval_ms=60000, heartbeat_ms=10)[1].WhichOneof("kind") == "snapshot"


def heartbeats(stubs):
    call = stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(interval_ms=0, heartbeat_ms=20), timeout=0.5)
    kinds = []
    try:
        for msg in call:
            kinds.append(msg.WhichOneof("kind"))
            if len(kinds) == 3:
                break
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    return "heartbeat" in kinds


def clamped(stubs):
    return watch(stubs, 1, interval_ms=1)[0].settings.interval_ms == 10


def watch_instance(stubs):
    msgs = watch(stubs, 2)
    return {msgs[0].settings.instance_id, msgs[1].snapshot.load.instance_id} == {stubs.info().instance_id}


def coalesced_counted(stubs):
    async def main():
        small = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
        async with grpc.aio.insecure_channel(stubs.address, options=small) as ch:
            call = observability_service_pb2_grpc.ObservabilityStub(ch).WatchLoad(
                load_pb2.WatchLoadRequest(interval_ms=10, heartbeat_ms=0))
            await call.read()
            await asyncio.sleep(0.6)  # stall for ~60 intervals
            msgs = [await call.read() for _ in range(60)]
            call.cancel()
            return msgs
    # Sequences have no gaps, so skipped updates are visible only through `coalesced`.
    return sum(m.snapshot.coalesced for m in asyncio.run(main())) > 0


def _long(stubs, rid, tokens=200):
    call = stubs.inference.Generate(g.GenerateRequest(request_id=rid, prompt="x", stopping=g.StoppingOptions(
        max_tokens=tokens)), timeout=20)
    next(call)
    return call


def _ended_by(responses) -> int:
    finished = [r.finished.reason for r in responses if r.HasField("finished")]
    return finished[-1] if finished else -1


def cancel_only_unsubscribes(stubs):
    gen = _long(stubs, "keep")
    watch(stubs, 2)
    time.sleep(0.1)
    return _ended_by(list(gen)) == g.FINISH_REASON_LENGTH


def never_ends_ok(stubs):
    call = stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(), timeout=0.5)
    try:
        list(call)
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    return False


def max_watchers(stubs):
    most = stubs.caps().observability.max_watchers
    calls = [stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(), timeout=10) for _ in range(most)]
    for c in calls:
        next(c)
    try:
        next(stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(), timeout=10))
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        for c in calls:
            c.cancel()


def revision_ends_stream(stubs):
    call = stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(interval_ms=20), timeout=1.5)
    next(call)
    stubs.admin.UpdateConfig(admin_pb2.UpdateConfigRequest(updates=[admin_pb2.LimitUpdate(
        limit="openengine.load.max_watchers", uint_value=7)]), metadata=AUTH)
    try:
        list(call)
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.ABORTED
    return False


def heartbeat_after_any_message(stubs):
    """Snapshots every 20 ms reset a 50 ms heartbeat timer: no heartbeat comes sooner."""
    msgs = watch(stubs, 25, interval_ms=20, heartbeat_ms=50, initial_snapshot=False)
    stamps = [(m.WhichOneof("kind"), m.timestamp_unix_nanos / 1e6) for m in msgs]
    return all(b - a >= 49 for (_, a), (kind, b) in zip(stamps, stamps[1:]) if kind == "heartbeat")


def requirement_holds(req):
    def holds(stubs):
        from openengine.validate import validate_capabilities
        report = validate_capabilities(stubs.caps(), server_info=stubs.info(),
                                       model_infos=[stubs.model(m) for m in stubs.info().supported_models])
        return req not in {v.requirement for v in report.errors}
    return holds


def _refused(generate_request, code=grpc.StatusCode.INVALID_ARGUMENT):
    def holds(stubs):
        try:
            list(stubs.inference.Generate(generate_request, timeout=10))
            return False
        except grpc.RpcError as err:
            return err.code() == code
    return holds


def features_off_refused(stubs):
    """With min_p and prompt logprobs advertised off, each is refused alone."""
    return all(_refused(g.GenerateRequest(prompt="x", stopping=g.StoppingOptions(max_tokens=2), **fields))(stubs)
               for fields in (dict(sampling=g.SamplingParams(min_p=0.1)),
                              dict(response=g.ResponseOptions(return_prompt_logprobs=True))))


def client_cancel_frees(stubs):
    call = _long(stubs, "c", tokens=256)
    call.cancel()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        if stubs.control.GetLoad(server_pb2.GetLoadRequest()).running_requests == 0:
            return True
        time.sleep(0.01)
    return False


def unadvertised_unimplemented(stubs):
    from openengine.v1 import kv_pb2
    try:
        stubs.control.GetKvEventSources(kv_pb2.GetKvEventSourcesRequest())
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.UNIMPLEMENTED


def health_per_service(stubs):
    try:
        return stubs.health.Check(health_pb2.HealthCheckRequest(service="openengine.v1.Control")).status == H.SERVING
    except grpc.RpcError:
        return False


def health_unknown_not_found(stubs):
    try:
        stubs.health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.NOT_FOUND


def health_watch_initial(stubs):
    call = stubs.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
    try:
        return next(call).status == H.SERVING
    except grpc.RpcError:
        return False


def health_pause(stubs):
    stubs.admin.PauseGeneration(admin_pb2.PauseGenerationRequest(), metadata=AUTH)
    status = stubs.health.Check(health_pb2.HealthCheckRequest(service="openengine.v1.Inference")).status
    stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH)
    return status == H.NOT_SERVING


def health_overall_serving(stubs):
    return stubs.health.Check(health_pb2.HealthCheckRequest(service="")).status == H.SERVING


def aborted_stream_cancelled(stubs):
    gen = _long(stubs, "t")
    stubs.control.Abort(lifecycle_pb2.AbortRequest(request_id="t"))
    return _ended_by(list(gen)) == g.FINISH_REASON_CANCELLED


def abort_all_works(stubs):
    gen = _long(stubs, "a")
    stubs.control.Abort(lifecycle_pb2.AbortRequest(all_requests=lifecycle_pb2.AllRequests()))
    return _ended_by(list(gen)) == g.FINISH_REASON_CANCELLED


def abort_statuses(stubs):
    list(stubs.inference.Generate(g.GenerateRequest(request_id="done", prompt="x",
                                                    stopping=g.StoppingOptions(max_tokens=1))))
    try:
        finished = stubs.control.Abort(lifecycle_pb2.AbortRequest(request_id="done")).status
    except grpc.RpcError:
        return False
    try:
        stubs.control.Abort(lifecycle_pb2.AbortRequest(request_id="never"))
        return False
    except grpc.RpcError as err:
        return finished == lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED and err.code() == grpc.StatusCode.NOT_FOUND


def usage_on_the_final_response(stubs):
    responses = list(stubs.inference.Generate(g.GenerateRequest(prompt="x", stopping=g.StoppingOptions(max_tokens=3))))
    return responses[-1].usage.completion_tokens == 3


def max_tokens_honoured(stubs):
    responses = list(stubs.inference.Generate(g.GenerateRequest(prompt="x", stopping=g.StoppingOptions(max_tokens=3))))
    return sum(len(r.token.tokens) for r in responses) == 3


def eos_ignored_when_asked(stubs):
    """A guided choice ends in the end-of-sequence token, which ignore_eos must pass over."""
    request = g.GenerateRequest(prompt="x", stopping=g.StoppingOptions(max_tokens=6, ignore_eos=True),
                                guided=g.GuidedDecoding(choice=g.ChoiceConstraint(choices=["a"])))
    return sum(len(r.token.tokens) for r in stubs.inference.Generate(request, timeout=10)) == 6


def getload_instance(stubs):
    return stubs.control.GetLoad(server_pb2.GetLoadRequest()).instance_id == stubs.info().instance_id


def events_from_one(stubs):
    call = stubs.observability.SubscribeRuntimeEvents(events_pb2.SubscribeRuntimeEventsRequest(initial_state=True),
                                                      timeout=5)
    first = next(call)
    call.cancel()
    return first.sequence == 1


def session_ttl(stubs):
    s = stubs.sessions.OpenSession(sessions_pb2.OpenSessionRequest(ttl_ms=10 ** 9)).session
    return s.ttl_ms <= stubs.caps().sessions.max_session_ttl_ms


def admin_auth(stubs):
    try:
        stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest())
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.UNAUTHENTICATED


def bearer_any_case(stubs):
    try:
        stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=(("authorization", f"bearer {TOKEN}"),))
        return True
    except grpc.RpcError as err:
        return err.code() != grpc.StatusCode.UNAUTHENTICATED


def health_list_answers(stubs):
    try:
        return "" in stubs.health.List(health_pb2.HealthListRequest(), timeout=5).statuses
    except grpc.RpcError as err:
        return err.code() != grpc.StatusCode.UNIMPLEMENTED


def ranks_sum_to_total(stubs):
    # A finished request leaves its blocks in the prefix cache, which the total counts.
    list(stubs.inference.Generate(g.GenerateRequest(prompt="x" * 100, stopping=g.StoppingOptions(max_tokens=2)),
                                  timeout=10))
    info = stubs.control.GetLoad(server_pb2.GetLoadRequest(include_per_rank=True))
    assert len(info.ranks) == 2 and info.used_kv_blocks > 0
    return sum(r.used_kv_blocks for r in info.ranks) == info.used_kv_blocks


def undecodable_is_internal(stubs):
    try:
        stubs.channel.unary_unary("/openengine.v1.Control/GetServerInfo")(b"\xff\xff\xff", timeout=5)
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.INTERNAL


NAN = g.GenerateRequest(prompt="hi", stopping=g.StoppingOptions(max_tokens=1), sampling=g.SamplingParams(
    temperature=float("nan")))
TOO_MANY = g.GenerateRequest(prompt="x", stopping=g.StoppingOptions(max_tokens=2), sampling=g.SamplingParams(
    num_sequences=50))

# fault -> (engine settings, check that holds on a conforming engine and fails with the fault)
CHECKS = {
    "watch-sequence-not-increasing": ({}, sequence_increases),
    "watch-settings-not-first": ({}, settings_first),
    "watch-timestamp-backwards": ({}, timestamps_monotonic),
    "watch-no-initial-snapshot": ({}, initial_snapshot),
    "watch-missing-heartbeat": ({}, heartbeats),
    "watch-interval-not-clamped": ({}, clamped),
    "watch-instance-id-mismatch": ({}, watch_instance),
    "watch-silent-gap": ({}, coalesced_counted),
    "watch-cancel-aborts-requests": ({}, cancel_only_unsubscribes),
    "watch-ends-ok": ({}, never_ends_ok),
    "watch-max-watchers-ignored": (dict(limits={"load": {"max_watchers": 2}}), max_watchers),
    "watch-revision-stream-kept": ({}, revision_ends_stream),
    "watch-heartbeat-not-reset": ({}, heartbeat_after_any_message),
    "features-off-accepted": (dict(limits={"core": {"min_p": False, "prompt_logprobs": False}}),
                              features_off_refused),
    "client-cancel-ignored": ({}, client_cancel_frees),
    "capabilities-unadvertised-submessage": ({}, requirement_holds("REQ-CAP-006")),
    "capabilities-missing-core": ({}, requirement_holds("REQ-CORE-001")),
    "capabilities-duplicate-profile": ({}, requirement_holds("REQ-CAP-003")),
    "capabilities-limit-out-of-range": ({}, requirement_holds("REQ-CAP-008")),
    "capabilities-revision-mismatch": ({}, lambda s: s.caps().revision == s.info().capability_revision),
    "capabilities-role-mismatch": (dict(role="prefill", profiles=("kv",)), requirement_holds("REQ-CAP-011")),
    "limits-not-enforced": ({}, _refused(TOO_MANY)),
    "unadvertised-rpc-implemented": ({}, unadvertised_unimplemented),
    "health-not-per-service": ({}, health_per_service),
    "health-unknown-not-found": ({}, health_unknown_not_found),
    "health-watch-no-initial": ({}, health_watch_initial),
    "health-pause-not-reflected": ({}, health_pause),
    "health-overall-not-serving": ({}, health_overall_serving),
    "generate-no-terminal": ({}, aborted_stream_cancelled),
    "abort-ignored": ({}, abort_all_works),
    "abort-by-id-ignored": ({}, aborted_stream_cancelled),
    "abort-finished-aborted": ({}, abort_statuses),
    "abort-unknown-aborted": ({}, abort_statuses),
    "final-without-usage": ({}, usage_on_the_final_response),
    "max-tokens-overrun": ({}, max_tokens_honoured),
    "ignore-eos-ignored": ({}, eos_ignored_when_asked),
    "getload-instance-mismatch": ({}, getload_instance),
    "events-sequence-from-zero": ({}, events_from_one),
    "session-ttl-not-clamped": ({}, session_ttl),
    "admin-no-auth": ({}, admin_auth),
    "bearer-scheme-case-sensitive": ({}, bearer_any_case),
    "health-list-unimplemented": ({}, health_list_answers),
    "load-ranks-not-summed": (dict(data_parallel_size=2), ranks_sum_to_total),
    "numbers-not-checked": ({}, _refused(NAN)),
    "wire-policy-off": ({}, undecodable_is_internal),
}


def test_every_check_is_of_a_fault():
    assert set(CHECKS) <= set(FAULTS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_fault_is_observable_by_a_client(name):
    kw, holds = CHECKS[name]
    kw = dict(kw)
    kw.setdefault("profiles", ALL)
    with running(**kw) as (_, stubs):
        stubs.address = _.address
        assert holds(stubs), f"the check for {name} fails on a conforming engine"
    with faulty((name,), **kw) as (engine, stubs):
        stubs.address = engine.address
        assert not holds(stubs), f"{name}: a client cannot see the fault"


@pytest.mark.slow
def test_failure_as_status_is_observable_at_shutdown():
    """A shutdown fails the reference's accepted streams (here a KV subscription; a running
    Generate the same way): one DRAINING EngineError then OK, or, with the fault, status INTERNAL."""
    from openengine.v1 import error_pb2, kv_pb2

    def ending(names):
        engine = faulty_engine(config(profiles=("kv",), role="decode"), names).start()
        channel = grpc.insecure_channel(engine.address)
        try:
            call = Stubs(channel).control.SubscribeKvEvents(kv_pb2.SubscribeKvEventsRequest(), timeout=10)
            time.sleep(0.2)   # subscribed before the shutdown begins
            engine.stop()
            try:
                return [m.WhichOneof("event") == "error" and m.error.code for m in call][-1:], grpc.StatusCode.OK
            except grpc.RpcError as err:
                return [], err.code()
        finally:
            channel.close()

    assert ending(()) == ([error_pb2.ERROR_CODE_DRAINING], grpc.StatusCode.OK)
    assert ending(("failure-as-status",)) == ([], grpc.StatusCode.INTERNAL)


def test_an_engine_without_faults_is_the_plain_reference_engine():
    with faulty(profiles=("load",)) as (engine, stubs):
        assert type(engine.server.backend).__name__ == "ReferenceBackend"
        assert [p.name for p in stubs.caps().profiles] == ["openengine.core", "openengine.load"]
    with pytest.raises(KeyError, match="python -m tests.faults --list"):
        faulty_engine(EngineConfig(port=0), ["no-such-fault"])
