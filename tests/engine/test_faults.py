"""Faults seen by a plain gRPC client: the engine started with one breaks its rule in a way a
few direct calls show, and without it the same check passes. (Every fault is also caught by the
conformance case meant for it: tests/conformance/test_faults.py.)"""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2

from openengine.engine import FAULTS
from openengine.v1 import admin_pb2, common_pb2, events_pb2, generation_pb2, lifecycle_pb2, load_pb2
from openengine.v1 import sessions_pb2

from tests.engine.conftest import AUTH, TOKEN, running
from tests.engine.test_alias import ALIAS_FAULT_CHECKS

# Most of its time is spent waiting on engines' streams and timers (see tests/conftest.py).
pytestmark = pytest.mark.waits

H = health_pb2.HealthCheckResponse
ALL = ("load", "admin", "runtime-events", "sessions")


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


def validator_rules(stubs):
    from openengine.validate import validate_capabilities
    report = validate_capabilities(stubs.caps(), engine_info=stubs.info(), model_infos=[stubs.model()])
    return {v.requirement for v in report.errors}


def sequence_increases(engine, stubs):
    seqs = [m.sequence for m in watch(stubs, 7, interval_ms=10)]
    return seqs == list(range(7))


def settings_first(engine, stubs):
    return watch(stubs, 1)[0].WhichOneof("kind") == "settings"


def timestamps_monotonic(engine, stubs):
    ts = [m.timestamp.ToNanoseconds() for m in watch(stubs, 5, interval_ms=10)]
    return ts == sorted(ts)


def initial_snapshot(engine, stubs):
    return watch(stubs, 2, interval_ms=60000, heartbeat_ms=10)[1].WhichOneof("kind") == "snapshot"


def heartbeats(engine, stubs):
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


def clamped(engine, stubs):
    return watch(stubs, 1, interval_ms=1)[0].settings.interval_ms == 10


def watch_instance(engine, stubs):
    msgs = watch(stubs, 2)
    ids = {msgs[0].settings.instance_id, msgs[1].snapshot.load.instance_id}
    return ids == {stubs.info().instance_id}


def coalesced_counted(engine, stubs):
    import asyncio
    from openengine.v1 import observability_service_pb2_grpc as og

    async def main():
        small = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
        async with grpc.aio.insecure_channel(engine.address, options=small) as ch:
            call = og.ObservabilityStub(ch).WatchLoad(load_pb2.WatchLoadRequest(interval_ms=10, heartbeat_ms=0))
            await call.read()
            await asyncio.sleep(0.6)  # stall for ~60 intervals
            msgs = [await call.read() for _ in range(60)]
            call.cancel()
            return msgs

    msgs = asyncio.run(main())
    # Sequences have no gaps, so skipped updates are visible only through `coalesced`.
    return sum(m.snapshot.coalesced for m in msgs) > 0


def _long(stubs, rid):
    call = stubs.inference.Generate(generation_pb2.GenerateRequest(request_id=rid, text="x", sampling=generation_pb2.SamplingParams(max_tokens=200)),
                                    timeout=20)
    next(call)
    return call


def cancel_only_unsubscribes(engine, stubs):
    gen = _long(stubs, "keep")
    watch(stubs, 2)
    time.sleep(0.1)
    rest = list(gen)
    return rest[-1].WhichOneof("kind") == "final"


def never_ends_ok(engine, stubs):
    call = stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(), timeout=0.5)
    try:
        list(call)
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    return False


def max_watchers(engine, stubs):
    calls = [stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(), timeout=10) for _ in range(2)]
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


def revision_ends_stream(engine, stubs):
    call = stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(interval_ms=20), timeout=1.5)
    next(call)
    stubs.admin.UpdateConfig(admin_pb2.UpdateConfigRequest(updates=[admin_pb2.LimitUpdate(
        limit="openengine.load.max_watchers", uint_value=7)]), metadata=AUTH)
    try:
        list(call)
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.ABORTED
    return False


def requirement_holds(req):
    return lambda engine, stubs: req not in validator_rules(stubs)


def limits_enforced(engine, stubs):
    try:
        list(stubs.inference.Generate(generation_pb2.GenerateRequest(text="x", sampling=generation_pb2.SamplingParams(n=50, max_tokens=2))))
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.INVALID_ARGUMENT


def features_off_refused(engine, stubs):
    """With min_p, logit_bias and prompt_logprobs advertised off, each is refused alone."""
    tries = [generation_pb2.SamplingParams(max_tokens=2, min_p=0.1), generation_pb2.SamplingParams(max_tokens=2, logit_bias={5: 1.0}),
             generation_pb2.SamplingParams(max_tokens=2, prompt_logprobs=1)]
    for sampling in tries:
        try:
            list(stubs.inference.Generate(generation_pb2.GenerateRequest(text="x", sampling=sampling)))
            return False
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.INVALID_ARGUMENT:
                return False
    return True


def client_cancel_frees(engine, stubs):
    long = generation_pb2.SamplingParams(max_tokens=256, min_tokens=256, ignore_eos=True)   # over 0.5 s
    call = stubs.inference.Generate(generation_pb2.GenerateRequest(text="x", sampling=long), timeout=10)
    next(call)
    call.cancel()
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        if stubs.observability.GetLoad(load_pb2.GetLoadRequest()).running_requests == 0:
            return True
        time.sleep(0.01)
    return False


def heartbeat_after_any_message(engine, stubs):
    """Snapshots every 20 ms reset a 50 ms heartbeat timer: no heartbeat comes sooner."""
    msgs = watch(stubs, 25, interval_ms=20, heartbeat_ms=50, initial_snapshot=False)
    stamps = [(m.WhichOneof("kind"), m.timestamp.ToNanoseconds() / 1e6) for m in msgs]
    return all(b - a >= 49 for (_, a), (kind, b) in zip(stamps, stamps[1:]) if kind == "heartbeat")


def unadvertised_unimplemented(engine, stubs):
    from openengine.v1 import kv_pb2
    try:
        stubs.kv.GetKvEventSources(kv_pb2.GetKvEventSourcesRequest())
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.UNIMPLEMENTED


def health_per_service(engine, stubs):
    try:
        return stubs.health.Check(health_pb2.HealthCheckRequest(service="openengine.v1.Discovery")).status == H.SERVING
    except grpc.RpcError:
        return False


def health_unknown_not_found(engine, stubs):
    try:
        stubs.health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.NOT_FOUND


def health_watch_initial(engine, stubs):
    call = stubs.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
    try:
        return next(call).status == H.SERVING
    except grpc.RpcError:
        return False


def health_pause(engine, stubs):
    stubs.admin.PauseGeneration(admin_pb2.PauseGenerationRequest(), metadata=AUTH)
    status = stubs.health.Check(health_pb2.HealthCheckRequest(service="openengine.v1.Inference")).status
    stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH)
    return status == H.NOT_SERVING


def terminal_error(engine, stubs):
    gen = _long(stubs, "t")
    stubs.lifecycle.Abort(lifecycle_pb2.AbortRequest(request_ids=common_pb2.StringList(values=["t"])))
    rest = list(gen)
    return bool(rest) and rest[-1].WhichOneof("kind") == "error"


def abort_works(engine, stubs):
    gen = _long(stubs, "a")
    stubs.lifecycle.Abort(lifecycle_pb2.AbortRequest(all=True))
    rest = list(gen)
    return rest[-1].WhichOneof("kind") != "final"


def getload_instance(engine, stubs):
    return stubs.observability.GetLoad(load_pb2.GetLoadRequest()).instance_id == stubs.info().instance_id


def events_from_one(engine, stubs):
    call = stubs.observability.SubscribeRuntimeEvents(events_pb2.SubscribeRuntimeEventsRequest(initial_state=True),
                                                      timeout=5)
    first = next(call)
    call.cancel()
    return first.sequence == 1


def session_ttl(engine, stubs):
    s = stubs.sessions.OpenSession(sessions_pb2.OpenSessionRequest(ttl_ms=10 ** 9)).session
    return s.ttl_ms <= stubs.caps().sessions.max_session_ttl_ms


def admin_auth(engine, stubs):
    try:
        stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest())
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.UNAUTHENTICATED


def bearer_any_case(engine, stubs):
    try:
        stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(),
                                     metadata=(("authorization", f"bearer {TOKEN}"),))
        return True
    except grpc.RpcError as err:
        return err.code() != grpc.StatusCode.UNAUTHENTICATED


def health_list_answers(engine, stubs):
    try:
        return "" in stubs.health.List(health_pb2.HealthListRequest(), timeout=5).statuses
    except grpc.RpcError as err:
        return err.code() != grpc.StatusCode.UNIMPLEMENTED


def ranks_sum_to_total(engine, stubs):
    # A finished request leaves its blocks in the prefix cache, which the total counts.
    list(stubs.inference.Generate(generation_pb2.GenerateRequest(text="x" * 100, sampling=generation_pb2.SamplingParams(max_tokens=2)),
                                  timeout=10))
    info = stubs.observability.GetLoad(load_pb2.GetLoadRequest(per_rank=True))
    assert len(info.ranks) == 2 and info.used_kv_blocks > 0
    return sum(r.used_kv_blocks for r in info.ranks) == info.used_kv_blocks


def nan_refused(engine, stubs):
    try:
        list(stubs.inference.Generate(generation_pb2.GenerateRequest(
            text="hi", sampling=generation_pb2.SamplingParams(max_tokens=1, temperature=float("nan"))), timeout=10))
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.INVALID_ARGUMENT


def undecodable_is_internal(engine, stubs):
    try:
        stubs.channel.unary_unary("/openengine.v1.Discovery/GetEngineInfo")(b"\xff\xff\xff", timeout=5)
        return False
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.INTERNAL


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
    "features-off-accepted": (dict(limits={"core": {"min_p": False, "logit_bias": False,
                                                    "prompt_logprobs": False}}), features_off_refused),
    "client-cancel-ignored": ({}, client_cancel_frees),
    "capabilities-unadvertised-submessage": ({}, requirement_holds("REQ-CAP-006")),
    "capabilities-missing-core": ({}, requirement_holds("REQ-CORE-001")),
    "capabilities-duplicate-profile": ({}, requirement_holds("REQ-CAP-003")),
    "capabilities-limit-out-of-range": ({}, requirement_holds("REQ-CAP-008")),
    "capabilities-revision-mismatch": ({}, lambda e, s: s.caps().revision == s.info().capability_revision),
    "capabilities-role-mismatch": (dict(role="prefill", profiles=("kv",)), requirement_holds("REQ-CAP-011")),
    "limits-not-enforced": ({}, limits_enforced),
    "unadvertised-rpc-implemented": ({}, unadvertised_unimplemented),
    "health-not-per-service": ({}, health_per_service),
    "health-unknown-not-found": ({}, health_unknown_not_found),
    "health-watch-no-initial": ({}, health_watch_initial),
    "health-pause-not-reflected": ({}, health_pause),
    "generate-no-terminal": ({}, terminal_error),
    "abort-ignored": ({}, abort_works),
    "getload-instance-mismatch": ({}, getload_instance),
    "events-sequence-from-zero": ({}, events_from_one),
    "session-ttl-not-clamped": ({}, session_ttl),
    "admin-no-auth": ({}, admin_auth),
    "bearer-scheme-case-sensitive": ({}, bearer_any_case),
    "health-list-unimplemented": ({}, health_list_answers),
    "load-ranks-not-summed": (dict(data_parallel_size=2), ranks_sum_to_total),
    "numbers-not-checked": ({}, nan_refused),
    "wire-policy-off": ({}, undecodable_is_internal),
}


CHECKS.update(ALIAS_FAULT_CHECKS)


def test_every_check_is_of_a_fault():
    """Every fault is caught by the conformance case meant for it (tests/conformance/
    test_faults.py requires a plan for each); the checks here add a plain gRPC client's view."""
    assert set(CHECKS) <= set(FAULTS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_fault_is_observable_by_a_client(name):
    kw, holds = CHECKS[name]
    kw = dict(kw)
    kw.setdefault("profiles", ALL)
    with running(**kw) as (engine, stubs):
        assert holds(engine, stubs), f"the check for {name} fails on a conforming engine"
    with running(faults=(name,), **kw) as (engine, stubs):
        assert not holds(engine, stubs), f"{name}: a client cannot see the fault"
