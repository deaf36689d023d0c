"""Load: the backend's figures as upstream's LoadInfo (Control/GetLoad, every WatchLoad snapshot),
checked at the SDK's boundary, and WatchLoad (Observability), whose streams never hold each
other up.

A WatchLoad stream owns a `Watcher`, a one-slot mailbox. Updates (a periodic tick, or a load
change for a change-driven stream) are offered to it synchronously and never wait; a newer offer
replaces the pending one and counts it as coalesced. The stream takes the pending update when it
can write, so a client that stopped reading only makes its own mailbox coalesce.

Periodic streams of one interval and per-rank choice share a `Ticker`: one timer that builds and
serializes one snapshot per tick for all of them (`Snapshot`). A stream's first periodic
snapshot comes at least one interval after its opening one; it joins a ticker whose next tick
falls at most `phase_slack` after that, else starts its own. Each message is the stream's own
fields serialized, followed by the shared snapshot's bytes: protobuf reads a concatenation as
the merge of its parts, so the client reads exactly one WatchLoadResponse.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor

from openengine.contract import CORE
from openengine.serve.backend import Load, RankLoad, Refusal, RefusalCode
from openengine.v1 import load_pb2, server_pb2
from openengine.validate import RANK_SUMMED_FIELDS, effective_watch_settings

LOAD_PROFILE = "openengine.load"
# A little past the interval, so consecutive periodic snapshots are never closer than it.
TICK_MARGIN_S = 0.0005
_MAX = {FieldDescriptor.TYPE_UINT32: 2**32 - 1, FieldDescriptor.TYPE_UINT64: 2**64 - 1}
# The figures `Load` and `RankLoad` carry, with the largest value their LoadInfo field holds.
LOAD_FIGURES = {f.name: _MAX[f.type] for f in server_pb2.LoadInfo.DESCRIPTOR.fields if f.type in _MAX
                and f.name not in ("rejected_requests", "timestamp_unix_nanos")}
# The figures a rank has (its RankLoadInfo's). The totals of requests and KV blocks are the sums
# over the ranks (RANK_SUMMED_FIELDS, REQ-LOAD-023); the batch sizes are the engine's own.
RANK_FIGURES = {f.name: LOAD_FIGURES[f.name] for f in dataclasses.fields(RankLoad) if f.name in LOAD_FIGURES}


class Clock:
    """Wall-clock nanoseconds that never go backwards: anchored once, advanced by the monotonic
    clock, so a wall-clock step (NTP) cannot make a stream's timestamps decrease."""

    def __init__(self):
        self._wall0 = time.time_ns()
        self._mono0 = time.monotonic_ns()

    def now_ns(self) -> int:
        return self._wall0 + (time.monotonic_ns() - self._mono0)

    def timestamp(self, ns: int | None = None) -> timestamp_pb2.Timestamp:
        """Now (or `ns`) as a protobuf Timestamp, for the proposal's messages that carry one."""
        ns = self.now_ns() if ns is None else ns
        return timestamp_pb2.Timestamp(seconds=ns // 1_000_000_000, nanos=ns % 1_000_000_000)


# -- LoadInfo -------------------------------------------------------------------------------------


def load_info(state, per_rank: bool = False) -> server_pb2.LoadInfo:
    """The backend's `load()` as a LoadInfo stamped with the instance id and the time; with ranks,
    each figure both messages carry is the sum over them, and the ranks are included when asked
    for. A figure the protocol cannot carry (negative, too large, more running requests than
    `max_running_requests`) is refused INTERNAL, naming it (logged once per figure)."""
    load: Load = state.backend.load()
    problem = _problem(load, state.limit(CORE, "max_running_requests"))
    if problem is not None:
        raise state.backend_errors.refusal("load()", *problem)
    info = server_pb2.LoadInfo(instance_id=state.instance_id, timestamp_unix_nanos=state.clock.now_ns(),
                               rejected_requests=state.rejected_requests,
                               **{name: getattr(load, name) for name in LOAD_FIGURES})
    if load.attributes:
        info.attributes.update(load.attributes)
    if load.ranks:
        for name in RANK_SUMMED_FIELDS:
            setattr(info, name, sum(getattr(rank, name) for rank in load.ranks))
        if per_rank:
            info.ranks.extend(server_pb2.RankLoadInfo(data_parallel_rank=r.rank,
                                                      **{n: getattr(r, n) for n in RANK_FIGURES})
                              for r in load.ranks)
    return info


def _problem(load: Load, max_running: int) -> tuple[str, str] | None:
    """(field, what is wrong) for the first figure of `load` the protocol cannot carry."""
    figures = [(f"Load.{name}", getattr(load, name), most) for name, most in LOAD_FIGURES.items()]
    for i, rank in enumerate(load.ranks):
        figures += [(f"Load.ranks[{i}].{name}", getattr(rank, name), most) for name, most in RANK_FIGURES.items()]
        figures.append((f"Load.ranks[{i}].rank", rank.rank, 2**32 - 1))
    for name, value, most in figures:
        if isinstance(value, bool) or not isinstance(value, int):
            return name, f"is {value!r}; load figures are whole numbers"
        if value < 0:
            return name, f"is {value}; load figures are never negative"
        if value > most:
            return name, f"is {value}, more than LoadInfo.{name.rpartition('.')[2]} holds"
    running = sum(r.running_requests for r in load.ranks) if load.ranks else load.running_requests
    if running > max_running:
        return "Load.running_requests", f"is {running}, above the advertised max_running_requests {max_running}"
    try:
        struct_pb2.Struct().update(load.attributes)
    except (TypeError, ValueError, AttributeError):
        return "Load.attributes", "holds a value that is not a string, number or boolean"
    return None


# -- WatchLoad: mailboxes, shared tickers, wire form -------------------------------------------


@dataclass(frozen=True, eq=False)
class Snapshot:
    """One built LoadInfo and its serialized WatchLoadResponse, shared read-only by every stream
    it is offered to."""

    load: server_pb2.LoadInfo
    wire: bytes

    @classmethod
    def of(cls, load: server_pb2.LoadInfo) -> "Snapshot":
        message = load_pb2.WatchLoadResponse(snapshot=load_pb2.LoadSnapshot(load=load))
        return cls(load, message.SerializeToString())


_HEARTBEAT = load_pb2.WatchLoadResponse(heartbeat=load_pb2.Heartbeat()).SerializeToString()


class Framer:
    """One stream's messages: its sequence and timestamp, then the rest (shared snapshot bytes
    appended as they are)."""

    def __init__(self):
        self._stamp = load_pb2.WatchLoadResponse()

    def stamp(self, sequence: int, ts_ns: int) -> bytes:
        self._stamp.sequence = sequence
        self._stamp.timestamp_unix_nanos = ts_ns
        return self._stamp.SerializeToString()

    def snapshot(self, sequence: int, ts_ns: int, snapshot: Snapshot, coalesced: int) -> bytes:
        if coalesced:
            tail = load_pb2.WatchLoadResponse(snapshot=load_pb2.LoadSnapshot(coalesced=coalesced)).SerializeToString()
            return self.stamp(sequence, ts_ns) + snapshot.wire + tail
        return self.stamp(sequence, ts_ns) + snapshot.wire

    def heartbeat(self, sequence: int, ts_ns: int) -> bytes:
        return self.stamp(sequence, ts_ns) + _HEARTBEAT

    def settings(self, sequence: int, ts_ns: int, settings: load_pb2.WatchLoadSettings) -> bytes:
        return self.stamp(sequence, ts_ns) + load_pb2.WatchLoadResponse(settings=settings).SerializeToString()


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
    closed_with: Refusal | None = None   # how the stream ends
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

    def close(self, refusal: Refusal) -> None:
        self.closed_with = refusal
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
            for watcher in list(self.members):
                if watcher.due_from <= now:
                    if snapshot is None:
                        snapshot = Snapshot.of(self.publisher.build(self.per_rank))
                    watcher.offer(snapshot)
        except Refusal as refused:   # the backend's figures cannot be sent: its streams end with why
            for watcher in list(self.members):
                watcher.close(refused)
        finally:
            # Re-armed from after the build, so the next snapshot is at least an interval newer.
            self.handle = self._loop.call_at(self._loop.time() + self.period, self._fire)

    def stop(self) -> None:
        self.handle.cancel()


class LoadPublisher:
    """The open watchers, the shared tickers, and the fan-out of updates."""

    def __init__(self, build: Callable[[bool], server_pb2.LoadInfo]):
        self.build = build
        self.watchers: set[Watcher] = set()
        self.change_driven: set[Watcher] = set()
        self.tickers: dict[tuple[int, bool], list[Ticker]] = {}

    def __len__(self) -> int:
        return len(self.watchers)

    def open(self, watcher: Watcher) -> None:
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
            # Phased at the latest this stream allows, so streams opening right after it share it.
            ticker = Ticker(self, watcher.interval_ms, watcher.per_rank, watcher.due_from + slack)
            tickers.append(ticker)
        ticker.members[watcher] = None
        watcher.ticker = ticker

    def close(self, watcher: Watcher) -> None:
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

    def end_all(self, refusal: Refusal, *, older_than: int | None = None) -> None:
        for watcher in list(self.watchers):
            if older_than is None or watcher.revision < older_than:
                watcher.close(refusal)


class Observability:
    """openengine.v1.Observability: WatchLoad."""

    def __init__(self, state):
        self.state = state

    async def WatchLoad(self, request: load_pb2.WatchLoadRequest, context):
        """Settings first, then the initial snapshot when asked, then snapshots (periodic, or on
        change for interval 0) and heartbeats after `heartbeat_ms` without a message."""
        state = self.state
        limits = state.selection.limits[LOAD_PROFILE]
        max_watchers = limits["max_watchers"]
        if len(state.load) >= max_watchers:
            raise Refusal(RefusalCode.RESOURCE_EXHAUSTED,
                          f"{len(state.load)} WatchLoad streams are open, "
                          f"{LOAD_PROFILE}.max_watchers = {max_watchers}; close one or retry later")
        effective = effective_watch_settings(limits, request)
        interval, heartbeat = effective["interval_ms"], effective["heartbeat_ms"]
        initial, per_rank = effective["initial_snapshot"], effective["per_rank"]
        watcher = Watcher(interval, heartbeat, per_rank, state.revision)
        framer = Framer()
        sequence = 0
        now_ns = state.clock.now_ns
        loop = asyncio.get_running_loop()
        alarm: asyncio.TimerHandle | None = None

        def stamp() -> tuple[int, int]:
            nonlocal sequence
            sequence += 1
            return sequence - 1, now_ns()

        def build() -> Snapshot:
            return Snapshot.of(load_info(state, per_rank))

        def ring() -> None:
            nonlocal alarm
            alarm = None
            watcher.wake.set()

        settings = load_pb2.WatchLoadSettings(interval_ms=interval, heartbeat_ms=heartbeat, initial_snapshot=initial,
                                              per_rank=per_rank, instance_id=state.instance_id,
                                              capability_revision=state.revision)
        state.load.open(watcher)
        try:
            yield framer.settings(*stamp(), settings)
            opened_at = loop.time()
            if initial:
                first = build()
                opened_at = loop.time()
                yield framer.snapshot(*stamp(), first, 0)
            state.load.start_ticks(watcher, opened_at)
            last_sent = loop.time()
            beat_s = heartbeat / 1000.0
            while True:
                if watcher.closed_with is not None:
                    ended = watcher.closed_with
                    raise Refusal(ended.code, ended.message)
                taken = watcher.take(build)
                if taken is not None:
                    yield framer.snapshot(*stamp(), *taken)
                    last_sent = loop.time()
                    continue
                if heartbeat:
                    due = last_sent + beat_s
                    if loop.time() >= due:
                        yield framer.heartbeat(*stamp())
                        last_sent = loop.time()
                        continue
                    # One alarm per stream, armed only when none is pending: `due` never moves
                    # earlier, so an alarm that rings too soon finds nothing due and re-arms.
                    if alarm is None:
                        alarm = loop.call_at(due, ring)
                watcher.wake.clear()
                await watcher.wake.wait()
        finally:
            if alarm is not None:
                alarm.cancel()
            state.load.close(watcher)
