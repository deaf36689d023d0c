"""The reference engine under fuzzed requests at the wire: for every request type of the
contract (and the standard health service), hypothesis builds messages from the descriptor with
extreme values (NaN and infinite floats, the ends of every integer type, unknown enum numbers,
long and odd strings, deep nesting) and sends them, and also sends raw random bytes. Every answer
must be OK or a status the spec documents (spec/services.md); never UNKNOWN, never INTERNAL for a
message that parses; and the engine's log holds no traceback."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openengine.contract import HEALTH_SERVICE, catalogue

from tests.engine.conftest import TOKEN, Records, running

# Most of its time is spent waiting on engines' streams and timers (see tests/conftest.py).
pytestmark = pytest.mark.waits

ROOT = Path(__file__).resolve().parents[2]
AUTH = (("authorization", f"Bearer {TOKEN}"),)
EXAMPLES = 12          # per RPC; keeps the whole module well under a minute
STREAM_MESSAGES = 3    # read at most this many messages of a stream, then cancel it
CALL_SECONDS = 3.0     # a unary call's deadline
STREAM_SECONDS = 0.4   # a stream's: long-lived streams (WatchLoad, Watch) simply end on it


def documented_statuses() -> set[grpc.StatusCode]:
    """The statuses of the table in spec/services.md, read from the spec itself."""
    text = (ROOT / "spec" / "services.md").read_text()
    table = text[text.index("| status | meaning in OpenEngine | retry |"):].split("\n\n", 1)[0]
    names = set(re.findall(r"`([A-Z_]+)`", table))
    return {grpc.StatusCode[name] for name in names} | {grpc.StatusCode.OK}


DOCUMENTED = documented_statuses()
# What the calling side itself ends a call with: its deadline, its cancel.
CLIENT_SIDE = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}

_F = FieldDescriptor
_INT_EDGES = {
    "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1),
}
_INT_KIND = {
    _F.TYPE_INT32: "int32", _F.TYPE_SINT32: "int32", _F.TYPE_SFIXED32: "int32",
    _F.TYPE_UINT32: "uint32", _F.TYPE_FIXED32: "uint32",
    _F.TYPE_INT64: "int64", _F.TYPE_SINT64: "int64", _F.TYPE_SFIXED64: "int64",
    _F.TYPE_UINT64: "uint64", _F.TYPE_FIXED64: "uint64",
}
_EXTREME_FLOATS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1.0, -1.0, 3.4e38, -3.4e38, 1e-45, 7.0, -3.0]
_ODD_STRINGS = ["", "x" * 5000, "\u0000", "é\u200b\U0001f600", "../../etc/passwd", "%s%n", "openengine.v1.Kv",
                "reference-byte-model"]


def scalar(field: FieldDescriptor) -> st.SearchStrategy:
    if field.type in _INT_KIND:
        lo, hi = _INT_EDGES[_INT_KIND[field.type]]
        return st.sampled_from([lo, hi, 0, 1, lo + 1, hi - 1]) | st.integers(lo, hi) | st.integers(0, 300)
    if field.type in (_F.TYPE_FLOAT, _F.TYPE_DOUBLE):
        width = 32 if field.type == _F.TYPE_FLOAT else 64
        return st.sampled_from(_EXTREME_FLOATS) | st.floats(width=width)
    if field.type == _F.TYPE_BOOL:
        return st.booleans()
    if field.type == _F.TYPE_STRING:
        return st.sampled_from(_ODD_STRINGS) | st.text(max_size=40)
    if field.type == _F.TYPE_BYTES:
        return st.binary(max_size=64)
    if field.type == _F.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.sampled_from(numbers) | st.sampled_from([-1, 99, 2**31 - 1])
    raise AssertionError(f"no strategy for {field.full_name}")


@st.composite
def messages(draw, descriptor, depth: int = 0):
    """A message of `descriptor` with a random subset of its fields set, at most one per oneof."""
    msg = GetMessageClass(descriptor)()
    chosen_oneof: set[str] = set()
    for field in descriptor.fields:
        if not draw(st.integers(0, 2)) == 0:   # about a third of the fields
            continue
        oneof = field.containing_oneof
        if oneof is not None:
            if oneof.name in chosen_oneof:
                continue
            chosen_oneof.add(oneof.name)
        sub = field.message_type
        if sub is not None and sub.GetOptions().map_entry:
            key, value = sub.fields_by_name["key"], sub.fields_by_name["value"]
            target = getattr(msg, field.name)
            for k in draw(st.lists(scalar(key), max_size=3)):
                if value.message_type is not None:
                    if depth < 3:
                        target[k].CopyFrom(draw(messages(value.message_type, depth + 1)))
                else:
                    target[k] = draw(scalar(value))
            continue
        if sub is not None:
            if depth >= 3:
                continue
            if field.is_repeated:
                for item in draw(st.lists(messages(sub, depth + 1), max_size=2)):
                    getattr(msg, field.name).add().CopyFrom(item)
            else:
                getattr(msg, field.name).CopyFrom(draw(messages(sub, depth + 1)))
            continue
        if field.is_repeated:
            getattr(msg, field.name).extend(draw(st.lists(scalar(field), max_size=4)))
        else:
            setattr(msg, field.name, draw(scalar(field)))
    return msg


def call(channel, path: str, method, payload: bytes, *, stream_seconds: float = STREAM_SECONDS) -> grpc.StatusCode:
    """Send `payload` as the request bytes; the status the call ended with."""
    ident = dict(request_serializer=None, response_deserializer=None)
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, **ident)(payload, timeout=stream_seconds, metadata=AUTH)
            try:
                for i, _ in enumerate(stream):
                    if i + 1 >= STREAM_MESSAGES:
                        stream.cancel()
                        return grpc.StatusCode.OK
            finally:
                stream.cancel()
        else:
            channel.unary_unary(path, **ident)(payload, timeout=CALL_SECONDS, metadata=AUTH)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


# Which engine serves which RPCs: role-scoped profiles need their role, and the admin RPCs that
# stop the engine (Drain, Sleep, Pause) get an engine of their own so the others keep serving.
ENGINES = {
    "aggregated": dict(),
    "decode": dict(role="decode", profiles=("kv", "load", "sessions", "runtime-events")),
    "encoder": dict(role="encoder", profiles=("encoder", "load")),
    "admin": dict(profiles=("admin", "load", "runtime-events")),
}


def _targets():
    out = []
    for rpc in catalogue().rpcs:
        if rpc.service == "openengine.v1.Admin":
            where = "admin"
        elif rpc.profile == "openengine.kv":
            where = "decode"
        elif rpc.profile == "openengine.encoder":
            where = "encoder"
        else:
            where = "aggregated"
        out.append((where, rpc.path, rpc.method))
    health = descriptor_pool.Default().FindServiceByName(HEALTH_SERVICE)
    out += [("aggregated", f"/{HEALTH_SERVICE}/{m.name}", m) for m in health.methods]
    return out


TARGETS = _targets()


@pytest.fixture(scope="module")
def engines():
    records = Records()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(records)
    root.setLevel(logging.DEBUG)
    import contextlib

    with contextlib.ExitStack() as stack:
        started = {name: stack.enter_context(running(token_delay_ms=1.0, **kw)) for name, kw in ENGINES.items()}
        try:
            yield started, records
        finally:
            root.removeHandler(records)
            root.setLevel(previous)


def _clean_log(records: Records) -> list[str]:
    return [f"{r.name}: {r.getMessage()[:200]}" for r in records.records
            if r.exc_info or "Traceback" in r.getMessage() or "Unexpected" in r.getMessage()
            or "ExecuteBatchError" in r.getMessage()]


@pytest.mark.slow
@pytest.mark.parametrize("where, path, method", TARGETS, ids=[t[1].rsplit(".", 1)[-1] for t in TARGETS])
def test_fuzzed_messages_get_documented_statuses(engines, where, path, method):
    started, records = engines
    engine, stubs = started[where]
    seen: dict[grpc.StatusCode, int] = {}

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(messages(method.input_type))
    def one(request):
        code = call(stubs.channel, path, method, request.SerializeToString())
        seen[code] = seen.get(code, 0) + 1
        assert code in DOCUMENTED | CLIENT_SIDE, (path, code, request)
        assert code != grpc.StatusCode.INTERNAL, (path, "INTERNAL for a message that parses", request)

    one()
    assert grpc.StatusCode.UNKNOWN not in seen
    assert not _clean_log(records), _clean_log(records)[:5]


@pytest.mark.slow
@pytest.mark.parametrize("where, path, method", TARGETS[::3], ids=[t[1].rsplit(".", 1)[-1] for t in TARGETS[::3]])
def test_random_bytes_get_documented_statuses(engines, where, path, method):
    started, records = engines
    engine, stubs = started[where]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.binary(max_size=200))
    def one(payload):
        code = call(stubs.channel, path, method, payload)
        assert code in DOCUMENTED | CLIENT_SIDE, (path, code, payload)

    one()
    assert not _clean_log(records), _clean_log(records)[:5]


@st.composite
def sampled_generate_requests(draw):
    """A valid Generate request with one or two sampling numbers fuzzed (sometimes the whole
    sampling message): the path past validation, and the number checks right at its edge."""
    from openengine.v1 import generation_pb2

    request = generation_pb2.GenerateRequest(prompt=draw(st.text(min_size=1, max_size=30)))
    if draw(st.integers(0, 3)) == 0:
        request.sampling.CopyFrom(draw(messages(generation_pb2.SamplingParams.DESCRIPTOR, depth=2)))
    fields = generation_pb2.SamplingParams.DESCRIPTOR.fields_by_name
    for name in draw(st.lists(st.sampled_from(sorted(NUMBER_FIELDS)), min_size=1, max_size=2, unique=True)):
        setattr(request.sampling, name, draw(scalar(fields[name])))
    request.sampling.ClearField("num_sequences")
    request.stopping.max_tokens = draw(st.integers(1, 4))
    return request


NUMBER_FIELDS = {"temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"}


@pytest.mark.slow
def test_generate_with_fuzzed_sampling(engines):
    from openengine.validate import number_violations

    started, records = engines
    engine, stubs = started["aggregated"]
    method = descriptor_pool.Default().FindMethodByName("openengine.v1.Inference.Generate")
    seen: dict[grpc.StatusCode, int] = {}

    @settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(sampled_generate_requests())
    def one(request):
        # A refusal comes before any message; a loaded machine gets a unary call's time for it.
        refused = bool(number_violations(request, vocab_size=257))
        code = call(stubs.channel, "/openengine.v1.Inference/Generate", method, request.SerializeToString(),
                    stream_seconds=CALL_SECONDS if refused else STREAM_SECONDS)
        seen[code] = seen.get(code, 0) + 1
        assert code in DOCUMENTED | CLIENT_SIDE and code != grpc.StatusCode.INTERNAL, (code, request)
        if refused:
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, request)

    one()
    assert seen.get(grpc.StatusCode.OK, 0) > 0, seen   # some got past validation and streamed
    assert not _clean_log(records), _clean_log(records)[:5]
