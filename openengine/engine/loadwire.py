"""The wire form of `WatchLoadResponse`, composed from parts instead of serialized per stream.

A snapshot is serialized once (`Snapshot.field`, the encoded `LoadInfo`) and shared by every stream
it is offered to; each stream then writes only what is its own, the sequence, the message
timestamp and the coalesced count, around those bytes. Protobuf's encoding of a message is the
concatenation of its fields' encodings, so composing the fields in field-number order gives
exactly the bytes `WatchLoadResponse.SerializeToString()` gives (a test holds the two equal).

Field numbers (proto/openengine/v1/load.proto): WatchLoadResponse sequence = 1, timestamp = 2,
settings = 3, snapshot = 4, heartbeat = 5; LoadSnapshot load = 1, coalesced = 2; Timestamp
seconds = 1, nanos = 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from openengine.v1 import load_pb2

_NS = 1_000_000_000
# Tags: (field number << 3) | wire type (0 varint, 2 length-delimited).
_SEQUENCE, _TIMESTAMP, _SETTINGS, _SNAPSHOT, _HEARTBEAT = b"\x08", b"\x12", b"\x1a", b"\x22", b"\x2a"
_LOAD, _COALESCED = b"\x0a", b"\x10"
_SECONDS, _NANOS = b"\x08", b"\x10"
_SMALL = [bytes((n,)) for n in range(0x80)]


def varint(n: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """One built `LoadInfo` and its serialized bytes, shared read-only by every stream it is
    offered to (a stream never changes it)."""

    load: load_pb2.LoadInfo
    field: bytes   # LoadSnapshot.load as encoded in a snapshot: tag, length, the LoadInfo bytes

    @classmethod
    def of(cls, load: load_pb2.LoadInfo) -> "Snapshot":
        wire = load.SerializeToString()
        return cls(load, _LOAD + varint(len(wire)) + wire)

    def for_instance(self, instance_id: str) -> "Snapshot":
        """The same snapshot reporting another instance id (only a fault asks for one)."""
        if instance_id == self.load.instance_id:
            return self
        load = load_pb2.LoadInfo()
        load.CopyFrom(self.load)
        load.instance_id = instance_id
        return Snapshot.of(load)


@lru_cache(maxsize=4)
def _seconds_field(seconds: int) -> bytes:
    """Timestamp.seconds encoded; it changes once a second, so its encoding is kept."""
    return _SECONDS + varint(seconds) if seconds else b""


def _head(sequence: int, ts_ns: int) -> bytes:
    """Sequence and timestamp, the fields every message starts with."""
    seconds, nanos = divmod(ts_ns, _NS)
    ts = _seconds_field(seconds) + (_NANOS + varint(nanos) if nanos else b"")
    head = _TIMESTAMP + _SMALL[len(ts)] + ts    # a Timestamp's encoding is under 128 bytes
    return _SEQUENCE + varint(sequence) + head if sequence else head


def snapshot_message(sequence: int, ts_ns: int, snapshot: Snapshot, coalesced: int) -> bytes:
    """A `snapshot` message around the snapshot's shared bytes."""
    field = snapshot.field
    if coalesced:
        tail = _COALESCED + varint(coalesced)
        return b"".join((_head(sequence, ts_ns), _SNAPSHOT, varint(len(field) + len(tail)), field, tail))
    return b"".join((_head(sequence, ts_ns), _SNAPSHOT, varint(len(field)), field))


def heartbeat_message(sequence: int, ts_ns: int) -> bytes:
    return _head(sequence, ts_ns) + _HEARTBEAT + b"\x00"


def settings_message(sequence: int, ts_ns: int, settings: load_pb2.WatchLoadSettings) -> bytes:
    body = settings.SerializeToString()
    return _head(sequence, ts_ns) + _SETTINGS + varint(len(body)) + body
