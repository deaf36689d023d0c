"""Load streaming: one-slot mailboxes, so a slow watcher never holds anyone up.

Each WatchLoad stream owns a `Watcher`. Updates (a periodic tick, or a load change for a
change-driven stream) are *offered* to the watcher's mailbox synchronously; an offer never awaits
anything. The mailbox holds at most one pending update: a newer offer replaces the pending one and
counts it as coalesced. The stream's own coroutine takes the pending update when it can write, so
a watcher whose client stopped reading (its writes blocked by HTTP/2 flow control) only makes its
own mailbox coalesce, and the publisher, other watchers and request processing never wait for it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

from google.protobuf import timestamp_pb2

from openengine.v1 import load_pb2


class Clock:
    """Wall-clock timestamps that never go backwards: anchored once, advanced by the monotonic
    clock, so a wall-clock step (NTP) cannot make a stream's timestamps decrease."""

    def __init__(self):
        self._wall0 = time.time_ns()
        self._mono0 = time.monotonic_ns()

    def now_ns(self) -> int:
        return self._wall0 + (time.monotonic_ns() - self._mono0)

    def timestamp(self, ns: int | None = None) -> timestamp_pb2.Timestamp:
        ns = self.now_ns() if ns is None else ns
        return timestamp_pb2.Timestamp(seconds=ns // 1_000_000_000, nanos=ns % 1_000_000_000)


@dataclass(eq=False)
class Watcher:
    """One WatchLoad stream's state: its effective settings and its one-slot mailbox."""

    interval_ms: int
    heartbeat_ms: int
    per_rank: bool
    revision: int
    pending: load_pb2.LoadInfo | None = None
    dirty: bool = False             # change-driven: an update is due, built when taken
    coalesced: int = 0
    closed_with: tuple | None = None  # (grpc.StatusCode, message) to end the stream with
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    timer: asyncio.TimerHandle | None = None
    count_coalesced: bool = True

    def offer(self, snapshot: load_pb2.LoadInfo | None) -> None:
        """Offer an update; never blocks. `None` marks a change whose snapshot is built on take."""
        if self.pending is not None or self.dirty:
            if self.count_coalesced:
                self.coalesced += 1
        if snapshot is None:
            self.dirty = True
            self.pending = None
        else:
            self.pending = snapshot
            self.dirty = False
        self.wake.set()

    def take(self, build: Callable[[], load_pb2.LoadInfo]) -> tuple[load_pb2.LoadInfo, int] | None:
        if self.pending is None and not self.dirty:
            return None
        snapshot = self.pending if self.pending is not None else build()
        coalesced, self.coalesced = self.coalesced, 0
        self.pending, self.dirty = None, False
        return snapshot, coalesced

    def close(self, code, message: str) -> None:
        self.closed_with = (code, message)
        self.wake.set()


class LoadPublisher:
    """The registry of open watchers and the fan-out of updates to them."""

    def __init__(self, build: Callable[[bool], load_pb2.LoadInfo]):
        self._build = build
        self.watchers: set[Watcher] = set()

    def __len__(self) -> int:
        return len(self.watchers)

    def open(self, watcher: Watcher) -> None:
        self.watchers.add(watcher)
        if watcher.interval_ms > 0:
            self._schedule(watcher)

    def _schedule(self, watcher: Watcher) -> None:
        loop = asyncio.get_running_loop()
        # A little past the interval, so consecutive periodic snapshots are never closer than it.
        watcher.timer = loop.call_later(watcher.interval_ms / 1000.0 + 0.0005, self._tick, watcher)

    def _tick(self, watcher: Watcher) -> None:
        if watcher not in self.watchers:
            return
        watcher.offer(self._build(watcher.per_rank))
        self._schedule(watcher)

    def close(self, watcher: Watcher) -> None:
        """Release everything the stream held: its timer and its registry entry."""
        if watcher.timer is not None:
            watcher.timer.cancel()
            watcher.timer = None
        self.watchers.discard(watcher)
        watcher.pending = None

    def changed(self) -> None:
        """The load changed: change-driven watchers get an update (built when they take it)."""
        for watcher in self.watchers:
            if watcher.interval_ms == 0:
                watcher.offer(None)

    def end_all(self, code, message: str, *, older_than: int | None = None) -> None:
        for watcher in list(self.watchers):
            if older_than is None or watcher.revision < older_than:
                watcher.close(code, message)
