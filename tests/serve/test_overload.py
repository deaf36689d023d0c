"""Bounded admission in the SDK (REQ-CORE-014): with `max_queued_requests` advertised, the engine
takes `max_running_requests + max_queued_requests` Generate calls and refuses the next one with a
retryable RESOURCE_EXHAUSTED whose EngineError (OVERLOADED) travels in the status details, counted
in LoadInfo.rejected_requests; room comes back as requests end; 0 means no bound."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from grpc_status import rpc_status

from openengine.serve import (
    EngineDescription, Final, FinishReason, Load, Model, Refusal, RefusalCode, RunningServer, ServeConfig, Tokenizer,
)
from openengine.v1 import (
    control_service_pb2_grpc as control_grpc, error_pb2, generation_pb2, inference_service_pb2_grpc as inference_grpc,
    lifecycle_pb2, server_pb2,
)

from tests.serve.test_server import Backend, generate, running

MODEL = Model("m", max_context_tokens=512, max_output_tokens=64, tokenizer=Tokenizer("bytes", 256, eos_token_id=0))
PATIENCE_S = 20.0
ALL = lifecycle_pb2.AbortRequest(all_requests=lifecycle_pb2.AllRequests())


def engine_error(err: grpc.RpcError) -> error_pb2.EngineError:
    """The EngineError a refusal carries in its status details."""
    status = rpc_status.from_call(err)
    error = error_pb2.EngineError()
    assert status is not None and status.details[0].Unpack(error)
    return error


class Holding:
    """Holds every request until it is aborted; `slots` of them count as running."""

    def __init__(self, running: int, queued: int | None):
        core = {"max_running_requests": running}
        if queued is not None:
            core["max_queued_requests"] = queued
        self.limits = {"core": core, "load": {}}
        self.held: dict[str, asyncio.Event] = {}
        self.slots = running

    def describe(self):
        return EngineDescription("gate", "0.1", (MODEL,), limits=self.limits)

    def attach(self, engine):
        self.engine = engine

    async def generate(self, request):
        stop = self.held[request.request_id] = asyncio.Event()
        try:
            await stop.wait()
            yield Final(FinishReason.LENGTH, prompt_tokens=1, completion_tokens=0)
        finally:
            del self.held[request.request_id]

    async def abort(self, request_id, reason):
        if request_id in self.held:
            self.held[request_id].set()

    def load(self):
        running = min(len(self.held), self.slots)
        return Load(running_requests=running, queued_requests=len(self.held) - running)


class Client:
    def __init__(self, address: str):
        self.channel = grpc.insecure_channel(address)
        self.inference = inference_grpc.InferenceStub(self.channel)
        self.control = control_grpc.ControlStub(self.channel)
        self.calls: list = []

    def hold(self, count: int) -> list[str]:
        ids = [f"held-{len(self.calls) + i}" for i in range(count)]
        self.calls += [self.inference.Generate(generation_pb2.GenerateRequest(request_id=rid, prompt="x"), timeout=60)
                       for rid in ids]
        return ids

    def load(self) -> server_pb2.LoadInfo:
        return self.control.GetLoad(server_pb2.GetLoadRequest(), timeout=5)

    def wait_accepted(self, count: int) -> server_pb2.LoadInfo:
        deadline = time.monotonic() + PATIENCE_S
        while True:
            load = self.load()
            if load.running_requests + load.queued_requests >= count or time.monotonic() > deadline:
                return load
            time.sleep(0.01)

    def one_more(self) -> grpc.RpcError | None:
        """The error of one more request, or None when it was accepted (then it is aborted)."""
        call = self.inference.Generate(generation_pb2.GenerateRequest(request_id="one-more", prompt="x"), timeout=60)
        try:
            next(call)
        except grpc.RpcError as err:
            return err
        return None

    def release_all(self) -> None:
        self.control.Abort(ALL, timeout=5)
        for call in self.calls:
            list(call)
        self.calls = []


@pytest.fixture
def bounded():
    with RunningServer(lambda: Holding(running=2, queued=3), ServeConfig(port=0)) as engine:
        client = Client(engine.address)
        yield client
        client.channel.close()


def test_the_request_beyond_running_plus_queue_is_refused_retryable_and_counted(bounded):
    bounded.hold(5)
    assert bounded.wait_accepted(5).queued_requests == 3
    err = bounded.one_more()
    assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_running_requests 2 + max_queued_requests 3" in err.details()
    error = engine_error(err)
    assert error.code == error_pb2.ERROR_CODE_OVERLOADED and error.retryable
    assert bounded.load().rejected_requests == 1
    assert bounded.one_more() is not None
    assert bounded.load().rejected_requests == 2
    bounded.release_all()


def test_room_comes_back_when_requests_end(bounded):
    bounded.hold(5)
    bounded.wait_accepted(5)
    assert bounded.one_more() is not None
    bounded.release_all()
    bounded.hold(5)
    assert bounded.wait_accepted(5).running_requests + bounded.load().queued_requests == 5
    assert bounded.load().rejected_requests == 1   # cumulative for the instance
    bounded.release_all()


def test_every_accepted_request_ends_with_its_final_after_a_refusal(bounded):
    bounded.hold(5)
    bounded.wait_accepted(5)
    assert bounded.one_more() is not None
    bounded.control.Abort(ALL, timeout=5)
    ends = [[m.finished.reason for m in call][-1] for call in bounded.calls]
    bounded.calls = []
    assert ends == [generation_pb2.FINISH_REASON_CANCELLED] * 5   # each ended by the Abort


def test_zero_advertises_no_bound():
    with RunningServer(lambda: Holding(running=1, queued=None), ServeConfig(port=0)) as engine:
        client = Client(engine.address)
        client.hold(12)
        load = client.wait_accepted(12)
        assert (load.running_requests, load.queued_requests, load.rejected_requests) == (1, 11, 0)
        client.release_all()
        client.channel.close()


def test_only_a_retryable_refusal_carries_an_engine_error():
    retryable = Backend(refuse=Refusal(RefusalCode.UNAVAILABLE, "not now", retryable=True))
    with running(retryable) as engine, pytest.raises(grpc.RpcError) as err:
        generate(engine.address)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and err.value.details() == "not now"
    assert engine_error(err.value).retryable
    plain = Backend(refuse=Refusal(RefusalCode.INVALID_ARGUMENT, "sampling.top_p: 2 is outside (0, 1]"))
    with running(plain) as engine, pytest.raises(grpc.RpcError) as err:
        generate(engine.address)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and rpc_status.from_call(err.value) is None


def test_on_shutdown_running_and_queued_streams_end_with_a_retryable_draining_error_and_ok():
    """What the SDK's Server.stop says: every accepted stream ends with a retryable DRAINING error
    (with its usage), the status is OK."""
    engine = RunningServer(lambda: Holding(running=1, queued=2), ServeConfig(port=0)).start()
    client = Client(engine.address)
    try:
        client.hold(3)
        client.wait_accepted(3)
        engine.stop()
        ends = []
        for call in client.calls:
            messages = list(call)   # raises on a non-OK status
            last = messages[-1]
            ends.append((last.error.code, last.error.retryable, last.HasField("usage"), call.code()))
        assert ends == [(error_pb2.ERROR_CODE_DRAINING, True, True, grpc.StatusCode.OK)] * 3
    finally:
        client.channel.close()
        engine.stop()


@pytest.mark.slow
def test_a_burst_of_2000_calls_is_answered_by_the_engine_none_cancelled_by_grpc():
    """gRPC core cancels calls it holds beyond `grpc.server.max_pending_requests` (its default,
    1,000) at random: their clients saw CANCELLED with no retry hint. With the connection policy's
    max_pending_calls every call reaches admission: each is taken or refused retryable."""
    from openengine.v1 import generation_pb2 as gen

    async def burst(address: str, count: int) -> dict[str, int]:
        channels = [grpc.aio.insecure_channel(address) for _ in range(4)]
        stubs = [inference_grpc.InferenceStub(c) for c in channels]
        ends: dict[str, int] = {}

        async def one(i: int) -> None:
            request = gen.GenerateRequest(request_id=f"burst-{i}", prompt="x")
            try:
                async for _ in stubs[i % 4].Generate(request, timeout=120):
                    pass
                ends["OK"] = ends.get("OK", 0) + 1
            except grpc.aio.AioRpcError as err:
                ends[err.code().name] = ends.get(err.code().name, 0) + 1

        await asyncio.gather(*(one(i) for i in range(count)))
        for channel in channels:
            await channel.close()
        return ends

    class Quick(Holding):
        async def generate(self, request):
            yield Final(FinishReason.LENGTH, prompt_tokens=1, completion_tokens=0)

    with RunningServer(lambda: Quick(running=4, queued=12), ServeConfig(port=0)) as engine:
        ends = asyncio.run(burst(engine.address, 2000))
    assert set(ends) <= {"OK", "RESOURCE_EXHAUSTED"}, ends
