"""The wire form of `WatchLoadResponse`, composed from serialized parts instead of one message per
stream.

A snapshot is serialized once (`Snapshot.wire`: a `WatchLoadResponse` holding only that snapshot)
and shared by every stream it is offered to. Each stream serializes only what is its own, a
`WatchLoadResponse` with its sequence and timestamp (and, when updates were folded in, one holding
only the snapshot's `coalesced` count), and sends the concatenation (`Framer`). Protobuf defines parsing a
concatenation as merging the messages parsed from its parts, and a singular message field seen
twice as the merge of both, so every client reads exactly the message the stream means (a test
holds the parsed forms equal to the directly built message).
"""

from __future__ import annotations

from dataclasses import dataclass

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


class Framer:
    """One stream's messages: its own fields serialized from one message it keeps and updates (a
    stream's messages go out one at a time), the shared snapshot bytes appended as they are."""

    def __init__(self):
        self._head = load_pb2.WatchLoadResponse()
        self._timestamp = self._head.timestamp

    def head(self, sequence: int, ts_ns: int) -> bytes:
        """The fields every message starts with: its sequence and timestamp."""
        self._head.sequence = sequence
        self._timestamp.seconds, self._timestamp.nanos = divmod(ts_ns, _NS)
        return self._head.SerializeToString()

    def snapshot(self, sequence: int, ts_ns: int, snapshot: Snapshot, coalesced: int) -> bytes:
        """A `snapshot` message around the snapshot's shared bytes."""
        if coalesced:
            tail = load_pb2.WatchLoadResponse(snapshot=load_pb2.LoadSnapshot(coalesced=coalesced)).SerializeToString()
            return self.head(sequence, ts_ns) + snapshot.wire + tail
        return self.head(sequence, ts_ns) + snapshot.wire

    def heartbeat(self, sequence: int, ts_ns: int) -> bytes:
        return self.head(sequence, ts_ns) + _HEARTBEAT

    def settings(self, sequence: int, ts_ns: int, settings: load_pb2.WatchLoadSettings) -> bytes:
        return self.head(sequence, ts_ns) + load_pb2.WatchLoadResponse(settings=settings).SerializeToString()
