"""Servers that misbehave at the transport or message level: the runner must end every case with
a failure or error that says why, within its deadlines, and never hang or crash."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import grpc
import pytest

from openengine.conformance import Outcome

from tests.conformance.conftest import run_suite

# Most of its time is spent waiting on engines' streams and timers (see tests/conftest.py).
pytestmark = pytest.mark.waits

FAST = {"rpc_timeout": 0.5, "case_timeout": 1.5}


class _TcpServer:
    """Accepts connections and then does `behaviour(conn)`: nothing, garbage, or close."""

    def __init__(self, behaviour: str):
        self.behaviour = behaviour
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            if self.behaviour == "close":
                conn.close()
                continue
            self._conns.append(conn)
            if self.behaviour == "garbage":
                try:
                    conn.sendall(b"\x00\xffthis is not HTTP/2 at all\r\n" * 64)
                except OSError:
                    pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(2)
        for c in self._conns:
            c.close()
        self.sock.close()


def _assert_bounded_and_reported(report, seconds, budget):
    assert seconds < budget, f"the run took {seconds:.1f} s"
    assert report.results, "no result at all"
    assert not report.ok and report.exit_code == 1
    assert all(r.outcome in (Outcome.FAIL, Outcome.ERROR) for r in report.results)
    assert all(r.reason for r in report.results)
    discovery = next(r for r in report.results if r.id == "core.discovery.answers")
    assert discovery.outcome is Outcome.FAIL


@pytest.mark.parametrize("behaviour", ["silent", "garbage", "close"])
def test_transport_level_hostility_is_an_unusable_target_not_a_verdict(behaviour):
    """Something that does not speak gRPC is a wrong address, reported in one line before any
    case runs, never as 47 failed cases."""
    from openengine.conformance import TargetUnusable

    with _TcpServer(behaviour) as server:
        t0 = time.monotonic()
        with pytest.raises(TargetUnusable) as err:
            run_suite(server.address, **FAST)
        assert time.monotonic() - t0 < 10
    message = str(err.value)
    assert message.startswith(f"cannot reach {server.address}: ") and "\n" not in message


class _Hostile:
    """A gRPC Control whose answers are too big, malformed, or too slow; a Generate that hangs."""

    def __init__(self, mode: str):
        self.mode = mode

    async def serve(self, started: threading.Event, stop: asyncio.Event, box: dict):
        from openengine.v1 import (
            capabilities_pb2, common_pb2, control_service_pb2_grpc, discovery_service_pb2_grpc,
            inference_service_pb2_grpc, lifecycle_pb2, model_pb2, server_pb2,
        )

        mode = self.mode

        def server_info():
            return server_pb2.ServerInfo(instance_id="hostile", engine_role=server_pb2.ENGINE_ROLE_AGGREGATED,
                                         capability_revision=1, supported_models=["m"])

        class Control(control_service_pb2_grpc.ControlServicer):
            async def GetServerInfo(self, request, context):
                if mode == "oversized":
                    info = server_info()
                    info.supported_models.extend(["x" * 1024] * 6000)   # about 6 MiB
                    return info
                if mode == "slow":
                    await asyncio.sleep(30)
                return server_info()

            async def GetModelInfo(self, request, context):
                return model_pb2.ModelInfo(served_model_name="m", max_output_tokens=16)

            async def GetLoad(self, request, context):
                return server_pb2.LoadInfo(instance_id="hostile", running_requests=0, queued_requests=0)

            async def Health(self, request, context):
                return lifecycle_pb2.HealthResponse(state=lifecycle_pb2.HEALTH_STATE_READY)

        class Discovery(discovery_service_pb2_grpc.DiscoveryServicer):
            async def GetCapabilities(self, request, context):
                return capabilities_pb2.Capabilities(
                    profiles=[common_pb2.ServiceProfile(name="openengine.core", major=1)], revision=1)

        class Inference(inference_service_pb2_grpc.InferenceServicer):
            async def Generate(self, request, context):
                await asyncio.sleep(30)
                yield  # pragma: no cover

        def garbage(_request):
            return b"\xff\xff\xff\xff not a protobuf message"

        server = grpc.aio.server(options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
        if mode == "malformed":
            handler = grpc.method_handlers_generic_handler("openengine.v1.Control", {
                name: grpc.unary_unary_rpc_method_handler(
                    lambda req, ctx: garbage(req), request_deserializer=lambda b: b,
                    response_serializer=lambda b: b)
                for name in ("GetServerInfo", "GetModelInfo")})
            server.add_generic_rpc_handlers((handler,))
        else:
            control_service_pb2_grpc.add_ControlServicer_to_server(Control(), server)
        discovery_service_pb2_grpc.add_DiscoveryServicer_to_server(Discovery(), server)
        inference_service_pb2_grpc.add_InferenceServicer_to_server(Inference(), server)
        box["address"] = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        started.set()
        await stop.wait()
        await server.stop(None)


@pytest.fixture
def hostile():
    servers = []

    def start(mode: str) -> str:
        started, box = threading.Event(), {}
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        t = threading.Thread(target=loop.run_until_complete,
                             args=(_Hostile(mode).serve(started, stop, box),), daemon=True)
        t.start()
        assert started.wait(5)
        servers.append((loop, stop, t))
        return box["address"]

    yield start
    for loop, stop, t in servers:
        loop.call_soon_threadsafe(stop.set)
        t.join(5)


@pytest.mark.parametrize("mode", ["oversized", "malformed", "slow"])
def test_message_level_hostility_fails_discovery(hostile, mode):
    address = hostile(mode)
    t0 = time.monotonic()
    report = run_suite(address, **FAST)
    _assert_bounded_and_reported(report, time.monotonic() - t0, 10)
    assert report.discovery_error


@pytest.mark.slow      # waits out the runner's deadlines
def test_a_hanging_rpc_fails_its_case_with_a_reason(hostile):
    address = hostile("hangs")
    t0 = time.monotonic()
    report = run_suite(address, patterns=["core.generate.*", "core.abort.*"], **FAST)
    # Bounded: each case by its timeout and the checks around it by a deadline or two.
    assert time.monotonic() - t0 < len(report.results) * (FAST["case_timeout"] + 0.5) + 5
    assert report.results and report.exit_code == 1
    for r in report.results:
        if r.outcome is Outcome.SKIP:     # a feature the engine does not advertise
            continue
        assert r.outcome is Outcome.FAIL, (r.id, r.outcome, r.reason)
        assert "DEADLINE_EXCEEDED" in r.reason or "did not answer" in r.reason, r.reason
