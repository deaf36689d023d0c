"""The server-wide wire policy: raw garbage to every method of every service gets INTERNAL with a
plain message, the log gets one line per cause and no traceback; health List; the bearer scheme."""

from __future__ import annotations

import logging

import grpc
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection

from openengine.contract import HEALTH_SERVICE
from openengine.v1 import admin_pb2, generation_pb2

from tests.engine.conftest import TOKEN, running

# Each fails to parse as any message: a tag with a truncated varint, a length-delimited field 1
# longer than the bytes that follow, an end-group tag without its group, and a string field with invalid UTF-8
# (field 1 is a string in most requests; where it is not, the other payloads still apply).
GARBAGE = (b"\x08", b"\x0a\x05ab", b"\x0c", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
INVALID_UTF8_TEXT = b"\x1a\x02\xff\xfe"  # GenerateRequest.prompt = b"\xff\xfe"

PYTHON_INTERNALS = ("<class", "Traceback", "DecodeError", "Exception", "File \"", ".py")


def all_methods(engine) -> list[tuple[str, object]]:
    """(full method path, method descriptor) of every method the engine's main address serves."""
    pool = descriptor_pool.Default()
    names = list(engine.server.state.catalogue.services) + [HEALTH_SERVICE, reflection.SERVICE_NAME]
    out = []
    for name in names:
        service = pool.FindServiceByName(name)
        out += [(f"/{name}/{m.name}", m) for m in service.methods]
    return out


def call_raw(channel, path: str, method, payload: bytes, metadata=()):
    """Send `payload` as the request bytes, whatever the method's request type; return the error."""
    ident = dict(request_serializer=None, response_deserializer=None)
    try:
        if method.client_streaming:
            list(channel.stream_stream(path, **ident)(iter([payload]), timeout=10, metadata=metadata))
        elif method.server_streaming:
            list(channel.unary_stream(path, **ident)(payload, timeout=10, metadata=metadata))
        else:
            channel.unary_unary(path, **ident)(payload, timeout=10, metadata=metadata)
    except grpc.RpcError as err:
        return err
    return None


@pytest.fixture
def engine_log(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


def assert_clean_log(caplog):
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


def test_garbage_to_every_method_of_every_service_is_internal_without_python_internals(engine_log):
    # Every profile the role allows (the others still route).
    with running() as (engine, stubs):
        methods = all_methods(engine)
        assert len(methods) > 20
        for path, method in methods:
            for payload in GARBAGE:
                err = call_raw(stubs.channel, path, method, payload, metadata=(("authorization", f"Bearer {TOKEN}"),))
                assert err is not None, (path, payload)
                assert err.code() == grpc.StatusCode.INTERNAL, (path, payload, err.code(), err.details())
                details = err.details()
                assert method.input_type.full_name in details, (path, details)
                for word in PYTHON_INTERNALS:
                    assert word not in details, (path, details)
        err = call_raw(stubs.channel, "/openengine.v1.Inference/Generate",
                       None or _generate_method(methods), INVALID_UTF8_TEXT)
        assert err.code() == grpc.StatusCode.INTERNAL and "UTF-8" in err.details()
        # The engine still answers normally afterwards.
        assert stubs.info().instance_id
    assert_clean_log(engine_log)
    lines = [r for r in engine_log.records if "undecodable request" in r.getMessage()]
    assert 1 <= len(lines) <= 3, [r.getMessage() for r in lines]


def _generate_method(methods):
    return dict(methods)["/openengine.v1.Inference/Generate"]


def test_health_list_reports_every_name_check_answers():
    with running(profiles=("load",)) as (engine, stubs):
        listed = stubs.health.List(health_pb2.HealthListRequest()).statuses
        expected = set(engine.server.state.advertised_services()) | {""}
        assert set(listed) == expected
        for name, status in listed.items():
            assert stubs.health.Check(health_pb2.HealthCheckRequest(service=name)).status == status.status


def test_bearer_scheme_is_case_insensitive_and_token_exact():
    headers = [(f"Bearer {TOKEN}", True), (f"bearer {TOKEN}", True), (f"BEARER {TOKEN}", True),
               (f"BeArEr  {TOKEN}", True), (f"Bearer {TOKEN}x", False), (f"Basic {TOKEN}", False), (TOKEN, False),
               ("Bearer", False), ("", False), (f"Bearer{TOKEN}", False), (f"bearer {TOKEN}-wrong", False)]
    with running(profiles=("admin",)) as (engine, stubs):
        for header, ok in headers:
            try:
                stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=(("authorization", header),))
                accepted = True
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.UNAUTHENTICATED, header
                accepted = False
            assert accepted is ok, header


@pytest.mark.parametrize("field, value", [
    ("temperature", float("nan")), ("temperature", float("inf")), ("min_p", float("nan")),
    ("presence_penalty", float("nan")), ("frequency_penalty", float("-inf")), ("repetition_penalty", float("nan")),
    ("repetition_penalty", -3.0), ("temperature", -1.0), ("top_p", 7.0),
])
def test_generate_refuses_numbers_no_engine_can_act_on(shared, field, value):
    engine, stubs = shared
    req = generation_pb2.GenerateRequest(prompt="hi", stopping=generation_pb2.StoppingOptions(max_tokens=1))
    setattr(req.sampling, field, value)
    with pytest.raises(grpc.RpcError) as err:
        list(stubs.inference.Generate(req, timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"sampling.{field}" in err.value.details() and "REQ-SVC-005" in err.value.details()


def test_update_config_refuses_a_non_finite_double(shared):
    engine, stubs = shared
    request = admin_pb2.UpdateConfigRequest(validate_only=True, updates=[
        admin_pb2.LimitUpdate(limit="openengine.core.max_logprobs", double_value=float("nan"))])
    with pytest.raises(grpc.RpcError) as err:
        stubs.admin.UpdateConfig(request, metadata=(("authorization", f"Bearer {TOKEN}"),))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "updates[0].double_value" in err.value.details()
