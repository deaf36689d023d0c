"""Load streaming: one-slot mailboxes, so a slow watcher never holds anyone up, and periodic
ticks shared by the streams whose phases agree, so a tick builds one snapshot for all of them.

Each WatchLoad stream owns a `Watcher`. Updates (a periodic tick, or a load change for a
change-driven stream) are *offered* to the watcher's mailbox synchronously; an offer never awaits
anything. The mailbox holds at most one pending update: a newer offer replaces the pending one and
counts it as coalesced. The stream's own coroutine takes the pending update when it can write, so
a watcher whose client stopped reading (its writes blocked by HTTP/2 flow control) only makes its
own mailbox coalesce, and the publisher, other watchers and request processing never wait for it.

Periodic streams of one interval and per-rank choice join a `Ticker`: one timer that builds and
serializes one `Snapshot` per tick and offers it to every member (REQ-LOAD-012 holds per stream:
a member's first tick comes at least one interval after its opening snapshot, and a ticker
re-arms an interval after the snapshot it just built). A stream joins an existing ticker only
when that ticker's first tick due for it comes at most `phase_slack` after its first interval
ends, and a stream that finds none starts a ticker phased `phase_slack` after its own first
interval: sharing never delays a stream's first periodic snapshot by more than the slack, and
streams that open together (or a whole period apart) share one ticker.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from google.protobuf import timestamp_pb2

from openengine.serve.loadwire import Snapshot
from openengine.v1 import load_pb2

# A little past the interval, so consecutive periodic snapshots are never closer than it.
TICK_MARGIN_S = 0.0005


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


def phase_slack(interval_ms: int) -> float:
    """Seconds a stream's first periodic snapshot may come late so that it can share a tick: a
    fifth of the interval, at most 50 ms."""
    return min(interval_ms / 5000.0, 0.05)


@dataclass(eq=False)
class Watcher:
    """One WatchLoad stream's state: its effective settings and its one-slot mailbox."""

    interval_ms: int
    heartbeat_ms: int
    per_rank: bool
    revision: int
    pending: Snapshot | None = None
    dirty: bool = False             # change-driven: an update is due, built when taken
    coalesced: int = 0
    closed_with: tuple | None = None  # (grpc.StatusCode, message) to end the stream with
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    ticker: "Ticker | None" = None
    due_from: float = math.inf      # loop time from which periodic ticks are offered

    def offer(self, snapshot: Snapshot | None) -> None:
        """Offer an update; never blocks. `None` marks a change whose snapshot is built on take."""
        if self.pending is not None or self.dirty:
            self.coalesced += 1
        if snapshot is None:
            self.dirty = True
            self.pending = None
        else:
            self.pending = snapshot
            self.dirty = False
        self.wake.set()

    def take(self, build: Callable[[], Snapshot]) -> tuple[Snapshot, int] | None:
        if self.pending is None and not self.dirty:
            return None
        snapshot = self.pending if self.pending is not None else build()
        coalesced, self.coalesced = self.coalesced, 0
        self.pending, self.dirty = None, False
        return snapshot, coalesced

    def close(self, code, message: str) -> None:
        self.closed_with = (code, message)
        self.wake.set()


class Ticker:
    """One periodic timer shared by the streams of one interval, per-rank choice and phase."""

    def __init__(self, publisher: "LoadPublisher", interval_ms: int, per_rank: bool, first_at: float):
        self.publisher = publisher
        self.interval_ms = interval_ms
        self.per_rank = per_rank
        self.period = interval_ms / 1000.0 + TICK_MARGIN_S
        self.members: dict[Watcher, None] = {}   # insertion-ordered set
        self._loop = asyncio.get_running_loop()
        self.handle = self._loop.call_at(first_at, self._fire)

    def lateness(self, due_from: float) -> float:
        """How long after `due_from` this ticker's first tick at or after it is expected."""
        upcoming = self.handle.when()
        if upcoming >= due_from:
            return upcoming - due_from
        return upcoming + math.ceil((due_from - upcoming) / self.period) * self.period - due_from

    def _fire(self) -> None:
        now = self._loop.time()
        snapshot = None
        try:
            for watcher in self.members:
                if watcher.due_from <= now:
                    if snapshot is None:
                        snapshot = Snapshot.of(self.publisher.build(self.per_rank))
                    watcher.offer(snapshot)
        finally:
            # Re-armed from after the build, so the next snapshot is at least an interval newer;
            # and re-armed even if this tick failed, so no member loses its ticks for good.
            self.handle = self._loop.call_at(self._loop.time() + self.period, self._fire)

    def stop(self) -> None:
        self.handle.cancel()


class LoadPublisher:
    """The registry of open watchers, the shared tickers, and the fan-out of updates."""

    def __init__(self, build: Callable[[bool], load_pb2.LoadInfo]):
        self.build = build
        self.watchers: set[Watcher] = set()
        self.change_driven: set[Watcher] = set()
        self.tickers: dict[tuple[int, bool], list[Ticker]] = {}

    def __len__(self) -> int:
        return len(self.watchers)

    def open(self, watcher: Watcher) -> None:
        """Count the stream as open (max_watchers, revision and shutdown endings)."""
        self.watchers.add(watcher)
        if watcher.interval_ms == 0:
            self.change_driven.add(watcher)

    def start_ticks(self, watcher: Watcher, since: float) -> None:
        """Periodic streams: offer ticks from one interval after `since` (loop time of the
        stream's opening snapshot), on a ticker whose phase fits within `phase_slack`."""
        if watcher.interval_ms <= 0 or watcher not in self.watchers or watcher.ticker is not None:
            return
        watcher.due_from = since + watcher.interval_ms / 1000.0
        key = (watcher.interval_ms, watcher.per_rank)
        slack = phase_slack(watcher.interval_ms)
        tickers = self.tickers.setdefault(key, [])
        ticker = next((t for t in tickers if t.lateness(watcher.due_from) <= slack + 1e-6), None)
        if ticker is None:
            # Phased at the latest this stream allows, so the streams opening right after it
            # (a burst of watchers) fall within its slack and share it.
            ticker = Ticker(self, watcher.interval_ms, watcher.per_rank, watcher.due_from + slack)
            tickers.append(ticker)
        ticker.members[watcher] = None
        watcher.ticker = ticker

    def close(self, watcher: Watcher) -> None:
        """Release everything the stream held: its ticker membership and its registry entry."""
        ticker = watcher.ticker
        if ticker is not None:
            ticker.members.pop(watcher, None)
            watcher.ticker = None
            if not ticker.members:
                ticker.stop()
                tickers = self.tickers.get((ticker.interval_ms, ticker.per_rank), [])
                if ticker in tickers:
                    tickers.remove(ticker)
                if not tickers:
                    self.tickers.pop((ticker.interval_ms, ticker.per_rank), None)
        self.watchers.discard(watcher)
        self.change_driven.discard(watcher)
        watcher.pending = None

    def changed(self) -> None:
        """The load changed: change-driven watchers get an update (built when they take it)."""
        for watcher in self.change_driven:
            watcher.offer(None)

    def end_all(self, code, message: str, *, older_than: int | None = None) -> None:
        for watcher in list(self.watchers):
            if older_than is None or watcher.revision < older_than:
                watcher.close(code, message)
