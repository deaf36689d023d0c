"""The composed wire form of WatchLoadResponse parses as the message it stands for, and is byte for
byte what protobuf serializes whenever no update was coalesced."""

from __future__ import annotations

import pytest

from openengine.serve.loadwire import Framer, Snapshot
from openengine.v1 import load_pb2



def _load(**kw) -> load_pb2.LoadInfo:
    info = load_pb2.LoadInfo(instance_id="engine-a", running_requests=3, used_kv_blocks=1 << 40, **kw)
    info.timestamp.seconds, info.timestamp.nanos = 1_700_000_000, 123_456_789
    info.attributes["model"] = "m"
    info.ranks.add(data_parallel_rank=1, running_requests=2)
    return info


def _response(sequence: int, ts_ns: int, **kind) -> load_pb2.WatchLoadResponse:
    msg = load_pb2.WatchLoadResponse(sequence=sequence, **kind)
    msg.timestamp.seconds, msg.timestamp.nanos = divmod(ts_ns, 1_000_000_000)
    return msg


@pytest.mark.parametrize("sequence, ts_ns, coalesced", [
    (1, 1_700_000_000_000_000_001, 0), (0, 5, 7), (12345, 1_000_000_000, 1), (1 << 40, 999, 300)])
def test_snapshot_message_is_the_serialized_response(sequence, ts_ns, coalesced):
    load = _load()
    expected = _response(sequence, ts_ns, snapshot=load_pb2.LoadSnapshot(load=load, coalesced=coalesced))
    composed = Framer().snapshot(sequence, ts_ns, Snapshot.of(load), coalesced)
    assert load_pb2.WatchLoadResponse.FromString(composed) == expected
    if not coalesced:
        assert composed == expected.SerializeToString()


def test_a_large_snapshot_needs_a_multi_byte_length():
    load = _load()
    load.attributes["padding"] = "x" * 500
    expected = _response(3, 77, snapshot=load_pb2.LoadSnapshot(load=load, coalesced=2))
    assert load_pb2.WatchLoadResponse.FromString(Framer().snapshot(3, 77, Snapshot.of(load), 2)) == expected
    assert Framer().snapshot(3, 77, Snapshot.of(load), 0) == _response(
        3, 77, snapshot=load_pb2.LoadSnapshot(load=load)).SerializeToString()


def test_heartbeat_and_settings_messages():
    assert Framer().heartbeat(9, 1_234_567_890_123) == _response(
        9, 1_234_567_890_123, heartbeat=load_pb2.Heartbeat()).SerializeToString()
    settings = load_pb2.WatchLoadSettings(interval_ms=100, heartbeat_ms=1000, initial_snapshot=True, instance_id="a",
                                   capability_revision=4)
    assert Framer().settings(0, 42, settings) == _response(0, 42, settings=settings).SerializeToString()


def test_one_framer_frames_a_streams_messages_one_after_another():
    framer, load = Framer(), _load()
    shared = Snapshot.of(load)
    first = framer.snapshot(5, 1_000_000_001, shared, 3)
    second = framer.heartbeat(6, 2_000_000_000)
    assert load_pb2.WatchLoadResponse.FromString(first) == _response(5, 1_000_000_001,
                                                              snapshot=load_pb2.LoadSnapshot(load=load, coalesced=3))
    assert second == _response(6, 2_000_000_000, heartbeat=load_pb2.Heartbeat()).SerializeToString()
