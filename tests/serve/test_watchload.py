"""WatchLoad's composed wire form parses as the WatchLoadResponse it stands for (and is byte for
byte what protobuf serializes when nothing was coalesced), and a stream whose backend reports a
figure the protocol cannot carry ends INTERNAL, naming it."""

from __future__ import annotations

import grpc
import pytest

from openengine.serve import Load
from openengine.serve.load import Framer, Snapshot
from openengine.v1 import load_pb2, observability_service_pb2_grpc as observability_grpc, server_pb2

from tests.serve.test_server import Backend, running


def _load() -> server_pb2.LoadInfo:
    info = server_pb2.LoadInfo(instance_id="engine-a", timestamp_unix_nanos=1_700_000_000_123_456_789,
                               running_requests=3, used_kv_blocks=1 << 40)
    info.attributes.update({"model": "m", "padding": "x" * 500})
    info.ranks.add(data_parallel_rank=1, running_requests=2)
    return info


@pytest.mark.parametrize("sequence, ts_ns, coalesced", [(0, 5, 7), (12345, 1_000_000_000, 0), (1 << 40, 999, 300)])
def test_composed_messages_are_the_responses_they_stand_for(sequence, ts_ns, coalesced):
    framer, load = Framer(), _load()

    def response(**kind):
        return load_pb2.WatchLoadResponse(sequence=sequence, timestamp_unix_nanos=ts_ns, **kind)

    expected = response(snapshot=load_pb2.LoadSnapshot(load=load, coalesced=coalesced))
    composed = framer.snapshot(sequence, ts_ns, Snapshot.of(load), coalesced)
    assert load_pb2.WatchLoadResponse.FromString(composed) == expected
    if not coalesced:
        assert composed == expected.SerializeToString()
    assert framer.heartbeat(sequence, ts_ns) == response(heartbeat=load_pb2.Heartbeat()).SerializeToString()
    settings = load_pb2.WatchLoadSettings(interval_ms=100, heartbeat_ms=1000, instance_id="a", capability_revision=4)
    assert framer.settings(sequence, ts_ns, settings) == response(settings=settings).SerializeToString()


def test_a_stream_of_wrong_figures_ends_internal_naming_the_figure():
    with running(Backend(load=Load(queued_requests=-1))) as engine, grpc.insecure_channel(engine.address) as channel:
        stream = observability_grpc.ObservabilityStub(channel).WatchLoad(load_pb2.WatchLoadRequest(), timeout=10)
        with pytest.raises(grpc.RpcError) as err:
            list(stream)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "Backend.load() queued_requests is -1" in err.value.details()
