"""The wire form of `WatchLoadResponse`, composed from serialized parts instead of one message per
stream.

A snapshot is serialized once (`Snapshot.wire`: a `WatchLoadResponse` holding only that snapshot)
and shared by every stream it is offered to. Each stream serializes only what is its own, a
`WatchLoadResponse` with its sequence and timestamp (and, when updates were folded in, one holding
only the snapshot's `coalesced` count), and sends the concatenation. Protobuf defines parsing a
concatenation as merging the messages parsed from its parts, and a singular message field seen
twice as the merge of both, so every client reads exactly the message the stream means (a test
holds the parsed forms equal to the directly built message).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import timestamp_pb2

from openengine.v1 import load_pb2

_NS = 1_000_000_000
_HEARTBEAT = load_pb2.WatchLoadResponse(heartbeat=load_pb2.Heartbeat()).SerializeToString()


@dataclass(frozen=True, eq=False)
class Snapshot:
    """One built `LoadInfo` and its serialized form, shared read-only by every stream it is
    offered to (a stream never changes it)."""

    load: load_pb2.LoadInfo
    wire: bytes   # WatchLoadResponse(snapshot=LoadSnapshot(load=load)), serialized

    @classmethod
    def of(cls, load: load_pb2.LoadInfo) -> "Snapshot":
        message = load_pb2.WatchLoadResponse(snapshot=load_pb2.LoadSnapshot(load=load))
        return cls(load, message.SerializeToString())


def _head(sequence: int, ts_ns: int) -> bytes:
    """The fields every message starts with: its sequence and timestamp."""
    seconds, nanos = divmod(ts_ns, _NS)
    return load_pb2.WatchLoadResponse(
        sequence=sequence, timestamp=timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)).SerializeToString()


def snapshot_message(sequence: int, ts_ns: int, snapshot: Snapshot, coalesced: int) -> bytes:
    """A `snapshot` message around the snapshot's shared bytes."""
    if coalesced:
        tail = load_pb2.WatchLoadResponse(snapshot=load_pb2.LoadSnapshot(coalesced=coalesced)).SerializeToString()
        return _head(sequence, ts_ns) + snapshot.wire + tail
    return _head(sequence, ts_ns) + snapshot.wire


def heartbeat_message(sequence: int, ts_ns: int) -> bytes:
    return _head(sequence, ts_ns) + _HEARTBEAT


def settings_message(sequence: int, ts_ns: int, settings: load_pb2.WatchLoadSettings) -> bytes:
    return _head(sequence, ts_ns) + load_pb2.WatchLoadResponse(settings=settings).SerializeToString()
