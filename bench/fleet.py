"""Fleet freshness: one scheduler process keeping the load of N reference engines (all hosted in
one server process, one port each), through WatchLoad against polling GetLoad, side by side
against the same engines in the same run.

For each N the server process starts, its engines begin changing load (Poisson, `rate` changes a
second each), and windows are measured one after the other:
1. idle: no scheduler connected (what the server costs on its own: engines, load changes);
2. then `rounds` rounds, each a WatchLoad window and a polling window, their order alternating
   from round to round:
   - WatchLoad: the scheduler holds one change-driven stream per engine (interval_ms = 0,
     heartbeat 1 s);
   - polling: a fresh scheduler process polls Control/GetLoad on every engine every `poll_ms`.
Each goal is judged from its per-round ratios; the descriptive figures add up every round.
"""

from __future__ import annotations

import bisect
import itertools
import json
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from bench.control import Child, idle_cpu_per_s, measured_window
from bench.figures import QUICK_ROUNDS, ROUNDS, Figure, Section, at_most, info, interleaved, quantile, ratio
from bench.measure import TcpBytes, tcp_header_bytes

@dataclass
class StalenessResult:
    samples_ns: list[int] = field(default_factory=list)   # one per change seen in time, sorted
    missed: int = 0        # changes in the window never seen before the scheduler stopped watching
    changes: int = 0       # changes in the window

    def quantile_ms(self, q: float) -> float:
        return quantile(self.samples_ns, q) / 1e6


def join(changes: Iterable[tuple[int, int, int]], observations: Iterable[tuple[int, int, int]], *,
         window: tuple[int, int], observed_until: int) -> StalenessResult:
    """Staleness of every change whose time falls in `window` ([start, end) ns), from two logs that
    share CLOCK_MONOTONIC: the engines' `changes` (engine, k, change time) for the k-th change of
    each engine, and the scheduler's `observations` (engine, time, value) of every load value it
    received. A change's staleness is the first time the scheduler holds a value >= k for that
    engine, minus the change time: the same for polling (a later poll shows a larger counter) and
    for a coalesced stream (one snapshot can cover several changes).

    `observations` are (engine, time ns, value) in any order. A change not seen by
    `observed_until` counts as missed and adds `observed_until - change time` as a lower bound,
    so a lost update makes the percentiles worse instead of disappearing."""
    seen_at: dict[int, tuple[list[int], list[int]]] = {}
    by_engine: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for engine, t, value in observations:
        by_engine[engine].append((t, value))
    for engine, obs in by_engine.items():
        obs.sort()
        # Running maximum: the first time each counter value (or more) was held.
        times, highest = [], []
        top = -1
        for t, value in obs:
            if value > top:
                top = value
                times.append(t)
                highest.append(value)
        seen_at[engine] = (highest, times)

    result = StalenessResult()
    start, end = window
    for engine, k, t_change in changes:
        if not start <= t_change < end:
            continue
        result.changes += 1
        highest, times = seen_at.get(engine, ([], []))
        i = bisect.bisect_left(highest, k)
        if i < len(highest) and times[i] <= observed_until:
            result.samples_ns.append(max(0, times[i] - t_change))
        else:
            result.missed += 1
            result.samples_ns.append(max(0, observed_until - t_change))
    result.samples_ns.sort()
    return result


MODES = ("watch", "poll")


@dataclass
class ModeResult:
    mode: str
    seconds: float
    client_cpu_s: float
    server_cpu_s: float
    tcp: TcpBytes
    messages: int
    staleness: StalenessResult
    errors: int

    def client_cpu_pct(self) -> float:
        return 100.0 * self.client_cpu_s / self.seconds

    def server_cpu_pct(self) -> float:
        return 100.0 * self.server_cpu_s / self.seconds

    @staticmethod
    def total(results: list["ModeResult"]) -> "ModeResult":
        """Several windows of one mode as one: their times, CPU, bytes, messages and staleness added."""
        samples = sorted(x for r in results for x in r.staleness.samples_ns)
        tcp = TcpBytes(*(sum(getattr(r.tcp, k) for r in results) for k in ("sent", "received", "segments")))
        return ModeResult(results[0].mode, sum(r.seconds for r in results), sum(r.client_cpu_s for r in results),
                          sum(r.server_cpu_s for r in results), tcp, sum(r.messages for r in results),
                          StalenessResult(samples, sum(r.staleness.missed for r in results),
                                          sum(r.staleness.changes for r in results)),
                          sum(r.errors for r in results))


@dataclass
class FleetResult:
    """One fleet size: `rounds` holds each round's windows by mode; `modes` every round added up."""

    engines: int
    rate: float
    poll_ms: int
    idle_server_cpu_pct: float
    rounds: list[dict[str, ModeResult]]

    @property
    def modes(self) -> dict[str, ModeResult]:
        return {mode: ModeResult.total([r[mode] for r in self.rounds]) for mode in MODES}

    def server_net_pct(self, window: ModeResult) -> float:
        """Server CPU above what the server spends with no scheduler connected."""
        return max(0.0, window.server_cpu_pct() - self.idle_server_cpu_pct)


def measure(engines: int, *, rate: float = 4.0, poll_ms: int = 50, window_s: float = 4.0, idle_s: float = 3.0,
            tail_s: float = 0.5, rounds: int = ROUNDS) -> FleetResult:
    """Run the idle window and `rounds` interleaved rounds of both modes for one fleet size.
    `tail_s`: changes in the last `tail_s` seconds of a window are not counted (the scheduler keeps
    watching to the end of the window, so every counted change had at least that long to arrive)."""
    with tempfile.TemporaryDirectory(prefix="oe-bench-fleet-") as tmp:
        files = (Path(tmp) / f"{i}.json" for i in itertools.count())
        with Child("bench.hosts", "engines", "--count", str(engines), "--rate", str(rate),
                   name=f"server ({engines} engines)") as server:
            ports = ",".join(str(p) for p in server.read(120)["ports"])
            server.ask("start_changes")
            time.sleep(0.5)
            idle_pct = 100.0 * idle_cpu_per_s(server, idle_s)
            raw = interleaved(lambda mode: _window(server, mode, ports, engines, poll_ms, window_s,
                                                   next(files)), MODES, rounds)
            server.ask("stop_changes")
            changes_path = next(files)
            server.ask("changes", path=str(changes_path), timeout=60)
        changes = [tuple(c) for c in json.loads(changes_path.read_text())]
        results = [{mode: _mode_result(mode, window, changes, tail_s) for mode, window in zip(MODES, windows)}
                   for windows in raw]
        return FleetResult(engines, rate, poll_ms, idle_pct, results)


def _window(server: Child, mode: str, ports: str, engines: int, poll_ms: int, window_s: float,
            obs_path: Path) -> tuple:
    """One measured window of one mode: a fresh scheduler process, its readings and observations."""
    with Child("bench.scheduler", "--mode", mode, "--ports", ports, "--interval-ms", str(poll_ms),
               name=f"scheduler ({mode}, {engines} engines)") as sched:
        sched.read(60)
        sched.ask("open", timeout=90)
        time.sleep(0.5)   # past connection set-up and the first values
        s0, c0, c1, s1 = measured_window(server, sched, window_s)
        sched.ask("dump", path=str(obs_path), timeout=60)
    return s0, s1, c0, c1, obs_path


def _mode_result(mode: str, window: tuple, changes: list, tail_s: float) -> ModeResult:
    s0, s1, c0, c1, obs_path = window
    t0, t1 = c0["usage"]["mono_ns"], c1["usage"]["mono_ns"]
    observations = [tuple(o) for o in json.loads(obs_path.read_text())]
    staleness = join(changes, observations, window=(t0, t1 - int(tail_s * 1e9)), observed_until=t1)
    return ModeResult(
        mode=mode, seconds=(t1 - t0) / 1e9, client_cpu_s=c1["usage"]["cpu_s"] - c0["usage"]["cpu_s"],
        server_cpu_s=s1["cpu_s"] - s0["cpu_s"], tcp=TcpBytes(**c1["tcp"]) - TcpBytes(**c0["tcp"]),
        messages=c1["messages"], staleness=staleness, errors=c1["error_count"])


def _shortfall(r: FleetResult, p: ModeResult | None = None) -> float:
    """Asked poll rate / achieved poll rate, to two places (1 when the polling scheduler kept its
    interval, or fell behind it by less than 0.5%: jitter, not a shortfall to scale by)."""
    p = p or r.modes["poll"]
    if not p.messages:
        return 1.0
    achieved_ms = 1000.0 * r.engines * p.seconds / p.messages
    return max(1.0, round(achieved_ms / r.poll_ms, 2))


def _round_ratios(r: FleetResult) -> dict[str, list[float]]:
    """Each goal's ratio in every round, WatchLoad over polling at the asked interval."""
    hdr = tcp_header_bytes()
    out: dict[str, list[float]] = {"client_cpu": [], "server_cpu": [], "bytes": [], "staleness_p99": []}
    for rnd in r.rounds:
        w, p = rnd["watch"], rnd["poll"]
        k = _shortfall(r, p)
        out["client_cpu"].append(ratio(w.client_cpu_s / w.seconds, p.client_cpu_s / p.seconds * k))
        out["server_cpu"].append(ratio(r.server_net_pct(w), r.server_net_pct(p) * k))
        out["bytes"].append(ratio(w.tcp.on_wire(hdr) / w.seconds, p.tcp.on_wire(hdr) / p.seconds * k))
        out["staleness_p99"].append(ratio(w.staleness.quantile_ms(0.99), p.staleness.quantile_ms(0.99)))
    return out


def figures(r: FleetResult) -> list[Figure]:
    w, p = r.modes["watch"], r.modes["poll"]
    n = r.engines
    g = f"fleet N={n}"
    hdr = tcp_header_bytes()
    pre = f"fleet.n{n}"
    # The goals compare WatchLoad with polling at the interval polling was asked for. A polling
    # scheduler that fell behind it (CPU-bound at large N) spent less than it was asked to, so its
    # CPU and bytes are scaled by how far it fell behind (a poll costs about the same whatever the
    # rate), and the note says so; where it kept its interval nothing is scaled.
    k = _shortfall(r)
    asked = (f", polling scaled from its achieved interval to the asked {r.poll_ms} ms (x{k:.2f} over all "
             "rounds, an extrapolation)" if k > 1.0 else f", at the asked {r.poll_ms} ms interval")
    per_round = _round_ratios(r)
    out = [
        at_most(f"{pre}.client_cpu_ratio", per_round["client_cpu"], 0.25, group=g,
                note="scheduler CPU, WatchLoad / polling" + asked),
        info(f"{pre}.client_cpu_ratio_measured", round(ratio(w.client_cpu_s / w.seconds, p.client_cpu_s / p.seconds), 3),
             "ratio", group=g, note="scheduler CPU, WatchLoad / polling at the interval polling achieved"),
        at_most(f"{pre}.server_cpu_ratio", per_round["server_cpu"], 0.25, group=g,
                note="server CPU above idle, WatchLoad / polling" + asked),
        at_most(f"{pre}.bytes_ratio", per_round["bytes"], 0.25, group=g,
                note="bytes on the wire incl. TCP/IP headers, WatchLoad / polling" + asked),
        at_most(f"{pre}.staleness_p99_ratio", per_round["staleness_p99"], 1.0, group=g,
                note="p99 staleness, WatchLoad / polling"),
        info(f"{pre}.idle.server_cpu", round(r.idle_server_cpu_pct, 2), "% of a core", group=g,
             note="server process with no scheduler connected (engines + synthetic changes)"),
        info(f"{pre}.poll.achieved_interval", round(1000.0 * n * p.seconds / p.messages, 1) if p.messages else 0.0,
             "ms", group=g, note=f"mean time between two polls of one engine (asked: {r.poll_ms} ms)"),
    ]
    for mode, m in (("watch", w), ("poll", p)):
        out += [
            info(f"{pre}.{mode}.client_cpu", round(m.client_cpu_pct(), 2), "% of a core", group=g),
            info(f"{pre}.{mode}.server_cpu", round(m.server_cpu_pct(), 2), "% of a core", group=g),
            info(f"{pre}.{mode}.bytes_per_s", round(m.tcp.on_wire(hdr) / m.seconds), "B/s", group=g),
            info(f"{pre}.{mode}.staleness_p50", round(m.staleness.quantile_ms(0.5), 2), "ms", group=g),
            info(f"{pre}.{mode}.staleness_p99", round(m.staleness.quantile_ms(0.99), 2), "ms", group=g),
            info(f"{pre}.{mode}.changes", m.staleness.changes, "changes", group=g,
                 note=f"{m.staleness.missed} not seen by the end of the window"),
        ]
    if w.errors or p.errors:
        out.append(info(f"{pre}.rpc_errors", w.errors + p.errors, "errors", group=g))
    return out


def run(quick: bool = False) -> Section:
    sizes, kw = (((2, 4), dict(window_s=1.5, idle_s=0.5, rounds=QUICK_ROUNDS)) if quick
                 else ((10, 50, 200), dict(window_s=4.0, idle_s=3.0, rounds=ROUNDS)))
    section = Section("Fleet freshness: WatchLoad against polling GetLoad")
    results = [measure(n, **kw) for n in sizes]
    for r in results:
        section.figures += figures(r)
    section.discussion = (f"Each engine's load changes {results[0].rate:g} times a second; polling asks "
                          f"every {results[0].poll_ms} ms, WatchLoad streams every change. How the figures "
                          "are taken: bench/NOTES.md.")
    return section
