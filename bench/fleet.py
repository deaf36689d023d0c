"""Fleet freshness: one scheduler process keeping the load of N reference engines (all hosted in
one server process, one port each), through WatchLoad against polling GetLoad, side by side
against the same engines in the same run.

For each N the server process starts, its engines begin changing load (Poisson, `rate` changes a
second each), and windows are measured one after the other:
1. idle: no scheduler connected (what the server costs on its own: engines, load changes);
2. then `rounds` rounds, each a WatchLoad window and a polling window, their order alternating
   from round to round:
   - WatchLoad: the scheduler holds one change-driven stream per engine (interval_ms = 0,
     heartbeat `heartbeat_ms`);
   - polling: a fresh scheduler process polls Control/GetLoad on every engine every `poll_ms`.
Each goal is judged from its per-round ratios; the descriptive figures add up every round.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.control import Child, idle_cpu_per_s, measured_window
from bench.figures import QUICK_ROUNDS, ROUNDS, Figure, Section, at_most, info, ratio
from bench.measure import TcpBytes, tcp_header_bytes
from bench.staleness import StalenessResult, join

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
    changes: int

    @property
    def modes(self) -> dict[str, ModeResult]:
        return {mode: ModeResult.total([r[mode] for r in self.rounds]) for mode in MODES}

    def server_net_pct(self, mode: str, window: ModeResult | None = None) -> float:
        """Server CPU above what the server spends with no scheduler connected."""
        window = window or self.modes[mode]
        return max(0.0, window.server_cpu_pct() - self.idle_server_cpu_pct)


def measure(engines: int, *, rate: float = 4.0, poll_ms: int = 50, heartbeat_ms: int = 1000,
            window_s: float = 4.0, idle_s: float = 3.0, tail_s: float = 0.5, seed: int = 1,
            rounds: int = ROUNDS) -> FleetResult:
    """Run the idle window and `rounds` interleaved rounds of both modes for one fleet size.
    `tail_s`: changes in the last `tail_s` seconds of a window are not counted (the scheduler keeps
    watching to the end of the window, so every counted change had at least that long to arrive)."""
    with tempfile.TemporaryDirectory(prefix="oe-bench-fleet-") as tmp:
        where = Path(tmp)
        with Child("bench.hosts", "engines", "--count", str(engines), "--rate", str(rate),
                   "--seed", str(seed), name=f"server ({engines} engines)") as server:
            hello = server.read(120)
            ports = ",".join(str(p) for p in hello["ports"])
            server.ask("start_changes")
            time.sleep(0.5)
            idle_pct = 100.0 * idle_cpu_per_s(server, idle_s)
            raw = []
            for i in range(rounds):
                raw.append({})
                for mode in MODES if i % 2 == 0 else MODES[::-1]:
                    raw[-1][mode] = _window(server, mode, ports, engines, poll_ms, heartbeat_ms, window_s,
                                            where / f"observations-{engines}-{mode}-{i}.json")
            server.ask("stop_changes")
            changes_path = where / f"changes-{engines}.json"
            server.ask("changes", path=str(changes_path), timeout=60)
        changes = [tuple(c) for c in json.loads(changes_path.read_text())]
        results = [{mode: _mode_result(mode, window, changes, tail_s) for mode, window in windows.items()}
                   for windows in raw]
        return FleetResult(engines, rate, poll_ms, idle_pct, results, len(changes))


def _window(server: Child, mode: str, ports: str, engines: int, poll_ms: int, heartbeat_ms: int,
            window_s: float, obs_path: Path) -> tuple:
    """One measured window of one mode: a fresh scheduler process, its readings and observations."""
    args = ["--mode", mode, "--ports", ports, "--interval-ms", str(poll_ms), "--heartbeat-ms", str(heartbeat_ms)]
    with Child("bench.scheduler", *args, name=f"scheduler ({mode}, {engines} engines)") as sched:
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
        out["server_cpu"].append(ratio(r.server_net_pct("watch", w), r.server_net_pct("poll", p) * k))
        out["bytes"].append(ratio(w.tcp.on_wire(hdr) / w.seconds, p.tcp.on_wire(hdr) / p.seconds * k))
        out["staleness_p99"].append(ratio(w.staleness.quantile_ms(0.99), p.staleness.quantile_ms(0.99)))
    return out


def _per(cpu_s: float, count: int) -> float:
    """Microseconds of CPU per message (0 when none arrived)."""
    return 1e6 * cpu_s / count if count else 0.0


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
        info(f"{pre}.watch.client_cpu", round(w.client_cpu_pct(), 2), "% of a core", group=g),
        info(f"{pre}.poll.client_cpu", round(p.client_cpu_pct(), 2), "% of a core", group=g),
        at_most(f"{pre}.client_cpu_ratio", per_round["client_cpu"], 0.25, group=g,
                note="scheduler CPU, WatchLoad / polling" + asked),
        info(f"{pre}.client_cpu_ratio_measured", round(ratio(w.client_cpu_s / w.seconds, p.client_cpu_s / p.seconds), 3),
             "ratio", group=g, note="scheduler CPU, WatchLoad / polling at the interval polling achieved"),
        info(f"{pre}.idle.server_cpu", round(r.idle_server_cpu_pct, 2), "% of a core", group=g,
             note="server process with no scheduler connected (engines + synthetic changes)"),
        info(f"{pre}.watch.server_cpu", round(w.server_cpu_pct(), 2), "% of a core", group=g),
        info(f"{pre}.poll.server_cpu", round(p.server_cpu_pct(), 2), "% of a core", group=g),
        at_most(f"{pre}.server_cpu_ratio", per_round["server_cpu"], 0.25, group=g,
                note="server CPU above idle, WatchLoad / polling" + asked),
        info(f"{pre}.server_cpu_ratio_gross", round(ratio(w.server_cpu_pct(), p.server_cpu_pct()), 3), "ratio",
             group=g, note="server CPU including its idle cost, WatchLoad / polling"),
        info(f"{pre}.watch.bytes_per_s", round(w.tcp.on_wire(hdr) / w.seconds), "B/s", group=g),
        info(f"{pre}.poll.bytes_per_s", round(p.tcp.on_wire(hdr) / p.seconds), "B/s", group=g),
        at_most(f"{pre}.bytes_ratio", per_round["bytes"], 0.25, group=g,
                note="bytes on the wire incl. TCP/IP headers, WatchLoad / polling" + asked),
        info(f"{pre}.payload_bytes_ratio", round(ratio(w.tcp.payload / w.seconds, p.tcp.payload / p.seconds), 3),
             "ratio", group=g, note="TCP payload (HTTP/2 frames) only, WatchLoad / polling"),
        info(f"{pre}.watch.staleness_p50", round(w.staleness.quantile_ms(0.5), 2), "ms", group=g),
        info(f"{pre}.watch.staleness_p99", round(w.staleness.quantile_ms(0.99), 2), "ms", group=g),
        info(f"{pre}.poll.staleness_p50", round(p.staleness.quantile_ms(0.5), 2), "ms", group=g),
        info(f"{pre}.poll.staleness_p99", round(p.staleness.quantile_ms(0.99), 2), "ms", group=g),
        at_most(f"{pre}.staleness_p99_ratio", per_round["staleness_p99"], 1.0, group=g,
                note="p99 staleness, WatchLoad / polling"),
        info(f"{pre}.watch.changes", w.staleness.changes, "changes", group=g,
             note=f"{w.staleness.missed} not seen by the end of the window"),
        info(f"{pre}.poll.changes", p.staleness.changes, "changes", group=g,
             note=f"{p.staleness.missed} not seen by the end of the window"),
        info(f"{pre}.poll.achieved_interval", round(1000.0 * n * p.seconds / p.messages, 1) if p.messages else 0.0,
             "ms", group=g, note=f"mean time between two polls of one engine (asked: {r.poll_ms} ms)"),
        info(f"{pre}.watch.messages_per_s", round(w.messages / w.seconds, 1), "msg/s", group=g,
             note="snapshots and heartbeats received"),
        info(f"{pre}.watch.client_us_per_update", round(_per(w.client_cpu_s, w.messages), 1), "us", group=g,
             note="scheduler CPU per streamed message received"),
        info(f"{pre}.poll.client_us_per_poll", round(_per(p.client_cpu_s, p.messages), 1), "us", group=g,
             note="scheduler CPU per GetLoad round trip"),
        info(f"{pre}.update_over_poll_cpu",
             round(ratio(_per(w.client_cpu_s, w.messages), _per(p.client_cpu_s, p.messages)), 3), "ratio", group=g,
             note="client CPU per streamed update / client CPU per poll"),
    ]
    if w.errors or p.errors:
        out.append(info(f"{pre}.rpc_errors", w.errors + p.errors, "errors", group=g))
    return out


def run(quick: bool = False) -> Section:
    if quick:
        sizes, kw = (2, 4), dict(window_s=1.5, idle_s=0.5, rounds=QUICK_ROUNDS)
    else:
        sizes, kw = (10, 50, 200), dict(window_s=4.0, idle_s=3.0, rounds=ROUNDS)
    section = Section("Fleet freshness: WatchLoad against polling GetLoad")
    results = [measure(n, **kw) for n in sizes]
    for r in results:
        section.figures += figures(r)
    section.discussion = (f"Each engine's load changes {results[0].rate:g} times a second; polling asks every "
                          f"{results[0].poll_ms} ms, WatchLoad streams every change. How the figures are taken: "
                          "bench/NOTES.md.")
    return section
