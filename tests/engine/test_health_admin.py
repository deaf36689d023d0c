"""Standard health per service, the admin guard (token, own address, mTLS), and the admin,
LoRA, session, task, encoder, KV and runtime-event behaviour behind it."""

from __future__ import annotations

import shutil

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from openengine.v1 import (
    admin_pb2, admin_service_pb2_grpc, error_pb2, capabilities_pb2, encoder_pb2, events_pb2, kv_pb2, lora_pb2, sessions_pb2,
    tasks_pb2,
)
from openengine.v1 import generation_pb2 as g

from tests.certificates import make_certificates
from tests.engine.conftest import AUTH, running

H = health_pb2.HealthCheckResponse


def subscribe(stubs):
    """A runtime event stream that is surely open: its initial state has arrived."""
    events = stubs.observability.SubscribeRuntimeEvents(
        events_pb2.SubscribeRuntimeEventsRequest(initial_state=True), timeout=20)
    first = next(events)
    assert first.sequence == 1 and first.event.state_changed.state == events_pb2.ENGINE_STATE_SERVING
    return events


def check(stubs, service):
    return stubs.health.Check(health_pb2.HealthCheckRequest(service=service)).status


def test_health_per_advertised_service_and_not_found_otherwise():
    with running(profiles=("load",)) as (engine, stubs):
        for service in engine.server.state.advertised_services():
            assert check(stubs, service) == H.SERVING, service
        assert check(stubs, "") == H.SERVING
        for unknown in ("openengine.v1.Tasks", "Inference", "openengine.v1.inference", "openengine.v1.Admin"):
            with pytest.raises(grpc.RpcError) as err:
                check(stubs, unknown)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND, unknown


def test_pause_and_drain_make_inference_not_serving_while_control_stays_serving():
    with running(profiles=("load", "admin", "runtime-events")) as (engine, stubs):
        events = subscribe(stubs)
        watch = stubs.health.Watch(health_pb2.HealthCheckRequest(service="openengine.v1.Inference"))
        assert next(watch).status == H.SERVING
        stubs.admin.PauseGeneration(admin_pb2.PauseGenerationRequest(), metadata=AUTH)
        assert check(stubs, "openengine.v1.Inference") == H.NOT_SERVING
        assert check(stubs, "") == H.NOT_SERVING
        assert check(stubs, "openengine.v1.Discovery") == H.SERVING == check(stubs, "openengine.v1.Control")
        assert check(stubs, "openengine.v1.Admin") == H.SERVING
        assert next(watch).status == H.NOT_SERVING
        with pytest.raises(grpc.RpcError) as err:
            list(stubs.inference.Generate(g.GenerateRequest(prompt="x")))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH).resumed
        assert check(stubs, "openengine.v1.Inference") == H.SERVING
        assert next(watch).status == H.SERVING
        drain = list(stubs.admin.Drain(admin_pb2.DrainRequest(), metadata=AUTH))
        assert drain[-1].done
        assert check(stubs, "openengine.v1.Inference") == H.NOT_SERVING
        stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH)
        watch.cancel()
        states = [events_pb2.ENGINE_STATE_SERVING]
        for msg in events:
            assert msg.sequence == len(states) + 1
            states.append(msg.event.state_changed.state)
            if len(states) == 5:
                break
        events.cancel()
        E = events_pb2
        assert states == [E.ENGINE_STATE_SERVING, E.ENGINE_STATE_PAUSED, E.ENGINE_STATE_SERVING,
                          E.ENGINE_STATE_DRAINING, E.ENGINE_STATE_SERVING]


def test_admin_without_credentials_is_unauthenticated_and_does_nothing():
    with running(profiles=("admin",)) as (engine, stubs):
        for metadata in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as err:
                stubs.admin.PauseGeneration(admin_pb2.PauseGenerationRequest(), metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert check(stubs, "openengine.v1.Inference") == H.SERVING
        assert engine.server.state.run.phase == events_pb2.ENGINE_STATE_SERVING


def test_update_config_starts_a_revision_and_announces_it():
    with running(profiles=("adapters", "admin", "runtime-events")) as (engine, stubs):
        events = subscribe(stubs)
        update = admin_pb2.UpdateConfigRequest(updates=[admin_pb2.LimitUpdate(
            limit="openengine.adapters.max_loras", uint_value=3)])
        dry = stubs.admin.UpdateConfig(admin_pb2.UpdateConfigRequest(updates=update.updates, validate_only=True), metadata=AUTH)
        assert dry.revision == dry.previous_revision == 1 and dry.changed_limits == ["openengine.adapters.max_loras"]
        res = stubs.admin.UpdateConfig(update, metadata=AUTH)
        assert (res.previous_revision, res.revision) == (1, 2)
        assert stubs.info().capability_revision == 2 == stubs.caps().revision
        assert stubs.caps().models[0].adapters.max_loras == 3
        msg = next(events)
        assert msg.event.capability_revision_changed.previous_revision == 1
        assert msg.event.capability_revision_changed.revision == 2
        events.cancel()
        for bad in (admin_pb2.LimitUpdate(limit="openengine.adapters.max_loras", uint_value=0),
                    admin_pb2.LimitUpdate(limit="openengine.core.speculative_decoding", bool_value=True),
                    admin_pb2.LimitUpdate(limit="openengine.nope.x", uint_value=1)):
            with pytest.raises(grpc.RpcError) as err:
                stubs.admin.UpdateConfig(admin_pb2.UpdateConfigRequest(updates=[bad]), metadata=AUTH)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert stubs.info().capability_revision == 2


def test_lora_adapters_hold_as_many_as_max_cpu_loras_and_emit_events():
    with running(profiles=("adapters", "runtime-events"),
                 limits={"adapters": {"max_loras": 1, "max_cpu_loras": 1}}) as (engine, stubs):
        events = subscribe(stubs)
        adapter = lora_pb2.LoraAdapter(lora_id=1, lora_name="a", source_path="/x")
        stubs.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=adapter))
        with pytest.raises(grpc.RpcError) as err:
            stubs.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=lora_pb2.LoraAdapter(
                lora_id=2, lora_name="b", source_path="/y")))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert list(stubs.control.ListLoras(lora_pb2.ListLorasRequest()).adapters) == [adapter]
        out = list(stubs.inference.Generate(g.GenerateRequest(prompt="q", lora_name="a")))
        assert out[-1].HasField("finished")
        with pytest.raises(grpc.RpcError) as err:
            list(stubs.inference.Generate(g.GenerateRequest(prompt="q", lora_name="zzz")))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert stubs.control.UnloadLora(lora_pb2.UnloadLoraRequest(lora_name="a")).adapter == adapter
        assert stubs.info().capability_revision == 1  # adapters loaded are state, not capabilities
        kinds = [next(events).event.WhichOneof("kind") for _ in range(2)]
        events.cancel()
        assert kinds == ["adapter_loaded", "adapter_unloaded"]


def test_sessions_clamp_ttl_and_limit_count():
    with running(profiles=("sessions",), limits={"sessions": {"max_sessions": 2, "max_session_ttl_ms": 5000}}) as (_, stubs):
        s = stubs.sessions.OpenSession(sessions_pb2.OpenSessionRequest(session_id="s1", ttl_ms=99999)).session
        assert s.ttl_ms == 5000
        assert stubs.sessions.OpenSession(sessions_pb2.OpenSessionRequest()).session.ttl_ms == 600000
        with pytest.raises(grpc.RpcError) as err:
            stubs.sessions.OpenSession(sessions_pb2.OpenSessionRequest())
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        list(stubs.inference.Generate(g.GenerateRequest(prompt="first turn", session_id="s1")))
        listed = {x.session_id: x for x in stubs.sessions.ListSessions(sessions_pb2.ListSessionsRequest()).sessions}
        assert listed["s1"].retained_tokens > 0
        assert stubs.sessions.CloseSession(sessions_pb2.CloseSessionRequest(session_id="s1")).closed


def test_tasks_are_deterministic_and_bounded(shared):
    _, stubs = shared
    inputs = [tasks_pb2.TaskInput(text="a"), tasks_pb2.TaskInput(text="b")]
    e1 = stubs.tasks.Embed(tasks_pb2.EmbedRequest(inputs=inputs))
    e2 = stubs.tasks.Embed(tasks_pb2.EmbedRequest(inputs=inputs))
    assert e1 == e2 and len(e1.embeddings[0].values) == stubs.caps().models[0].tasks.embedding_size
    assert len(stubs.tasks.Embed(tasks_pb2.EmbedRequest(inputs=inputs, dimensions=8)).embeddings[1].values) == 8
    c = stubs.tasks.Classify(tasks_pb2.ClassifyRequest(inputs=inputs))
    assert abs(sum(l.probability for l in c.classifications[0].labels) - 1) < 1e-5
    s = stubs.tasks.Score(tasks_pb2.ScoreRequest(query=inputs[0], documents=inputs))
    assert [x.index for x in s.scores] == [0, 1]
    with pytest.raises(grpc.RpcError) as err:
        stubs.tasks.Embed(tasks_pb2.EmbedRequest(inputs=inputs * 40))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_unsupported_task_family_is_invalid_argument():
    with running(profiles=("tasks",), limits={"tasks": {"supported_tasks": ["embed"]}}) as (_, stubs):
        with pytest.raises(grpc.RpcError) as err:
            stubs.tasks.Classify(tasks_pb2.ClassifyRequest(inputs=[tasks_pb2.TaskInput(text="a")]))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_encoder_returns_handles():
    with running(role="encoder", profiles=("encoder",), limits={"encoder": {"modalities": ["image"]}}) as (engine, stubs):
        res = stubs.encoder.Encode(encoder_pb2.EncodeRequest(items=[encoder_pb2.MultimodalItem(
            item_id="i1", image=encoder_pb2.MediaSource(data=b"\x89PNG"))]))
        h = res.handles[0]
        assert h.item_id == "i1" and h.encoder_instance_id == stubs.info().instance_id and h.num_tokens > 0
        with pytest.raises(grpc.RpcError) as err:
            stubs.encoder.Encode(encoder_pb2.EncodeRequest(items=[encoder_pb2.MultimodalItem(
                audio=encoder_pb2.MediaSource(data=b"x"))]))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_kv_events_follow_the_prefix_cache():
    with running(role="prefill", profiles=("kv", "admin")) as (engine, stubs):
        sub = stubs.control.SubscribeKvEvents(kv_pb2.SubscribeKvEventsRequest(), timeout=20)
        assert _until(lambda: len(engine.backend.kv_events.subscribers) == 1)
        sources = stubs.control.GetKvEventSources(kv_pb2.GetKvEventSourcesRequest()).sources
        endpoint = sources[0].endpoint_addr
        assert f"{endpoint.host}:{endpoint.port}" == engine.address and sources[0].transport == "grpc"
        list(stubs.inference.Generate(g.GenerateRequest(prompt="x" * 40)))
        stored = next(sub).batch
        assert stored.sequence_number == 1 and stored.events[0].WhichOneof("event") == "block_stored"
        assert stubs.admin.ResetPrefixCache(admin_pb2.ResetPrefixCacheRequest(), metadata=AUTH).reset
        assert next(sub).batch.events[0].WhichOneof("event") == "all_blocks_cleared"
        sub.cancel()
        replay = stubs.control.SubscribeKvEvents(kv_pb2.SubscribeKvEventsRequest(start_sequence_number=1))
        assert [next(replay).batch.sequence_number for _ in range(2)] == [1, 2]
        replay.cancel()


def test_sleep_and_wake():
    with running(profiles=("admin",)) as (_, stubs):
        with pytest.raises(grpc.RpcError) as err:
            stubs.admin.Sleep(admin_pb2.SleepRequest(level=3), metadata=AUTH)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        stubs.admin.Sleep(admin_pb2.SleepRequest(level=1), metadata=AUTH)
        assert check(stubs, "openengine.v1.Inference") == H.NOT_SERVING
        assert stubs.admin.WakeUp(admin_pb2.WakeUpRequest(), metadata=AUTH).awake
        assert check(stubs, "openengine.v1.Inference") == H.SERVING


def test_admin_on_its_own_address():
    with running(profiles=("admin",), admin={"port": 0}) as (engine, stubs):
        with pytest.raises(grpc.RpcError) as err:
            stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with grpc.insecure_channel(engine.server.admin_address) as ch:
            admin = admin_service_pb2_grpc.AdminStub(ch)
            assert admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH).resumed is False
            health = health_pb2_grpc.HealthStub(ch)
            for name in ("", "openengine.v1.Admin"):
                assert health.Check(health_pb2.HealthCheckRequest(service=name)).status == H.SERVING
        assert "openengine.admin" in [p.name for p in stubs.caps().profiles]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_admin_mtls(tmp_path):
    make_certificates(tmp_path)
    read = lambda n: (tmp_path / n).read_bytes()  # noqa: E731
    admin = {"port": 0, "token": None, "tls_cert": str(tmp_path / "server.pem"),
             "tls_key": str(tmp_path / "server.key"), "client_ca": str(tmp_path / "ca.pem")}
    with running(profiles=("admin",), admin=admin) as (engine, _):
        good = grpc.ssl_channel_credentials(read("ca.pem"), read("client.key"), read("client.pem"))
        with grpc.secure_channel(engine.server.admin_address, good) as ch:
            stub = admin_service_pb2_grpc.AdminStub(ch)
            assert stub.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), timeout=10).resumed is False
        no_cert = grpc.ssl_channel_credentials(read("ca.pem"))
        with grpc.secure_channel(engine.server.admin_address, no_cert) as ch:
            stub = admin_service_pb2_grpc.AdminStub(ch)
            with pytest.raises(grpc.RpcError) as err:
                stub.PauseGeneration(admin_pb2.PauseGenerationRequest(), timeout=10)
            # The TLS handshake refuses a client without a certificate: nothing reaches Admin.
            assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED)
        assert engine.server.state.run.phase == events_pb2.ENGINE_STATE_SERVING


def _until(predicate, timeout=5.0):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_health_watch_of_an_unknown_service_stays_open_with_service_unknown(shared):
    _, stubs = shared
    call = stubs.health.Watch(health_pb2.HealthCheckRequest(service="openengine.v1.Nothing"), timeout=0.5)
    assert next(call).status == H.SERVICE_UNKNOWN
    with pytest.raises(grpc.RpcError) as err:
        next(call)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # still open, nothing more to say


def test_drain_deadline_aborts_what_is_still_running_and_pause_keep_suspends():
    with running(profiles=("admin", "load")) as (engine, stubs):
        long = g.GenerateRequest(prompt="x", stopping=g.StoppingOptions(max_tokens=250))
        gen = stubs.inference.Generate(long, timeout=20)
        next(gen)
        progress = list(stubs.admin.Drain(admin_pb2.DrainRequest(deadline_ms=100), metadata=AUTH, timeout=20))
        assert progress[0].remaining_requests == 1 and progress[-1].done
        assert sum(p.aborted_requests for p in progress[-1:]) == 1
        last = list(gen)[-1]   # may be sent again, elsewhere
        assert last.error.code == error_pb2.ERROR_CODE_DRAINING and last.error.retryable
        stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH)
        gen = stubs.inference.Generate(g.GenerateRequest(prompt="y", stopping=g.StoppingOptions(max_tokens=30)),
                                       timeout=20)
        next(gen)
        kept = stubs.admin.PauseGeneration(admin_pb2.PauseGenerationRequest(mode=capabilities_pb2.PAUSE_MODE_KEEP),
                                           metadata=AUTH)
        assert kept.kept_requests == 1 and kept.aborted_requests == 0
        stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH)
        assert list(gen)[-1].finished.reason == g.FINISH_REASON_LENGTH
