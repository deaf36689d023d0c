"""The SDK with small in-process backends: what is advertised, what is refused at start, how a
Generate call is admitted, streamed, aborted and cancelled, and how a backend's own services are
gated and guarded."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from openengine.serve import (
    AbortReason, CannotServe, Chunk, EngineDescription, ErrorCode, Failure, Final, FinishReason, Load, Model,
    Refusal, RefusalCode, RunningServer, ServeConfig, Server, Tokenizer,
)
from openengine.serve.state import InFlight
from openengine.v1 import (
    common_pb2, discovery_pb2, discovery_service_pb2_grpc as discovery_grpc, generation_pb2,
    inference_service_pb2_grpc as inference_grpc, lifecycle_pb2, lifecycle_service_pb2_grpc as lifecycle_grpc,
    load_pb2, observability_service_pb2_grpc as observability_grpc, sessions_pb2,
    sessions_service_pb2_grpc as sessions_grpc,
)

MODEL = Model("m", max_context_tokens=512, max_output_tokens=64, tokenizer=Tokenizer("bytes", 256, eos_token_id=0))


class Backend:
    """Streams `tokens` tokens, one per loop turn; `hold` keeps a request running until aborted;
    `refuse` and `fail` make it refuse or fail on purpose."""

    def __init__(self, *, limits=None, refuse: Refusal | None = None, fail: str = "", hold: bool = False):
        self.limits = limits or {}
        self.refuse, self.fail, self.hold = refuse, fail, hold
        self.aborts: list[tuple[str, AbortReason]] = []
        self.running: dict[str, bool] = {}
        self.started = threading.Event()

    def describe(self):
        return EngineDescription("test-engine", "0.1", (MODEL,), limits=self.limits)

    def attach(self, engine):
        self.engine = engine

    async def generate(self, request):
        if self.refuse is not None:
            raise self.refuse
        self.running[request.request_id] = True
        try:
            yield Chunk((65,), text="A")
            self.started.set()
            if self.fail == "raise":
                raise RuntimeError("device lost")
            if self.fail == "failure":
                yield Failure(ErrorCode.KV_TRANSFER_FAILED, "the KV transfer failed", retryable=True)
                return
            while self.hold and self.running[request.request_id]:
                await asyncio.sleep(0.005)
            if self.fail != "short":
                yield Final(FinishReason.LENGTH, prompt_tokens=1, completion_tokens=2, token_ids=(66,), text="B")
        finally:
            del self.running[request.request_id]

    async def abort(self, request_id, reason):
        self.aborts.append((request_id, reason))
        if request_id in self.running:
            self.running[request_id] = False

    def load(self):
        return Load(running_requests=len(self.running))


class WithSessions(Backend):
    def services(self):
        return {"openengine.v1.Sessions": self}

    async def OpenSession(self, request, context):
        return sessions_pb2.OpenSessionResponse(session=sessions_pb2.SessionInfo(session_id="s-1"))

    async def CloseSession(self, request, context):
        raise Refusal(RefusalCode.NOT_FOUND, f"session_id: no open session {request.session_id!r}")

    async def ListSessions(self, request, context):
        return sessions_pb2.ListSessionsResponse()


def running(backend, **config) -> RunningServer:
    return RunningServer(lambda: backend, ServeConfig(port=0, **config))


def generate(address, **fields):
    with grpc.insecure_channel(address) as channel:
        return list(inference_grpc.InferenceStub(channel).Generate(
            generation_pb2.GenerateRequest(text="hi", **fields), timeout=10))


def test_core_and_load_are_served_and_the_rest_left_out_with_the_reason():
    server = Server(Backend())
    assert [p.name for p in server.state.advertised] == ["openengine.core", "openengine.load"]
    assert any(r.startswith("openengine.admin needs openengine.v1.Admin/Drain") for r in server.state.selection.left_out)


def test_a_profile_the_backend_cannot_serve_is_refused_at_start_naming_what_is_missing():
    with pytest.raises(CannotServe) as refused:
        Server(Backend(), ServeConfig(profiles=("admin", "no-such")))
    text = str(refused.value)
    assert "openengine.admin needs openengine.v1.Admin/Drain" in text and "'no-such' is not a profile" in text


def test_declared_limits_are_checked_against_the_contract():
    with pytest.raises(CannotServe) as refused:
        Server(Backend(limits={"core": {"max_sequences": "many", "no_such_limit": 1}}))
    assert "openengine.core.max_sequences takes an integer" in str(refused.value)
    assert "openengine.core has no limit 'no_such_limit'" in str(refused.value)


def test_a_backend_service_serves_its_profile_and_refusals_become_statuses():
    with running(WithSessions(), profiles=("sessions",)) as engine:
        with grpc.insecure_channel(engine.address) as channel:
            caps = discovery_grpc.DiscoveryStub(channel).GetCapabilities(discovery_pb2.GetCapabilitiesRequest())
            assert "openengine.sessions" in [p.name for p in caps.profiles]
            stub = sessions_grpc.SessionsStub(channel)
            assert stub.OpenSession(sessions_pb2.OpenSessionRequest()).session.session_id == "s-1"
            with pytest.raises(grpc.RpcError) as err:
                stub.CloseSession(sessions_pb2.CloseSessionRequest(session_id="x"))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND and "no open session 'x'" in err.value.details()


def test_generate_streams_chunks_and_finals_and_admission_refuses_what_is_not_advertised():
    with running(Backend()) as engine:
        out = generate(engine.address)
        assert [m.WhichOneof("kind") for m in out] == ["chunk", "final"]
        assert out[1].final.finish_reason == generation_pb2.FINISH_REASON_LENGTH and out[1].final.text == "B"
        for fields, code, says in [
            (dict(model="other"), grpc.StatusCode.NOT_FOUND, "no served model 'other'"),
            (dict(sampling=generation_pb2.SamplingParams(n=2)), grpc.StatusCode.INVALID_ARGUMENT, "sampling.n"),
            (dict(sampling=generation_pb2.SamplingParams(min_p=0.1)), grpc.StatusCode.INVALID_ARGUMENT, "min_p"),
        ]:
            with pytest.raises(grpc.RpcError) as err:
                generate(engine.address, **fields)
            assert err.value.code() == code and says in err.value.details(), err.value.details()


def test_a_backend_refusal_before_output_is_the_calls_status():
    backend = Backend(refuse=Refusal(RefusalCode.UNIMPLEMENTED, "sampling.guided: regex is not supported here"))
    with running(backend) as engine:
        with pytest.raises(grpc.RpcError) as err:
            generate(engine.address)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED and "regex" in err.value.details()


@pytest.mark.parametrize("fail, code, says", [
    ("raise", common_pb2.ERROR_CODE_INTERNAL, "RuntimeError"),
    ("failure", common_pb2.ERROR_CODE_KV_TRANSFER_FAILED, "KV transfer failed"),
    ("short", common_pb2.ERROR_CODE_INTERNAL, "1 sequence(s) unfinished"),
])
def test_a_failure_after_acceptance_is_the_streams_terminal_error(fail, code, says):
    with running(Backend(fail=fail)) as engine:
        out = generate(engine.address)
    assert out[0].WhichOneof("kind") == "chunk"
    assert out[-1].WhichOneof("kind") == "error" and out[-1].error.code == code and says in out[-1].error.message


def test_abort_ends_the_stream_with_aborted_and_reaches_the_backend():
    backend = Backend(hold=True)
    with running(backend) as engine:
        with grpc.insecure_channel(engine.address) as channel:
            stream = inference_grpc.InferenceStub(channel).Generate(
                generation_pb2.GenerateRequest(text="hi", request_id="r-1"), timeout=10)
            assert next(stream).WhichOneof("kind") == "chunk"
            answer = lifecycle_grpc.LifecycleStub(channel).Abort(lifecycle_pb2.AbortRequest(
                request_ids=common_pb2.StringList(values=["r-1", "nobody"])))
            rest = list(stream)
    assert answer.aborted == 1
    assert rest[-1].error.code == common_pb2.ERROR_CODE_ABORTED and not rest[-1].error.retryable
    assert backend.aborts == [("r-1", AbortReason.ABORT_RPC)]


class Queueing(Backend):
    """Holds every request in its queue, with no output, until it is aborted."""

    def __init__(self):
        super().__init__()
        self.queued = threading.Event()
        self.left_queue: list[str] = []

    async def generate(self, request):
        self.queued.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.left_queue.append(request.request_id)
        yield Chunk((65,), text="A")   # never reached


def test_abort_ends_a_request_the_backend_has_not_started_at_once():
    backend = Queueing()
    with running(backend) as engine:
        with grpc.insecure_channel(engine.address) as channel:
            stream = inference_grpc.InferenceStub(channel).Generate(
                generation_pb2.GenerateRequest(text="hi", request_id="q-1"), timeout=10)
            assert backend.queued.wait(10)
            answer = lifecycle_grpc.LifecycleStub(channel).Abort(lifecycle_pb2.AbortRequest(all=True))
            out = list(stream)
    assert answer.aborted == 1
    assert [m.WhichOneof("kind") for m in out] == ["error"]
    assert out[0].error.code == common_pb2.ERROR_CODE_ABORTED
    assert backend.left_queue == ["q-1"] and backend.aborts == [("q-1", AbortReason.ABORT_RPC)]


def test_a_client_that_goes_away_has_its_request_aborted_in_the_backend():
    backend = Backend(hold=True)
    with running(backend) as engine:
        with grpc.insecure_channel(engine.address) as channel:
            stream = inference_grpc.InferenceStub(channel).Generate(
                generation_pb2.GenerateRequest(text="hi", request_id="r-2"))
            assert next(stream).WhichOneof("kind") == "chunk"
            stream.cancel()
            load = observability_grpc.ObservabilityStub(channel).GetLoad
            for _ in range(200):
                if load(load_pb2.GetLoadRequest()).running_requests == 0:
                    break
                threading.Event().wait(0.01)
    assert backend.aborts == [("r-2", AbortReason.CLIENT_CANCELLED)] and backend.running == {}


def test_a_stalled_consumer_is_aborted_and_leaves_the_load():
    async def scenario():
        server = Server(Backend())
        state = server.state
        loop = asyncio.get_running_loop()
        fresh, stuck = (InFlight(server.implementations["openengine.v1.Inference"].admission.admit(
            generation_pb2.GenerateRequest(text="x", request_id=rid))) for rid in ("fresh", "stuck"))
        state.in_flight.update(fresh=fresh, stuck=stuck)
        stuck.writing_since = loop.time() - 1.0
        fresh.writing_since = loop.time()
        watch = asyncio.ensure_future(server.implementations["openengine.v1.Inference"].watch_stalls(0.2))
        await asyncio.sleep(0.12)
        watch.cancel()
        return state, stuck

    state, stuck = asyncio.run(scenario())
    assert list(state.in_flight) == ["fresh"] and stuck.aborted is AbortReason.STALLED_CONSUMER
