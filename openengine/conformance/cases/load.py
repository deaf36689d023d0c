"""`openengine.load`: GetLoad and the WatchLoad stream (settings, clamping, snapshots, heartbeats,
sequence and timestamps, backpressure, cancellation).

Every window is a number of the stream's effective intervals, not a fixed time, so an engine with
long intervals is checked as thoroughly as a fast one. Every message goes to the validators'
`WatchLoadChecker`, so the stream rules are judged by that one implementation; a case asserts on
the rule ids it is about and adds only what its stimulus needs. Spacing is judged strictly on the
server's timestamps; lateness and silence get generous bounds for a busy machine.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2

from openengine.conformance.cases.base import Failed, Unchecked, case, expect, expect_no
from openengine.conformance.context import (
    Context, Reader, cancel_or_reap, expect_running, rpc_error, status_name, together,
)
from openengine.conformance.stream import ending
from openengine.contract import CORE
from openengine.v1 import generation_pb2, load_pb2, server_pb2
from openengine.validate import WatchLoadChecker

LOAD = "openengine.load"
UINT32_MAX = 2**32 - 1
# How the cases' checker judges timing. Early: closer than the period by over a millisecond (on
# server timestamps, which load on the runner cannot move). Late or silent: more than four periods
# plus a second, which a loaded machine does not reach and an engine that stops sending does.
EARLY_TOLERANCE, EARLY_SLACK_MS = 0.0, 1.0
LATE_TOLERANCE, LATE_SLACK_MS = 3.0, 1000.0
# How the cases judge a rate ("one message per period"): by the median gap over RATE_GAPS gaps,
# read until that many arrived or RATE_DEADLINE periods went by; a stall on a busy machine moves
# only the gaps around it, not the median. At RATE_PERIOD_MS the wake-up delays a loaded machine
# adds to every gap (tens of ms) stay well under half a period, so the median may exceed the
# period by half a period and no more: a stream at twice its period fails, at every period.
RATE_GAPS, RATE_DEADLINE = 10, 4 * 11
RATE_PERIODS = 1.5
RATE_PERIOD_MS = 250
FAST_MS = 20      # a short interval, clamped into the engine's range


def _ms(nanos: int) -> float:
    return nanos / 1e6


@dataclass
class Received:
    msg: object
    at: float          # runner clock (loop.time()), seconds

    @property
    def kind(self) -> str:
        return self.msg.WhichOneof("kind")


class Watch:
    """One WatchLoad stream with bounded reads. Every message received is fed to the validators'
    `WatchLoadChecker`, so the stream rules (OEV3xx) are judged by that one implementation; a
    case asserts on the rule ids it is about (`broken`) plus its own stimulus-specific checks."""

    def __init__(self, ctx: Context, *, channel=None, **fields):
        self.request = load_pb2.WatchLoadRequest(**fields)
        # What must come at once is waited for this long: a loaded machine can hold a conforming
        # engine (or the runner) back for far longer than the engine takes.
        self.prompt_seconds = ctx.options.rpc_timeout
        stub = ctx.stub("observability", channel) if channel is not None else ctx.observability
        # Bounded by the case's deadline, which a long window moves (see _window); the stream's
        # own deadline is only a backstop beyond the longest a case may take.
        self.call = stub.WatchLoad(self.request, timeout=ctx.options.case_timeout * WINDOW_LIMIT + 5)
        self.reader = Reader(self.call, "WatchLoad")
        self.loop = asyncio.get_running_loop()
        self.opened = self.loop.time()
        self.received: list[Received] = []
        info = ctx.server_info
        self.checker = WatchLoadChecker(
            instance_id=info.instance_id if info is not None else None,
            capability_revision=info.capability_revision if info is not None and info.capability_revision else None,
            observability=_limits(ctx), request=self.request, clock=self.loop.time,
            tolerance=LATE_TOLERANCE, slack_ms=LATE_SLACK_MS,
            early_tolerance=EARLY_TOLERANCE, early_slack_ms=EARLY_SLACK_MS)

    def broken(self, *rules: str, path: str | None = None) -> list:
        """The checker's violations of `rules` so far (only at `path` when given), in stream order."""
        return [v for v in self.checker.violations
                if v.rule_id in rules and (path is None or v.path == path)]

    def expect_none(self, *rules: str, path: str | None = None, where: str = "", why: str = "") -> None:
        """Fail the case with the checker's own findings when any of `rules` was broken; `why`
        says what the finding means for the requirement the case is about."""
        found = self.broken(*rules, path=path)
        expect(not found, (f"{where}: " if where else "") +
               "; ".join(f"{v.rule_id} {v.message}" for v in found[:3]) + (f": {why}" if why else ""))

    def finish(self) -> None:
        """The runner stops reading: the checker judges what never arrived (a silence longer
        than the heartbeat or interval allows, a promised initial snapshot)."""
        self.checker.finish(self.loop.time())

    async def read(self, timeout: float) -> Received | None:
        """The next message, or None when nothing came within `timeout`. Fails on stream end."""
        msg = await self.reader.next(timeout, lambda code: (
            f"the server ended the WatchLoad stream with {status_name(code)} "
            f"{self.loop.time() - self.opened:.1f} s after it opened, after {len(self.received)} "
            "messages: a stream ends only when the client cancels it, at a graceful shutdown "
            "(UNAVAILABLE) or when the capability revision changes (ABORTED), never with OK (REQ-LOAD-019)"))
        if msg is None:
            return None
        got = Received(msg, self.loop.time())
        self.received.append(got)
        self.checker.feed(msg, got.at)
        return got

    async def settings(self, timeout: float | None = None):
        """The stream's settings, looking past misplaced messages so one fault fails one case
        (the checker reports settings that do not come first, OEV301)."""
        timeout = self.prompt_seconds if timeout is None else timeout
        end = self.loop.time() + timeout
        while True:
            got = await self.read(max(0.0, end - self.loop.time()))
            expect(got is not None, f"the server sent nothing within {timeout:g} s of accepting the "
                                    "WatchLoad stream: its settings are due at once")
            if got.kind == "settings":
                return got.msg.settings
            if len(self.received) > 8:
                kinds = ", ".join(r.kind or "(none)" for r in self.received)
                raise Failed(f"the first 8 WatchLoad messages ({kinds}) carried no settings: the "
                             "first message of a stream is its settings")

    async def collect(self, seconds: float, *, kind: str | None = None,
                      count: int | None = None) -> list[Received]:
        """Messages read for `seconds`, or until `count` messages (of `kind`, when given) arrived."""
        end = self.loop.time() + seconds
        out = []
        seen = 0
        while (left := end - self.loop.time()) > 0:
            got = await self.read(left)
            if got is not None:
                out.append(got)
                seen += kind is None or got.kind == kind
                if count is not None and seen >= count:
                    break
        return out

    def cancel(self) -> None:
        self.reader.cancel()


def _limits(ctx: Context) -> dict:
    names = ("min_watch_interval_ms", "max_watch_interval_ms", "default_watch_interval_ms",
             "default_heartbeat_ms", "max_watchers", "per_rank", "change_driven")
    return {n: ctx.limit(LOAD, n) for n in names}


def _clamp(value: int, lim: dict) -> int:
    return max(int(lim["min_watch_interval_ms"]), min(int(lim["max_watch_interval_ms"]), value))


def _rate_window(ctx: Context, period_ms: int, *, at_least: float = 0.0) -> float:
    """How long to read for RATE_GAPS + 1 messages one period apart: RATE_DEADLINE periods, or
    less where the case timeout allows less, but never less than the messages need."""
    needed = _window(ctx, RATE_PERIODS * (RATE_GAPS + 1), period_ms, at_least=at_least)
    return max(needed, min(RATE_DEADLINE * period_ms / 1000, ctx.options.case_timeout * 0.6))


def _gaps_ms(arrivals: list[Received]) -> list[float]:
    return sorted((b.at - a.at) * 1000 for a, b in zip(arrivals, arrivals[1:]))


def _rate_problem(arrivals: list[Received], period_ms: int, seconds: float, what: str) -> str | None:
    """Why `arrivals` (messages of one kind, read for at most `seconds`) are not about one per
    `period_ms`, or None. A loaded machine only ever delays a timer, and an engine that re-arms its
    timer after each message carries the delay into the gap, so on a busy machine most gaps may
    run long; a stream at a longer period has no gap near its period at all. So the lower quartile
    of the gaps is judged, leaving out those under a quarter period: messages held back by a stall
    of the reader and then read at once."""
    if len(arrivals) < RATE_GAPS + 1:
        return (f"{len(arrivals)} {what} arrived in {seconds:.2f} s at a period of {period_ms} ms, "
                f"where about {seconds * 1000 / period_ms:.0f} were due (one per period)")
    spaced = [gap for gap in _gaps_ms(arrivals) if gap >= period_ms / 4]
    quartile = spaced[len(spaced) // 4] if spaced else 0.0
    if quartile > RATE_PERIODS * period_ms:
        return (f"{what} arrived {quartile:.0f} ms apart or more in three gaps of four, but the "
                f"stream's period is {period_ms} ms: one was due every {period_ms} ms (at most "
                f"{RATE_PERIODS:g} periods apart)")
    return None


def _rate_note(arrivals: list[Received], period_ms: int) -> str:
    gaps = _gaps_ms(arrivals)
    return f"{len(arrivals)} at {period_ms} ms, a median {gaps[len(gaps) // 2]:.0f} ms apart"


# A window longer than its share of the case timeout moves the case's deadline by the difference,
# since the engine's own advertised intervals set its length; up to WINDOW_LIMIT case timeouts,
# beyond which the case says what --case-timeout would let it observe.
WINDOW_LIMIT = 5


def _window(ctx: Context, intervals: float, interval_ms: int, *, at_least: float = 0.0,
            share: float = 0.6) -> float:
    """Seconds spanning `intervals` effective intervals (at least `at_least`). A window that does
    not fit in `share` of the case timeout gets the rest added to the case's deadline."""
    seconds = max(at_least, intervals * interval_ms / 1000)
    budget = ctx.options.case_timeout * share
    if seconds > budget:
        if seconds > ctx.options.case_timeout * WINDOW_LIMIT:
            raise Unchecked(f"{intervals:g} intervals of {interval_ms} ms take {seconds:.1f} s, more "
                            f"than {WINDOW_LIMIT} case timeouts of {ctx.options.case_timeout:g} s; "
                            f"raise --case-timeout to {math.ceil(seconds / WINDOW_LIMIT)} s or more")
        ctx.allow(seconds - budget)
    return seconds


async def _open(ctx: Context, **fields) -> tuple[Watch, object]:
    w = Watch(ctx, **fields)
    try:
        return w, await w.settings()
    except BaseException:
        w.cancel()
        raise


# GetLoad and identity
@case("core.getload.complete", profile=CORE, requires=("REQ-LOAD-001.1", "REQ-LOAD-001.3", "REQ-LOAD-002"),
      title="GetLoad returns a complete snapshot with timestamp and the engine's instance id; ranks "
            "only when asked and supported")
async def getload_complete(ctx: Context):
    info = await ctx.control.GetLoad()
    expect(info.HasField("timestamp_unix_nanos"), "LoadInfo.timestamp_unix_nanos is not set: GetLoad answers a complete "
                                       "snapshot with its timestamp")
    want = ctx.server_info.instance_id
    expect(info.instance_id == want, f"GetLoad instance_id {info.instance_id!r} != {want!r}, "
                                     "ServerInfo.instance_id: a snapshot names the engine's instance")
    expect(not info.ranks, f"GetLoad without include_per_rank answered {len(info.ranks)} ranks: "
                           "ranks are sent only when the request sets include_per_rank")
    if ctx.limit(LOAD, "per_rank"):
        ranked = await ctx.control.GetLoad(server_pb2.GetLoadRequest(include_per_rank=True))
        dp = max(1, ctx.server_info.parallelism.data_parallel_size)
        expect(len(ranked.ranks) == dp, f"GetLoad with include_per_rank answered {len(ranked.ranks)} "
                                        f"ranks, but ServerInfo says data_parallel_size {dp}: one "
                                        "entry per rank")


@case("core.getload.current", profile=CORE, requires=("REQ-LOAD-001.2",),
      title="GetLoad describes the engine when it answers: a request that has streamed is counted, "
            "and each answer is a new snapshot")
async def getload_current(ctx: Context):
    ctx.require_decoding(observable=True)
    idle = await ctx.control.GetLoad()
    async with ctx.running("conformance is counted now"):
        busy = await ctx.control.GetLoad()
    counted = busy.running_requests + busy.queued_requests
    expect(counted >= 1, f"GetLoad, called after a request's stream sent its first message, counted "
                         f"{busy.running_requests} running and {busy.queued_requests} queued: it "
                         "describes an earlier moment, not the engine when it answers")
    expect(_ms(busy.timestamp_unix_nanos) > _ms(idle.timestamp_unix_nanos),
           f"two GetLoad answers, the second after a request started, carry timestamps "
           f"{_ms(idle.timestamp_unix_nanos):.0f} and {_ms(busy.timestamp_unix_nanos):.0f} ms: each answer must be a "
           "snapshot taken when it is asked for, not a kept one")
    return f"{counted} counted"


@case("load.instance-id", profile=LOAD, requires=("REQ-LOAD-002",),
      title="GetLoad, WatchLoad settings and snapshots carry ServerInfo.instance_id")
async def load_instance(ctx: Context):
    want = ctx.server_info.instance_id
    info = await ctx.control.GetLoad()
    expect(info.instance_id == want, f"GetLoad instance_id {info.instance_id!r} != {want!r}, "
                                     "ServerInfo.instance_id: a snapshot names the engine's instance")
    w, _ = await _open(ctx, interval_ms=_clamp(FAST_MS, _limits(ctx)))
    try:
        await w.collect(w.prompt_seconds, kind="snapshot", count=1)
    finally:
        w.cancel()
    w.expect_none("OEV309")
    w.expect_none("OEV308", path="snapshot.load.instance_id")
    if not any(r.kind == "snapshot" for r in w.received):
        raise Unchecked(f"no snapshot came within {w.prompt_seconds:g} s of opening WatchLoad, so no "
                        "snapshot's instance id was seen")


# Settings
@case("load.watch.settings-first", profile=LOAD, requires=("REQ-LOAD-004",),
      title="the first message is settings with sequence 0, sent at once; no later message has settings")
async def settings_first(ctx: Context):
    lim = _limits(ctx)
    # Nothing else is due for a long time: the settings must not wait for a timer.
    longest = int(lim["max_watch_interval_ms"])
    w = Watch(ctx, interval_ms=longest, heartbeat_ms=0, initial_snapshot=False)
    # Far less than the interval asked for, so a settings message that waits for the timer
    # cannot arrive in time.
    wait = min(w.prompt_seconds, longest / 2000)
    try:
        first = await w.read(wait)
    finally:
        w.cancel()
    w.expect_none("OEV301", "OEV303")                               # first, with sequence 0
    expect(first is not None, f"nothing within {wait:g} s of opening WatchLoad at interval {longest} "
                              "ms: the settings must not wait for a timer")   # the stimulus
    w = Watch(ctx, interval_ms=_clamp(FAST_MS, lim))
    try:
        await w.collect(max(0.2, 8 * _clamp(FAST_MS, lim) / 1000))
    finally:
        w.cancel()
    w.expect_none("OEV301", "OEV302", "OEV303")                     # never again later
    expect(w.checker.settings is not None, "the second stream carried no settings")
    return f"interval {first.msg.settings.interval_ms} ms"


@case("load.watch.settings-effective", profile=LOAD, requires=("REQ-LOAD-005",),
      title="settings report the effective values, instance id and current capability revision")
async def settings_effective(ctx: Context):
    lim = _limits(ctx)
    interval = _clamp(FAST_MS, lim)
    # Every setting asked for differs from its default and lies within range.
    w, _ = await _open(ctx, interval_ms=interval, heartbeat_ms=interval, initial_snapshot=False,
                       per_rank=True)
    w.cancel()
    w.expect_none("OEV309", "OEV316", "OEV319", where="WatchLoadSettings")


@case("load.watch.interval-default", profile=LOAD, requires=("REQ-LOAD-006",),
      title="an absent interval_ms gets default_watch_interval_ms")
async def interval_default(ctx: Context):
    w, _ = await _open(ctx, heartbeat_ms=0, initial_snapshot=False)
    w.cancel()
    w.expect_none("OEV316", path="settings.interval_ms", where="interval_ms absent")


@case("load.watch.interval-clamped", profile=LOAD, requires=("REQ-LOAD-006",),
      title="out-of-range intervals are clamped into [min_watch_interval_ms, max_watch_interval_ms]")
async def interval_clamped(ctx: Context):
    lim = _limits(ctx)
    lo, hi = int(lim["min_watch_interval_ms"]), int(lim["max_watch_interval_ms"])
    asks = [_clamp(FAST_MS, lim)]
    if lo > 1:
        asks.append(1)
    if hi < UINT32_MAX:
        asks += [hi + 1, UINT32_MAX]
    await _expect_effective(ctx, "interval_ms", asks, heartbeat_ms=0)
    return f"range [{lo}, {hi}] ms, {len(asks)} requests"


async def _expect_effective(ctx: Context, setting: str, asks: list, **fields) -> None:
    """Open a stream asking each value of `setting` (None: leave it out); the settings of each
    must report the effective value (OEV316)."""
    problems = []
    for asked in asks:
        ask = {} if asked is None else {setting: asked}
        w, _ = await _open(ctx, initial_snapshot=False, **fields, **ask)
        w.cancel()
        shown = "absent" if asked is None else f"{asked} ms"
        problems += [f"asked {shown}: {v.rule_id} {v.message}"
                     for v in w.broken("OEV316", path=f"settings.{setting}")]
    expect_no(problems)


@case("load.watch.interval-zero", profile=LOAD, requires=("REQ-LOAD-007",),
      title="interval 0 is change-driven (0) when change_driven, else min_watch_interval_ms")
async def interval_zero(ctx: Context):
    lim = _limits(ctx)
    w, s = await _open(ctx, interval_ms=0, heartbeat_ms=0, initial_snapshot=False)
    try:
        w.expect_none("OEV316", path="settings.interval_ms", where="interval_ms 0")
        if lim["change_driven"]:
            quiet = await w.collect(0.2)
            snaps = [r for r in quiet if r.kind == "snapshot"]
            # An idle engine has no changes, so there is nothing to send; tolerate one that was
            # already in flight.
            expect(len(snaps) <= 1, f"{len(snaps)} snapshots in 200 ms on an idle change-driven stream")
            return "change-driven"
        return "clamped to the minimum"
    finally:
        w.cancel()


@case("load.watch.heartbeat-settings", profile=LOAD, requires=("REQ-LOAD-008",),
      title="heartbeat: absent -> default_heartbeat_ms, 0 -> off, others clamped")
async def heartbeat_settings(ctx: Context):
    lim = _limits(ctx)
    lo, hi = int(lim["min_watch_interval_ms"]), int(lim["max_watch_interval_ms"])
    asks: list[int | None] = [None, 0, _clamp(FAST_MS, lim)]
    if lo > 1:
        asks.append(1)
    if hi < UINT32_MAX:
        asks.append(UINT32_MAX)
    await _expect_effective(ctx, "heartbeat_ms", asks, interval_ms=hi)


@case("load.watch.heartbeat-off", profile=LOAD, requires=("REQ-LOAD-008",),
      title="with heartbeat 0 no heartbeat is sent")
async def heartbeat_off(ctx: Context):
    lim = _limits(ctx)
    w, s = await _open(ctx, interval_ms=int(lim["max_watch_interval_ms"]), heartbeat_ms=0,
                       initial_snapshot=False)
    # Longer than the default heartbeat and its lateness bound: an engine that sends default
    # heartbeats whatever was asked shows one.
    beat = int(lim["default_heartbeat_ms"])
    try:
        await w.collect(_window(ctx, 5, int(lim["min_watch_interval_ms"]),
                                at_least=(1.5 * beat + LATE_SLACK_MS) / 1000))
    finally:
        w.cancel()
    w.expect_none("OEV316", path="settings.heartbeat_ms", where="heartbeat_ms 0")
    w.expect_none("OEV314", why="heartbeats were asked off (heartbeat_ms 0) and the settings say 0")


@case("load.watch.initial-snapshot-on", profile=LOAD, requires=("REQ-LOAD-009",),
      title="by default (and when true) a snapshot of the current load follows the settings at once")
async def initial_on(ctx: Context):
    lim = _limits(ctx)
    slow = _clamp(5000, lim)
    for fields in ({}, {"initial_snapshot": True}):
        w, _ = await _open(ctx, interval_ms=slow, heartbeat_ms=0, **fields)
        try:
            wait = min(w.prompt_seconds, 0.9 * slow / 1000)
            got = await w.read(wait)
        finally:
            w.cancel()
        shown = "initial_snapshot absent" if not fields else "initial_snapshot true"
        w.finish()
        w.expect_none("OEV316", path="settings.initial_snapshot", where=shown)
        w.expect_none("OEV317", "OEV305", where=shown)
        # The stimulus: the next periodic snapshot is far off, so only an initial one comes now;
        # judged on the engine's own timestamps, so a slow runner cannot make it late.
        expect(got is not None, f"{shown}: nothing followed the settings within {wait:.2f} s "
                                f"(interval {slow} ms)")
        if got.kind == "snapshot":
            gap = _ms(got.msg.timestamp_unix_nanos) - _ms(w.received[0].msg.timestamp_unix_nanos)
            expect(gap < slow / 2, f"{shown}: the first snapshot came {gap:.0f} ms after the "
                                   f"settings at interval {slow} ms: it was the first periodic "
                                   "one, not an initial snapshot sent at once")


@case("load.watch.initial-snapshot-off", profile=LOAD, requires=("REQ-LOAD-009",),
      title="with initial_snapshot false the first snapshot is the first periodic one")
async def initial_off(ctx: Context):
    lim = _limits(ctx)
    interval = _clamp(300, lim)
    wait = _window(ctx, 3, interval) + 1
    w, _ = await _open(ctx, interval_ms=interval, heartbeat_ms=0, initial_snapshot=False)
    try:
        got = await w.read(wait)
    finally:
        w.cancel()
    w.expect_none("OEV316", path="settings.initial_snapshot", where="initial_snapshot false")
    expect(got is not None, f"with initial_snapshot false no snapshot came within 3 intervals of "
                            f"{interval} ms: the first periodic one is due after one interval")
    gap = _ms(got.msg.timestamp_unix_nanos) - _ms(w.received[0].msg.timestamp_unix_nanos)
    expect(gap >= interval * 0.5,
           f"the first snapshot came {gap:.0f} ms after the settings, an interval is {interval} ms: "
           "it was an initial snapshot")


@case("load.watch.per-rank", profile=LOAD, requires=("REQ-LOAD-010",),
      title="per_rank is honoured exactly when supported, with one entry per data-parallel rank")
async def per_rank(ctx: Context):
    lim = _limits(ctx)
    dp = max(1, ctx.server_info.parallelism.data_parallel_size)
    for asked in (False, True):
        w, s = await _open(ctx, interval_ms=_clamp(FAST_MS, lim), per_rank=asked)
        try:
            snap = await w.read(w.prompt_seconds)
        finally:
            w.cancel()
        w.expect_none("OEV316", path="settings.per_rank", where=f"asked per_rank={asked}")
        expect(snap is not None and snap.kind == "snapshot",
               "with per_rank asked, no snapshot followed the settings" if snap is None else
               f"with per_rank asked, a {snap.kind} followed the settings, not the initial snapshot")
        w.expect_none("OEV318", where=f"asked per_rank={asked}")
        if s.per_rank:   # one entry per data-parallel rank: what ServerInfo says, not a stream rule
            n = len(snap.msg.snapshot.load.ranks)
            expect(n == dp, f"a per_rank snapshot carried {n} rank entries, but ServerInfo says "
                            f"data_parallel_size {dp}: one entry per rank")


@case("load.watch.max-watchers", profile=LOAD, requires=("REQ-LOAD-011", "REQ-SVC-004"),
      title="one stream more than max_watchers fails RESOURCE_EXHAUSTED before any message")
async def max_watchers(ctx: Context):
    limit = int(ctx.limit(LOAD, "max_watchers"))
    if limit > 256:
        raise Unchecked(f"max_watchers is {limit}; the case opens at most 256 streams")
    lim = _limits(ctx)
    interval = int(lim["max_watch_interval_ms"])
    streams: list[Watch] = []
    loop = asyncio.get_running_loop()
    try:
        # Streams earlier cases cancelled count against max_watchers until the engine has seen
        # them close, which on a loaded machine takes a moment: a stream within the limit that
        # is refused is tried again until that moment has surely passed.
        patience = max(ctx.options.rpc_timeout, 5.0)
        deadline = loop.time() + patience
        for k in range(1, limit + 1):
            while True:
                w = Watch(ctx, interval_ms=interval, heartbeat_ms=0, initial_snapshot=False)
                try:
                    await w.settings()
                    streams.append(w)
                    break
                except Failed:
                    if not w.call.done():
                        w.cancel()
                        raise
                code = await w.call.code()
                w.cancel()
                if code != grpc.StatusCode.RESOURCE_EXHAUSTED or loop.time() > deadline:
                    raise Failed(f"stream {k} of the {limit} that max_watchers allows failed with "
                                 f"{status_name(code)}" +
                                 (f", still {patience:g} s after this case began with no other "
                                  "stream of the run open" if code == grpc.StatusCode.RESOURCE_EXHAUSTED
                                  else ""))
                await asyncio.sleep(0.05)
        extra = Watch(ctx, interval_ms=interval, heartbeat_ms=0, initial_snapshot=False)
        streams.append(extra)
        try:
            msg = await asyncio.wait_for(extra.call.read(), extra.prompt_seconds)
            code = await extra.call.code() if msg is grpc.aio.EOF else None
        except grpc.aio.AioRpcError as err:
            code = err.code()
        except asyncio.TimeoutError:
            raise Failed(f"stream {limit + 1} (max_watchers is {limit}) neither failed nor sent "
                         "anything: it is refused with RESOURCE_EXHAUSTED before any message") from None
        expect(code is not None, f"stream {limit + 1} was accepted (max_watchers is {limit}), not refused "
                                 "with RESOURCE_EXHAUSTED")
        expect(code == grpc.StatusCode.RESOURCE_EXHAUSTED,
               f"stream {limit + 1} failed with {status_name(code)}, not RESOURCE_EXHAUSTED")
        return f"{limit} streams"
    finally:
        for w in streams:
            w.cancel()


# Updates, heartbeats, sequence, timestamps
async def _rate(ctx: Context, setting: str, kind: str, rules: tuple[str, ...], what: str, **fields) -> str:
    """Open a stream asking RATE_PERIOD_MS for `setting`, and judge that about one `kind` message
    comes per effective period (a rate; the spacing is the checker's `rules`)."""
    asked = _clamp(RATE_PERIOD_MS, _limits(ctx))
    w, s = await _open(ctx, **{setting: asked}, initial_snapshot=False, **fields)
    n = getattr(s, setting)
    try:
        w.expect_none("OEV316", path=f"settings.{setting}", where=f"asked for {setting} {asked}")
        if n == 0:
            raise Unchecked(f"the settings report {setting} 0 (off or change-driven), so there is no "
                            f"period to check")
        # Long enough that a stream with no message at all is silent for longer than the
        # checker's bound for silence (LATE_*), which is generous for busy machines.
        window = _rate_window(ctx, n, at_least=(n * (1 + LATE_TOLERANCE) + LATE_SLACK_MS) / 1000 + 0.25)
        got = [r for r in await w.collect(window, kind=kind, count=RATE_GAPS + 1) if r.kind == kind]
    finally:
        w.cancel()
    w.finish()
    w.expect_none(*rules)
    problem = _rate_problem(got, n, window, what)
    expect(problem is None, problem or "")
    return f"{what}: " + _rate_note(got, n)


@case("load.watch.periodic", profile=LOAD, requires=("REQ-LOAD-012",),
      title="one snapshot per interval, LoadInfo timestamps at least an interval apart")
async def periodic(ctx: Context):
    return await _rate(ctx, "interval_ms", "snapshot", ("OEV310", "OEV311"), "snapshots", heartbeat_ms=0)


@case("load.watch.heartbeat-idle", profile=LOAD, requires=("REQ-LOAD-013",),
      title="an idle stream gets heartbeats every heartbeat_ms, never sooner")
async def heartbeat_idle(ctx: Context):
    return await _rate(ctx, "heartbeat_ms", "heartbeat", ("OEV312", "OEV313"), "heartbeats on an idle stream",
                       interval_ms=int(_limits(ctx)["max_watch_interval_ms"]))


FAST_STREAM_MESSAGES = 8


async def _fast_stream(ctx: Context, seconds: float = 0.3):
    """A stream at a short interval, read for eight intervals and (bounded) until it carried
    FAST_STREAM_MESSAGES messages, which a loaded machine may deliver late."""
    lim = _limits(ctx)
    interval = _clamp(FAST_MS, lim)
    w, s = await _open(ctx, interval_ms=interval, heartbeat_ms=interval)
    try:
        await w.collect(max(seconds, 8 * s.interval_ms / 1000))
        missing = FAST_STREAM_MESSAGES - len(w.received)
        if missing > 0:
            await w.collect(ctx.options.case_timeout * 0.5, count=missing)
    finally:
        w.cancel()
    return w


@case("load.watch.sequence", profile=LOAD, requires=("REQ-LOAD-014.1",),
      title="sequence is 0 for the settings, then +1 per message; each stream numbers its own")
async def sequence(ctx: Context):
    first, second = await together(_fast_stream(ctx), _fast_stream(ctx))
    for name, w in (("first", first), ("second", second)):
        expect(len(w.received) >= 3, f"the {name} stream carried only {len(w.received)} messages at "
                                     "a short interval, too few to number")
        w.expect_none("OEV303", "OEV304", "OEV305", where=f"{name} stream")
    return f"{len(first.received)} and {len(second.received)} messages"


@case("load.watch.timestamps", profile=LOAD, requires=("REQ-LOAD-014.2",),
      title="every message has a timestamp; message and snapshot timestamps never go backwards")
async def timestamps(ctx: Context):
    w = await _fast_stream(ctx)
    w.expect_none("OEV306", "OEV307")
    return f"{len(w.received)} messages"


@case("load.watch.message-kinds", profile=LOAD, requires=("REQ-LOAD-022",),
      title="every message sets exactly one of settings, snapshot and heartbeat")
async def message_kinds(ctx: Context):
    w = await _fast_stream(ctx)
    w.expect_none("OEV320")
    kinds = sorted({r.kind or "none" for r in w.received})
    return f"{len(w.received)} messages ({', '.join(kinds)})"


@case("load.watch.snapshots-complete", profile=LOAD, requires=("REQ-LOAD-003",),
      title="every snapshot is a complete, current LoadInfo (it shows a running request)")
async def snapshots_complete(ctx: Context):
    ctx.require_decoding(observable=True)
    lim = _limits(ctx)
    w, s = await _open(ctx, interval_ms=_clamp(FAST_MS, lim), heartbeat_ms=0)
    # Ends as soon as a snapshot counts the request; the bound only stops a wait for nothing.
    window = _window(ctx, 5, max(1, s.interval_ms), at_least=w.prompt_seconds)
    gen = Reader(ctx.inference.Generate(ctx.long_request(), timeout=ctx.options.case_timeout + 5))
    loop = asyncio.get_running_loop()
    running_since = ended_at = None
    early = ""          # how the long request ended, when it ended early

    async def follow_request():
        nonlocal running_since, ended_at, early
        tokens = 0
        while True:
            msg = await gen.read(ctx.options.case_timeout)
            if msg is None or msg is grpc.aio.EOF or msg.HasField("finished") or msg.HasField("error"):
                ended_at = loop.time()
                if msg is not None and (msg is grpc.aio.EOF or msg.HasField("error")
                                        or tokens < ctx.long_generation_tokens() - 1):
                    early = "it " + ending(msg, tokens)
                return
            if running_since is None:
                running_since = loop.time()
            if msg.HasField("token"):
                tokens += len(msg.token.tokens)

    follower = asyncio.ensure_future(follow_request())
    try:
        end = loop.time() + window
        # Collect until a snapshot counts the request, the request ends, or the window closes.
        while loop.time() < end and ended_at is None:
            got = await w.read(min(end - loop.time(), 0.05))
            if got is not None and got.kind == "snapshot" and running_since is not None \
                    and got.msg.snapshot.load.running_requests + got.msg.snapshot.load.queued_requests >= 1:
                break
    finally:
        cancel_or_reap(follower)
        gen.cancel()
        w.cancel()
    snaps = [r for r in w.received if r.kind == "snapshot"]
    expect(snaps, "the stream carried no snapshot at all while a request ran")
    w.expect_none("OEV308")
    # Snapshots that arrived while the request was streaming and before it ended.
    during = [r.msg.snapshot for r in snaps if running_since is not None and r.at >= running_since
              and (ended_at is None or r.at < ended_at)]
    if not during and early:
        # The request died early: that is the engine's fault, not a limit of the stimulus.
        raise Failed(f"a request that asked for {ctx.long_generation_tokens()} tokens with ignore_eos "
                     f"and min_tokens stopped early ({early}), before a snapshot came while it ran")
    if not during:
        raise Unchecked(f"the longest request the model allows ({ctx.long_generation_tokens()} "
                        "tokens) ended before a snapshot came while it ran")
    busy = [x for x in during if x.load.running_requests + x.load.queued_requests >= 1]
    expect(busy, f"none of {len(during)} snapshots taken while a request ran counts it "
                 "(running_requests + queued_requests)")
    return f"{len(during)} snapshots while a request ran"


@case("load.watch.heartbeat-busy", profile=LOAD, requires=("REQ-LOAD-013",),
      title="on a stream busy with snapshots no heartbeat comes sooner than heartbeat_ms after the "
            "previous message (the timer restarts with every message)")
async def heartbeat_busy(ctx: Context):
    lim = _limits(ctx)
    interval = _clamp(FAST_MS, lim)
    w, s = await _open(ctx, interval_ms=interval, heartbeat_ms=_clamp(interval * 5 // 2, lim),
                       initial_snapshot=False)
    n, h = s.interval_ms, s.heartbeat_ms
    try:
        w.expect_none("OEV316", where=f"asked for interval {interval} ms and heartbeat {interval * 5 // 2} ms")
        if n == 0 or h == 0:
            raise Unchecked(f"the settings report interval {n} ms and heartbeat {h} ms: no busy stream "
                            "with heartbeats to check")
        got = await w.collect(_window(ctx, 6, max(n, h), at_least=0.3))
    finally:
        w.cancel()
    w.expect_none("OEV313", why="the heartbeat timer is not restarted by snapshots")
    snaps = [r for r in got if r.kind == "snapshot"]
    if len(snaps) < 3:
        raise Unchecked(f"{len(snaps)} snapshots in {6 * max(n, h)} ms at interval {n} ms: the stream "
                        "was not busy, so no heartbeat could follow a snapshot")
    beats = sum(1 for r in got if r.kind == "heartbeat")
    return f"interval {n} ms, heartbeat {h} ms, {len(snaps)} snapshots, {beats} heartbeats"


# Backpressure
SLOW_WINDOW_BYTES = 128
# Enough snapshots to fill the stalled connection's small window many times over.
STALL_INTERVALS = 24


def _updates_made(made, after_ms: float, until_ms: float, interval_ms: int) -> float:
    """The updates the engine made between two snapshot timestamps, as the watcher that kept
    reading saw them: each snapshot plus the ones coalesced into it, at most one per interval (the
    counts are the engine's own word: overstating them must not raise its bound)."""
    seen = sum(1 + r.msg.snapshot.coalesced for r in made
               if after_ms < _ms(r.msg.snapshot.load.timestamp_unix_nanos) <= until_ms)
    return min(seen, (until_ms - after_ms) / interval_ms + 1)


@case("load.watch.slow-reader", profile=LOAD,
      requires=("REQ-LOAD-015", "REQ-LOAD-016", "REQ-LOAD-014.1", "REQ-LOAD-014.2"),
      title="a watcher that stalls gets the latest snapshot, no backlog, and the gap counted")
async def slow_reader(ctx: Context):
    lim = _limits(ctx)
    channel = ctx.new_channel(window_bytes=SLOW_WINDOW_BYTES)
    w = Watch(ctx, channel=channel, interval_ms=_clamp(10, lim), heartbeat_ms=0)
    # A watcher that keeps reading at the same interval sees the updates the engine made.
    control = Watch(ctx, interval_ms=_clamp(10, lim), heartbeat_ms=0)
    reading = None
    try:
        s = await w.settings()
        n = s.interval_ms
        w.expect_none("OEV316", path="settings.interval_ms", where=f"asked for {_clamp(10, lim)} ms")
        if n == 0:
            raise Unchecked("the settings report change-driven updates: no steady rate to stall against")
        await control.settings()
        start = await w.read(w.prompt_seconds)
        expect(start is not None and start.kind == "snapshot",
               "no initial snapshot followed the settings" if start is None else
               f"a {start.kind} followed the settings, not the initial snapshot")
        stall = _window(ctx, STALL_INTERVALS, n, at_least=0.5, share=0.4)
        after = _window(ctx, 10, n, at_least=0.2, share=0.3)
        reading = asyncio.ensure_future(control.collect(stall + after + w.prompt_seconds))
        await asyncio.sleep(stall)
        # The pending snapshot is due at once when the watcher reads again (a bounded wait).
        reads_again = w.loop.time()
        resumed = await w.read(w.prompt_seconds)
        expect(resumed is not None, f"nothing was delivered within {w.prompt_seconds:g} s after a "
                                    f"{stall:.2f} s stall: the pending snapshot was not kept")
        got = [r for r in [resumed] + await w.collect(after) if r.kind == "snapshot"]
        cancel_or_reap(reading)
        made = [r for r in control.received if r.kind == "snapshot"]
    finally:
        if reading is not None:
            cancel_or_reap(reading)
        w.cancel()
        control.cancel()
    expect(got, "after the stall the stalled watcher got only heartbeats and no snapshot: the "
                "latest snapshot is kept for it and delivered when it reads again")
    # The coalesced stream keeps every stream rule; one the watcher that kept reading saw broken
    # too is broken whether or not snapshots are coalesced: its own case reports it.
    stream_rules = ("OEV303", "OEV304", "OEV305", "OEV306", "OEV307", "OEV308")
    everywhere = {v.rule_id for v in control.broken(*stream_rules)}
    w.expect_none(*(r for r in stream_rules if r not in everywhere),
                  where="the stream of a watcher that stalled",
                  why="a snapshot that replaced others is one message, numbered and stamped as such")
    first_ts = _ms(start.msg.snapshot.load.timestamp_unix_nanos)
    last_ts = _ms(got[-1].msg.snapshot.load.timestamp_unix_nanos)
    # A backlog queued during the stall arrives as a burst: more snapshots than the updates made
    # after the watcher read again (by their timestamps), the kept one and the few the window held.
    read_again_ts = first_ts + (reads_again - start.at) * 1000
    made_after = _updates_made(made, read_again_ts, last_ts, n)
    bound = 1.5 * made_after + 8
    expect(len(got) <= bound,
           f"{len(got)} snapshots arrived in the {after:.2f} s after a {stall:.2f} s stall, while "
           f"the engine made {made_after:.0f} updates in that time: the server queued a backlog "
           "instead of keeping only the latest snapshot")
    # A backlog delivered slowly is no burst, but old: the kept snapshot was made within an
    # interval of the watcher's reading again.
    newest = max(_ms(r.msg.snapshot.load.timestamp_unix_nanos) for r in got)
    expect(newest >= read_again_ts - 3 * n,
           f"the newest snapshot delivered in the {after:.2f} s after a {stall:.2f} s stall was made "
           f"{read_again_ts - newest:.0f} ms before the watcher read again: the server delivered "
           "queued old snapshots, not the latest")
    # The updates due: what the reading watcher got, or one per interval when it got none.
    updates = _updates_made(made, first_ts, last_ts, n) or (last_ts - first_ts) / n
    delivered = len(got)
    counted = sum(r.msg.snapshot.coalesced for r in got)
    expect(delivered + counted >= 0.5 * updates,
           f"over {last_ts - first_ts:.0f} ms at {n} ms a watcher that kept reading got {updates:.0f} "
           f"updates; {delivered} were delivered and only {counted} counted as coalesced: a silent gap")
    expect(counted > 0 or delivered >= 0.8 * updates,
           "the stalled watcher neither got every update nor saw any coalesced count")
    expect(counted <= 1.5 * updates + 2,
           f"coalesced adds up to {counted}, more than the {updates:.0f} updates due")
    return f"{delivered} delivered, {counted} coalesced, {updates:.0f} due"


@case("load.watch.stalled-isolated", profile=LOAD, requires=("REQ-LOAD-017",),
      title="a watcher that never reads does not delay other streams, GetLoad or requests")
async def stalled_isolated(ctx: Context):
    lim = _limits(ctx)
    interval = _clamp(RATE_PERIOD_MS, lim)
    stalled_channel = ctx.new_channel(window_bytes=SLOW_WINDOW_BYTES)
    stalled = Watch(ctx, channel=stalled_channel, interval_ms=_clamp(1, lim), heartbeat_ms=0)
    healthy = None
    try:
        await stalled.settings()
        try:
            healthy, s = await _open(ctx, interval_ms=interval, heartbeat_ms=0, initial_snapshot=False)
        except Failed as err:
            raise Failed(f"with a stalled watcher open, another stream: {err}") from None
        n = s.interval_ms
        window = _rate_window(ctx, n)
        collected, load, gen = await together(
            healthy.collect(window, kind="snapshot", count=RATE_GAPS + 1),
            ctx.control.GetLoad(timeout=window + 1),
            ctx.generate(ctx.generate_request(max_tokens=4), timeout=window + 1))
    finally:
        stalled.cancel()
        if healthy:
            healthy.cancel()
    snapshots = [r for r in collected if r.kind == "snapshot"]
    problem = _rate_problem(snapshots, n, window, "snapshots of a healthy watcher")
    expect(problem is None, f"with a stalled watcher open: {problem}")
    expect(gen and gen[-1].HasField("finished"),
           "a Generate started while a watcher stalled ended with " +
           (f"a {gen[-1].WhichOneof('event')} event" if gen else "no message") +
           ", not a finished event")
    return "healthy watcher's snapshots: " + _rate_note(snapshots, n)


# Ending
@case("load.watch.cancel-only-unsubscribes", profile=LOAD, requires=("REQ-LOAD-018",),
      title="cancelling a WatchLoad stream leaves running requests, health and other streams alone")
async def cancel_only(ctx: Context):
    ctx.require_decoding(observable=True)

    lim = _limits(ctx)
    interval = _clamp(FAST_MS, lim)
    wait = ctx.options.rpc_timeout
    other, _ = await _open(ctx, interval_ms=interval, heartbeat_ms=interval)
    # A request that runs as long as the model allows, so it is still running when the watcher
    # cancels, whatever the engine's pace; it must then go on streaming.
    long = ctx.long_request(prompt="conformance runs while a watcher cancels")
    gen = Reader(ctx.inference.Generate(long, timeout=ctx.options.case_timeout + 5))
    try:
        first = await gen.read(wait)
        expect(first is not None, f"the long request sent nothing within {wait:g} s")
        expect_running(first, long)
        w, _ = await _open(ctx, interval_ms=interval)
        await w.read(0.5)
        w.cancel()
        seen, want = 0, max(2, min(16, ctx.long_generation_tokens() // 8))
        while seen < want:
            msg = await gen.read(wait)
            expect(msg is not None, f"the running request sent nothing for {wait:g} s after a watcher "
                                    "cancelled")
            cancelled = msg is not grpc.aio.EOF and msg.HasField("finished") \
                and msg.finished.reason == generation_pb2.FINISH_REASON_CANCELLED
            if msg is grpc.aio.EOF or msg.HasField("error") or cancelled:
                raise Failed(f"the running request {ending(msg, seen)} after a watcher cancelled: "
                             "cancelling a WatchLoad stream ends that subscription only")
            if msg.HasField("finished"):
                break
            seen += len(msg.token.tokens)
        status = await ctx.check_health("openengine.v1.Inference")
        expect(status == health_pb2.HealthCheckResponse.SERVING,
               f"Inference is {health_pb2.HealthCheckResponse.ServingStatus.Name(status)} after a "
               "watcher cancelled, not SERVING")
        bound = max(other.prompt_seconds, 10 * interval / 1000)
        still = await other.read(bound)
        expect(still is not None, f"another WatchLoad stream sent nothing for {bound:g} s after a "
                                  "watcher cancelled")
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, "Generate while a watcher cancelled") from None
    finally:
        gen.cancel()
        other.cancel()
    return f"the running request streamed {seen} more tokens"


# A stream is held this share of the case timeout (and at least STAYS_OPEN_HEARTBEATS heartbeats):
# an engine that ends streams after a few seconds is caught, not only one that ends them at once.
STAYS_OPEN_SHARE, STAYS_OPEN_HEARTBEATS = 0.2, 4


@case("load.watch.stays-open", profile=LOAD, requires=("REQ-LOAD-019",),
      title="the server does not end a WatchLoad stream on its own, however long it is held")
async def stays_open(ctx: Context):
    lim = _limits(ctx)
    w, s = await _open(ctx, interval_ms=int(lim["max_watch_interval_ms"]),
                       heartbeat_ms=_clamp(500, lim), initial_snapshot=False)
    held = STAYS_OPEN_SHARE * ctx.options.case_timeout
    try:
        if s.heartbeat_ms:
            held = _window(ctx, STAYS_OPEN_HEARTBEATS, s.heartbeat_ms, at_least=held, share=0.6)
        await w.collect(held)
    finally:
        w.cancel()
    return f"held {held:.1f} s"
