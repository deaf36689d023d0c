"""What the SDK adds for engines beyond the core: layers that wrap a part of the assembled server,
the compatibility aliases served for any backend, and a backend told of run-state and revision
changes (`StateListener`)."""

from __future__ import annotations

import grpc
import pytest

from openengine.legacy.rev3.v1 import control_pb2 as rev3
from openengine.legacy.services import control_service_pb2_grpc as control_grpc
from openengine.serve import CannotServe, Gate, RunningServer, Server, ServeConfig
from openengine.serve.runstate import STOPPING
from openengine.v1 import discovery_pb2, discovery_service_pb2_grpc as discovery_grpc

from tests.serve.test_server import Backend, running


class Listening(Backend):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.heard: list[tuple] = []

    def state_changed(self, previous, current, reason):
        self.heard.append(("state", current.phase, reason))

    def revision_changed(self, previous, revision, changed):
        self.heard.append(("revision", previous, revision))


def test_a_layer_wraps_a_part_and_the_rest_is_the_sdks():
    seen = []

    def count_engine_info(server):
        inner = server.implementations["openengine.v1.Discovery"]

        class Counting:
            def __getattr__(self, name):
                return getattr(inner, name)

            async def GetEngineInfo(self, request, context):
                seen.append(request)
                return await inner.GetEngineInfo(request, context)
        server.implementations["openengine.v1.Discovery"] = Counting()

    plain = Server(Backend())
    assert type(plain.gate) is Gate and plain.interceptors == [plain.wire]
    with RunningServer(Backend, ServeConfig(port=0), layers=[count_engine_info]) as engine, \
            grpc.insecure_channel(engine.address) as channel:
        stub = discovery_grpc.DiscoveryStub(channel)
        info = stub.GetEngineInfo(discovery_pb2.GetEngineInfoRequest(), timeout=5)
        stub.GetCapabilities(discovery_pb2.GetCapabilitiesRequest(), timeout=5)
    assert info.engine_name == "test-engine" and len(seen) == 1


def test_an_alias_is_served_for_any_backend_through_the_v1_rpcs():
    with running(Backend(), aliases=("control",)) as engine, grpc.insecure_channel(engine.address) as channel:
        stub = control_grpc.ControlStub(channel)
        info = stub.GetServerInfo(rev3.GetServerInfoRequest(), timeout=5)
        assert info.engine_name == "test-engine" and info.minimum_client_revision == 3
        with pytest.raises(grpc.RpcError) as refused:       # Adapters is not advertised: as v1 would answer
            stub.ListLoras(rev3.ListLorasRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(CannotServe, match="unknown alias 'contrl'"):
        Server(Backend(), ServeConfig(aliases=("contrl",)))


def test_a_state_listener_hears_the_shutdown():
    backend = Listening()
    with running(backend):
        pass
    assert backend.heard == [("state", STOPPING, "shutdown")]
