"""Discovery: the engine advertises exactly what it is configured with, and nothing else answers."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import message_factory

from openengine.contract import catalogue
from openengine.v1 import model_pb2, server_pb2

from tests.engine.conftest import running

CAT = catalogue()
CONFIGS = [
    dict(profiles=("core",)),
    dict(profiles=("load", "runtime-events")),
    dict(),  # every aggregated profile
    dict(role="prefill", profiles=("kv", "load")),
    dict(role="decode", profiles=("all",)),
    dict(role="encoder", profiles=("encoder", "admin")),
]


def _validate(stubs):
    from openengine.validate import validate_capabilities
    return validate_capabilities(stubs.caps(), server_info=stubs.info(), model_infos=[stubs.model()])


@pytest.mark.parametrize("kw", CONFIGS, ids=lambda kw: ",".join(kw.get("profiles", ("all",))) + "@" + kw.get("role", "aggregated"))
def test_advertises_exactly_the_configured_profiles_and_passes_the_validators(kw):
    with running(**kw) as (engine, stubs):
        caps, info, model = stubs.caps(), stubs.info(), stubs.model()
        expected = [p.name for p in engine.server.state.advertised]
        assert [p.name for p in caps.profiles] == expected
        if "profiles" in kw and "all" not in kw["profiles"]:
            wanted = {CAT.lookup(name).name for name in kw["profiles"]} | {"openengine.core"}
            assert set(expected) == wanted
        # Capability messages are set for advertised profiles only (REQ-CAP-006).
        for p in CAT.profiles:
            if p.capability_field:
                where = caps.models[0] if p.scope == "model" else caps   # model-scoped: per model
                assert where.HasField(p.capability_field) == (p.name in expected), p.name
        assert caps.revision == info.capability_revision == 1
        assert server_pb2.EngineRole.Name(info.engine_role) == "ENGINE_ROLE_" + kw.get("role", "aggregated").upper()
        model_scoped = [p for p in CAT.profiles if p.scope == "model" and p.name in expected]
        assert [p.name for p in caps.models[0].profiles] == [p.name for p in model_scoped]
        report = _validate(stubs)
        assert report.errors == [], report.errors


def test_configured_limits_are_advertised():
    with running(profiles=("load",), limits={"core": {"max_sequences": 3}, "load": {"min_watch_interval_ms": 25}}) as (_, stubs):
        caps = stubs.caps()
        assert caps.core.max_sequences == 3
        assert caps.observability.min_watch_interval_ms == 25


def _unadvertised_rpcs(advertised):
    return [r for r in CAT.rpcs if r.profile not in advertised]


def test_rpcs_of_unadvertised_profiles_answer_unimplemented():
    with running(profiles=("core",)) as (engine, stubs):
        rpcs = _unadvertised_rpcs({"openengine.core"})
        assert {r.service for r in rpcs} >= {"openengine.v1.Observability", "openengine.v1.Admin"}
        for rpc in rpcs:
            req = message_factory.GetMessageClass(rpc.method.input_type)()
            path = f"/{rpc.service}/{rpc.method.name}"
            kind = stubs.channel.unary_stream if rpc.method.server_streaming else stubs.channel.unary_unary
            call = kind(path, request_serializer=type(req).SerializeToString, response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as err:
                result = call(req, timeout=5)
                if rpc.method.server_streaming:
                    list(result)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED, rpc.name


def test_unknown_model_is_not_found(shared):
    _, stubs = shared
    with pytest.raises(grpc.RpcError) as err:
        stubs.control.GetModelInfo(model_pb2.GetModelInfoRequest(model="other"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_the_advertised_services(shared):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
    engine, stubs = shared
    stub = reflection_pb2_grpc.ServerReflectionStub(stubs.channel)
    responses = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    listed = {s.name for s in responses[0].list_services_response.service}
    assert set(engine.server.state.advertised_services()) <= listed
    assert "grpc.health.v1.Health" in listed and "openengine.v1.Control" in listed
    assert "openengine.v1.Encoder" not in listed


def test_revisions_are_upstreams_scale_and_a_revision_1_client_is_served(shared):
    _, stubs = shared
    info = stubs.info()
    assert info.schema_revision == catalogue().schema_revision == 2
    assert info.minimum_client_revision == 1 and info.schema_release
