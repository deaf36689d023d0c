"""Fleet freshness: one scheduler process keeping the load of N reference engines (all hosted in
one server process, one port each), through WatchLoad against polling GetLoad, side by side
against the same engines in the same run.

For each N the server process starts, its engines begin changing load (Poisson, `rate` changes a
second each), and three windows are measured one after the other:
1. idle: no scheduler connected (what the server costs on its own: engines, load changes);
2. WatchLoad: the scheduler holds one change-driven stream per engine (interval_ms = 0,
   heartbeat `heartbeat_ms`);
3. polling: a fresh scheduler process polls GetLoad on every engine every `poll_ms`.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.control import Child
from bench.figures import Figure, Section, at_most, info
from bench.measure import TcpBytes, loopback_tx_bytes, tcp_header_bytes
from bench.staleness import StalenessResult, join

MODES = ("watch", "poll")


@dataclass
class ModeResult:
    mode: str
    seconds: float
    client_cpu_s: float
    server_cpu_s: float
    tcp: TcpBytes
    loopback_bytes: int
    messages: int
    staleness: StalenessResult
    errors: int

    def client_cpu_pct(self) -> float:
        return 100.0 * self.client_cpu_s / self.seconds

    def server_cpu_pct(self) -> float:
        return 100.0 * self.server_cpu_s / self.seconds


@dataclass
class FleetResult:
    engines: int
    rate: float
    poll_ms: int
    idle_server_cpu_pct: float
    modes: dict[str, ModeResult]
    changes: int

    def server_net_pct(self, mode: str) -> float:
        """Server CPU above what the server spends with no scheduler connected."""
        return max(0.0, self.modes[mode].server_cpu_pct() - self.idle_server_cpu_pct)


def _tcp(reading: dict) -> TcpBytes:
    return TcpBytes(**reading["tcp"])


def measure(engines: int, *, rate: float = 4.0, poll_ms: int = 50, heartbeat_ms: int = 1000,
            window_s: float = 8.0, idle_s: float = 3.0, tail_s: float = 0.5, seed: int = 1,
            workdir: Path | None = None) -> FleetResult:
    """Run the three windows for one fleet size. `tail_s`: changes in the last `tail_s` seconds of a
    window are not counted (the scheduler keeps watching to the end of the window, so every counted
    change had at least that long to arrive)."""
    tmp = tempfile.TemporaryDirectory(prefix="oe-bench-fleet-") if workdir is None else None
    where = Path(tmp.name) if tmp else workdir
    try:
        with Child("bench.hosts", "engines", "--count", str(engines), "--rate", str(rate),
                   "--seed", str(seed), name=f"server ({engines} engines)") as server:
            hello = server.read(120)
            ports = ",".join(str(p) for p in hello["ports"])
            server.ask("start_changes")
            time.sleep(0.5)
            m0 = server.ask("mark")["usage"]
            time.sleep(idle_s)
            m1 = server.ask("mark")["usage"]
            idle_pct = 100.0 * (m1["cpu_s"] - m0["cpu_s"]) / ((m1["mono_ns"] - m0["mono_ns"]) / 1e9)
            raw = {}
            for mode in MODES:
                args = ["--mode", mode, "--ports", ports, "--interval-ms", str(poll_ms),
                        "--heartbeat-ms", str(heartbeat_ms)]
                with Child("bench.scheduler", *args, name=f"scheduler ({mode}, {engines} engines)") as sched:
                    sched.read(60)
                    sched.ask("open", timeout=90)
                    time.sleep(0.5)   # past connection set-up and the first values
                    s0 = server.ask("mark")["usage"]
                    lo0 = loopback_tx_bytes()
                    c0 = sched.ask("go")
                    time.sleep(window_s)
                    c1 = sched.ask("stop")
                    lo1 = loopback_tx_bytes()
                    s1 = server.ask("mark")["usage"]
                    obs_path = where / f"observations-{engines}-{mode}.json"
                    sched.ask("dump", path=str(obs_path), timeout=60)
                raw[mode] = (s0, s1, c0, c1, lo1 - lo0, obs_path)
            server.ask("stop_changes")
            changes_path = where / f"changes-{engines}.json"
            server.ask("changes", path=str(changes_path), timeout=60)
        changes = [tuple(c) for c in json.loads(changes_path.read_text())]
        modes = {}
        for mode, (s0, s1, c0, c1, lo, obs_path) in raw.items():
            t0, t1 = c0["usage"]["mono_ns"], c1["usage"]["mono_ns"]
            observations = [tuple(o) for o in json.loads(obs_path.read_text())]
            staleness = join(changes, observations, window=(t0, t1 - int(tail_s * 1e9)), observed_until=t1)
            modes[mode] = ModeResult(
                mode=mode, seconds=(t1 - t0) / 1e9,
                client_cpu_s=c1["usage"]["cpu_s"] - c0["usage"]["cpu_s"],
                server_cpu_s=s1["cpu_s"] - s0["cpu_s"],
                tcp=_tcp(c1) - _tcp(c0), loopback_bytes=lo, messages=c1["messages"],
                staleness=staleness, errors=c1["error_count"])
        return FleetResult(engines, rate, poll_ms, idle_pct, modes, len(changes))
    finally:
        if tmp is not None:
            tmp.cleanup()


def _shortfall(r: FleetResult) -> float:
    """Asked poll rate / achieved poll rate (1 when the polling scheduler kept its interval)."""
    p = r.modes["poll"]
    if not p.messages:
        return 1.0
    achieved_ms = 1000.0 * r.engines * p.seconds / p.messages
    return max(1.0, achieved_ms / r.poll_ms)


def _per(cpu_s: float, count: int) -> float:
    """Microseconds of CPU per message (0 when none arrived)."""
    return 1e6 * cpu_s / count if count else 0.0


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def figures(r: FleetResult) -> list[Figure]:
    w, p = r.modes["watch"], r.modes["poll"]
    n = r.engines
    g = f"fleet N={n}"
    hdr = tcp_header_bytes()
    pre = f"fleet.n{n}"
    out = [
        info(f"{pre}.watch.client_cpu", round(w.client_cpu_pct(), 2), "% of a core", group=g),
        info(f"{pre}.poll.client_cpu", round(p.client_cpu_pct(), 2), "% of a core", group=g),
        at_most(f"{pre}.client_cpu_ratio", round(_ratio(w.client_cpu_s / w.seconds, p.client_cpu_s / p.seconds), 3),
                0.25, group=g, note="scheduler CPU, WatchLoad / polling"),
        info(f"{pre}.idle.server_cpu", round(r.idle_server_cpu_pct, 2), "% of a core", group=g,
             note="server process with no scheduler connected (engines + synthetic changes)"),
        info(f"{pre}.watch.server_cpu", round(w.server_cpu_pct(), 2), "% of a core", group=g),
        info(f"{pre}.poll.server_cpu", round(p.server_cpu_pct(), 2), "% of a core", group=g),
        at_most(f"{pre}.server_cpu_ratio", round(_ratio(r.server_net_pct("watch"), r.server_net_pct("poll")), 3),
                0.25, group=g, note="server CPU above idle, WatchLoad / polling"),
        info(f"{pre}.server_cpu_ratio_gross", round(_ratio(w.server_cpu_pct(), p.server_cpu_pct()), 3), "ratio",
             group=g, note="server CPU including its idle cost, WatchLoad / polling"),
        info(f"{pre}.watch.bytes_per_s", round(w.tcp.on_wire(hdr) / w.seconds), "B/s", group=g),
        info(f"{pre}.poll.bytes_per_s", round(p.tcp.on_wire(hdr) / p.seconds), "B/s", group=g),
        at_most(f"{pre}.bytes_ratio", round(_ratio(w.tcp.on_wire(hdr) / w.seconds, p.tcp.on_wire(hdr) / p.seconds), 3),
                0.25, group=g, note="bytes on the wire incl. TCP/IP headers, WatchLoad / polling"),
        info(f"{pre}.payload_bytes_ratio", round(_ratio(w.tcp.payload / w.seconds, p.tcp.payload / p.seconds), 3),
             "ratio", group=g, note="TCP payload (HTTP/2 frames) only, WatchLoad / polling"),
        info(f"{pre}.watch.staleness_p50", round(w.staleness.quantile_ms(0.5), 2), "ms", group=g),
        info(f"{pre}.watch.staleness_p99", round(w.staleness.quantile_ms(0.99), 2), "ms", group=g),
        info(f"{pre}.poll.staleness_p50", round(p.staleness.quantile_ms(0.5), 2), "ms", group=g),
        info(f"{pre}.poll.staleness_p99", round(p.staleness.quantile_ms(0.99), 2), "ms", group=g),
        at_most(f"{pre}.staleness_p99_ratio",
                round(_ratio(w.staleness.quantile_ms(0.99), p.staleness.quantile_ms(0.99)), 3), 1.0, group=g,
                note="p99 staleness, WatchLoad / polling"),
        info(f"{pre}.watch.changes", w.staleness.changes, "changes", group=g,
             note=f"{w.staleness.missed} not seen by the end of the window"),
        info(f"{pre}.poll.changes", p.staleness.changes, "changes", group=g,
             note=f"{p.staleness.missed} not seen by the end of the window"),
        info(f"{pre}.poll.achieved_interval", round(1000.0 * n * p.seconds / p.messages, 1) if p.messages else 0.0,
             "ms", group=g, note=f"mean time between two polls of one engine (asked: {r.poll_ms} ms)"),
        info(f"{pre}.client_cpu_ratio_at_asked_interval",
             round(_ratio(w.client_cpu_s / w.seconds, p.client_cpu_s / p.seconds * _shortfall(r)), 3), "ratio",
             group=g, note="polling's CPU scaled linearly from the achieved to the asked interval "
                           "(an extrapolation; equals the measured ratio when polling kept its interval)"),
        info(f"{pre}.watch.messages_per_s", round(w.messages / w.seconds, 1), "msg/s", group=g,
             note="snapshots and heartbeats received"),
        info(f"{pre}.watch.client_us_per_update", round(_per(w.client_cpu_s, w.messages), 1), "us", group=g,
             note="scheduler CPU per streamed message received"),
        info(f"{pre}.poll.client_us_per_poll", round(_per(p.client_cpu_s, p.messages), 1), "us", group=g,
             note="scheduler CPU per GetLoad round trip"),
        at_most(f"{pre}.update_over_poll_cpu",
                round(_ratio(_per(w.client_cpu_s, w.messages), _per(p.client_cpu_s, p.messages)), 3), 0.5, group=g,
                note="client CPU per streamed update / client CPU per poll"),
    ]
    if w.errors or p.errors:
        out.append(info(f"{pre}.rpc_errors", w.errors + p.errors, "errors", group=g))
    return out


def run(sizes: tuple[int, ...] = (10, 50, 200), **kw) -> tuple[Section, list[FleetResult]]:
    section = Section("Fleet freshness: WatchLoad against polling GetLoad")
    results = []
    for n in sizes:
        r = measure(n, **kw)
        results.append(r)
        section.figures += figures(r)
    section.discussion = discussion(results)
    return section, results


def discussion(results: list[FleetResult]) -> str:
    if not results:
        return ""
    r0 = results[0]
    lines = [
        f"Each engine's load changes as a Poisson process of {r0.rate:g} changes a second (a synthetic "
        "request in the engine's own scheduler produces one more token and the engine announces the "
        "change, bench/synthetic.py). All N engines run in one server process (one port and one "
        "grpc.aio server each, one event loop); the scheduler is a second process. Both share the "
        "machine's 2 cores, so at large N they compete for CPU and each one's cost raises the other's "
        "latency.",
        "",
        f"Staleness of a change is the first time the scheduler holds a value at least as new, minus "
        f"the time the engine made the change; both are CLOCK_MONOTONIC readings in two processes on one "
        f"machine. Polling every {r0.poll_ms} ms has a staleness bound of about {r0.poll_ms} ms plus a "
        "round trip; a change-driven WatchLoad stream (interval_ms = 0, heartbeat 1 s) has a bound of one "
        "delivery, far below that. The comparison is therefore at *equal or better* staleness for WatchLoad: "
        "polling is allowed the looser bound, and WatchLoad must still cost at most a quarter of polling's "
        "CPU and bytes and have a p99 staleness no worse.",
        "",
        "CPU is user + system time of each whole process (every thread) over the window, from getrusage in "
        "the process itself. Server CPU ratios subtract the server's idle cost (measured first, with no "
        "scheduler connected: engines, timers and the synthetic changes), so they compare what serving the "
        "signal costs; the gross ratio is listed beside it. Bytes are the kernel's TCP counters "
        "(tcp_info bytes_acked/bytes_received and segment counts) of exactly the scheduler's connections, "
        "so they include HTTP/2 framing, gRPC message framing, HPACK headers, flow-control and PING frames, "
        f"and one {tcp_header_bytes()}-byte IPv4+TCP header per segment (pure ACKs included); other traffic "
        "on the machine's loopback does not count.",
        "",
    ]
    for r in results:
        w, p = r.modes["watch"], r.modes["poll"]
        cpu = _ratio(w.client_cpu_s / w.seconds, p.client_cpu_s / p.seconds)
        srv = _ratio(r.server_net_pct("watch"), r.server_net_pct("poll"))
        hdr = tcp_header_bytes()
        byt = _ratio(w.tcp.on_wire(hdr) / w.seconds, p.tcp.on_wire(hdr) / p.seconds)
        st = _ratio(w.staleness.quantile_ms(0.99), p.staleness.quantile_ms(0.99))
        verdict = [f"client CPU {cpu:.2f}x ({_met(cpu <= 0.25)})", f"server CPU {srv:.2f}x ({_met(srv <= 0.25)})",
                   f"bytes {byt:.2f}x ({_met(byt <= 0.25)})", f"p99 staleness {st:.2f}x ({_met(st <= 1.0)})"]
        achieved = 1000.0 * r.engines * p.seconds / p.messages if p.messages else float("nan")
        lines.append(
            f"- **N = {r.engines}**: WatchLoad against polling: {', '.join(verdict)}. Polling held the load "
            f"{p.staleness.quantile_ms(0.5):.1f} ms / {p.staleness.quantile_ms(0.99):.1f} ms (p50/p99) old, "
            f"WatchLoad {w.staleness.quantile_ms(0.5):.1f} ms / {w.staleness.quantile_ms(0.99):.1f} ms; "
            f"the scheduler spent {p.client_cpu_pct():.1f}% of a core polling and {w.client_cpu_pct():.1f}% "
            f"watching; one engine was polled every {achieved:.1f} ms on average (asked {r.poll_ms} ms)"
            + ((f" — the polling scheduler could not keep its interval (CPU-bound on the shared cores), so "
                f"its staleness grew and its CPU and bytes stopped growing with N; the ratios compare WatchLoad "
                f"with the polling this machine could sustain, and scaled to the asked interval the client CPU "
                f"ratio would be {cpu / _shortfall(r):.2f}x.")
               if achieved > 1.2 * r.poll_ms else ".")
            + (f" {w.staleness.missed + p.staleness.missed} changes were never seen." if
               w.staleness.missed + p.staleness.missed else ""))
    last = results[-1]
    w, p = last.modes["watch"], last.modes["poll"]
    if w.messages and p.messages:
        per_msg_watch = w.client_cpu_s / w.messages * 1e6
        per_poll = p.client_cpu_s / p.messages * 1e6
        crossover = (1000.0 / last.poll_ms) * per_poll / per_msg_watch
        lines += [
            "",
            f"What limits it: WatchLoad's cost follows the change rate, polling's follows 1/P. At N = "
            f"{last.engines} a poll cost the scheduler {per_poll:.0f} us of CPU and a streamed update "
            f"{per_msg_watch:.0f} us, so WatchLoad stays cheaper than {last.poll_ms} ms polling up to about "
            f"{crossover:.0f} changes a second per engine, and within the quarter-of-polling goal up to about "
            f"{crossover / 4:.0f}; a change-driven stream of an engine whose load changes faster than that "
            "should ask for a periodic interval instead (coalescing keeps the cost at one message per "
            "interval). Matching WatchLoad's p99 by polling would need an interval near that p99, "
            f"{p.staleness.quantile_ms(0.99) / max(w.staleness.quantile_ms(0.99), 1e-3):.0f} times as many "
            "polls as measured here.",
            "",
            "Where a streamed update's client CPU goes (the scheduler's receive path profiled with py-spy "
            "--native and cProfile, and split by thread from /proc/<pid>/task/*/stat, 50 engines at 4 changes "
            "a second; the scheduler records one tuple per message and validates nothing): about 40% is the "
            "event-loop thread (the selector wake-up, grpc.aio's completion hand-off, the read future and the "
            "task step, starting the next receive in gRPC core, and the protobuf parse, which is under a "
            "tenth of it), about 10% grpc.aio's poller thread (it takes each completion from gRPC's queue and "
            "writes a byte to wake the loop), and about half gRPC core's own event-engine threads (epoll, the "
            "socket read, HTTP/2 framing, the completion). Each message crosses those three threads on its "
            "own; a poll crosses them once for a whole round trip, so one message costs nearly what one "
            "poll does. What changed, measured side by side: HTTP/2 BDP probing is off on the scheduler's "
            "channels in both modes (`grpc.http2.bdp_probe` = 0): with it every received message made the "
            "client send a PING and the engine answer it, three TCP segments per message instead of two, "
            "about 10 bytes more of payload, a write on the client's event-engine threads and a read on "
            "the engine; the stream is read with `call.read()` rather than `async for` (one generator "
            "layer fewer) and `gc.freeze()` follows start-up, so the collector's passes walk only what the "
            "messages allocate. On the engine, a change-driven stream's snapshot is serialized once and its "
            "message composed around those bytes instead of copied into a response and serialized again. "
            "Client-side, those changes moved the cost per update by less than this shared machine's run-to-run "
            "noise (about a quarter); "
            "the goal of at most half a poll's CPU per update is not met with grpc.aio as the client runtime, "
            "because the per-message thread crossings above are gRPC's and neither the protocol nor this "
            "toolkit's code decides them; a client runtime that batches completions per wake-up would. "
            "Two other client runtimes were tried against the same 50 engines: uvloop as the event loop "
            "made both modes cheaper alike (update over poll 0.80 against 0.77 with asyncio's loop), and "
            "synchronous gRPC with one reader thread per stream made streaming dearer and polling cheaper "
            "(a poll's blocking call waits on its own completion queue in its own thread, while each "
            "streamed message wakes the channel's thread and then the reader's): 1.14. Neither ships in "
            "the benchmark.",
        ]
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"
