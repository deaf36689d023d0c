"""Fan-out: one reference engine with many WatchLoad watchers at a fixed interval, with and without
a tenth of them stalled. `measure` also runs the SDK's engine and the gRPC floor for bench/sdk.py:
a bare grpc.aio server-streaming RPC that sends byte strings of the same size at the same interval.

The engine runs in its own process (bench/hosts.py), the watchers in another (bench/watchers.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.control import Child, idle_cpu_per_s, measured_window
from bench.figures import (QUICK_ROUNDS, ROUNDS, Figure, Section, at_least, at_most, info, interleaved,
                           median_round, ratio)


@dataclass
class FanoutRun:
    kind: str              # "watchload" or "bare"
    watchers: int
    stalled: int
    interval_ms: int
    seconds: float
    server_cpu_s: float
    delivered: int
    lag_p50_ms: float
    lag_p99_ms: float
    rss_start_kib: int
    rss_end_kib: int
    message_bytes: int
    coalescing: int = 0    # watchers whose mailbox had coalesced updates at the end of the window
    errors: int = 0
    idle_cpu_per_s: float = 0.0   # the server process's CPU with no watcher connected

    @property
    def server_us_per_message(self) -> float:
        """Server CPU per delivered message, above what the server process spends idle."""
        busy = max(0.0, self.server_cpu_s - self.idle_cpu_per_s * self.seconds)
        return busy / self.delivered * 1e6 if self.delivered else float("inf")

    @property
    def expected(self) -> float:
        """Snapshots the healthy watchers would get in the window at exactly one per interval."""
        return (self.watchers - self.stalled) * self.seconds * 1000.0 / self.interval_ms

    def cost_over(self, bare: "FanoutRun") -> float:
        """Server CPU per message of this run over that of a bare run (infinite when the bare one got
        none, or spent nothing measurable above idle)."""
        return ratio(self.server_us_per_message, bare.server_us_per_message) if bare.delivered else float("inf")


def measure(kind: str, watchers: int, *, stalled: int = 0, interval_ms: int = 100, window_s: float = 6.0,
            warmup_s: float = 1.5, idle_s: float = 1.0, size: int = 100) -> FanoutRun:
    limit = ["--max-watchers", str(max(64, watchers + 16))]
    server_args = {"watchload": ["engines", *limit], "sdk": ["sdk", *limit], "bare": ["bare"]}[kind]
    with Child("bench.hosts", *server_args, name=f"{kind} server") as server:
        hello = server.read(60)
        port = hello["ports"][0]
        idle_rate = idle_cpu_per_s(server, idle_s)
        args = ["--port", str(port), "--count", str(watchers), "--stalled", str(stalled),
                "--interval-ms", str(interval_ms), "--kind", "bare" if kind == "bare" else "watchload",
                "--size", str(size),
                "--clock-offset-ns", str(hello["clock_offset_ns"])]
        with Child("bench.watchers", *args, name=f"{watchers} {kind} watchers") as client:
            client.read(60)
            client.ask("open", timeout=90)
            time.sleep(warmup_s)     # stalled streams fill their flow-control windows meanwhile
            s0, c0, c1, s1 = measured_window(server, client, window_s)
            state = server.ask("state")
    lags = c1["lags_ns"]
    return FanoutRun(
        kind=kind, watchers=watchers, stalled=stalled, interval_ms=interval_ms,
        seconds=(c1["usage"]["mono_ns"] - c0["usage"]["mono_ns"]) / 1e9,
        server_cpu_s=s1["cpu_s"] - s0["cpu_s"], delivered=c1["delivered"],
        lag_p50_ms=lags["p50"] / 1e6, lag_p99_ms=lags["p99"] / 1e6,
        rss_start_kib=s0["rss_kib"], rss_end_kib=s1["rss_kib"], message_bytes=c1["message_bytes"],
        coalescing=state.get("coalescing", 0), errors=len(c1["errors"]), idle_cpu_per_s=idle_rate)


def figures(plain_runs: list[FanoutRun], stalled_runs: list[FanoutRun]) -> list[Figure]:
    """The figures of one fan-out from its rounds (plain_runs[i] and stalled_runs[i] ran side by
    side): the information of the median round, the goals from every round."""
    plain, stalled = (median_round(runs, lambda r: r.lag_p99_ms) for runs in (plain_runs, stalled_runs))
    n = plain.watchers
    g = f"fan-out {n} watchers"
    pre = f"fanout.w{n}"
    pairs = list(zip(plain_runs, stalled_runs))
    return [
        info(f"{pre}.lag_p50", round(plain.lag_p50_ms, 2), "ms", group=g),
        info(f"{pre}.lag_p99", round(plain.lag_p99_ms, 2), "ms", group=g),
        info(f"{pre}.delivered_fraction", round(plain.delivered / plain.expected, 3), "ratio", group=g,
             note="snapshots delivered / one per interval per watcher"),
        info(f"{pre}.server_us_per_snapshot", round(plain.server_us_per_message, 1), "us", group=g,
             note="engine process CPU / snapshots delivered"),
        info(f"{pre}.stalled.lag_p50", round(stalled.lag_p50_ms, 2), "ms", group=g,
             note=f"the {n - stalled.stalled} healthy watchers, {stalled.stalled} stalled"),
        info(f"{pre}.stalled.lag_p99", round(stalled.lag_p99_ms, 2), "ms", group=g),
        at_most(f"{pre}.stalled_lag_p50_ratio", [ratio(s.lag_p50_ms, p.lag_p50_ms) for p, s in pairs], 1.25,
                group=g,
                note="healthy watchers' p50 lag with a tenth stalled / with none stalled, per round"),
        at_most(f"{pre}.stalled_lag_p99_ratio", [ratio(s.lag_p99_ms, p.lag_p99_ms) for p, s in pairs], 1.25,
                group=g,
                note="healthy watchers' p99 lag with a tenth stalled / with none stalled, per round"),
        info(f"{pre}.stalled.delivered_fraction", round(stalled.delivered / stalled.expected, 3), "ratio", group=g),
        info(f"{pre}.stalled.rss_start", round(stalled.rss_start_kib / 1024, 1), "MiB", group=g),
        info(f"{pre}.stalled.rss_end", round(stalled.rss_end_kib / 1024, 1), "MiB", group=g),
        at_most(f"{pre}.stalled.rss_ratio", [ratio(r.rss_end_kib, r.rss_start_kib) for r in stalled_runs], 1.05,
                group=g, note=f"engine RSS end / start over a {stalled.seconds:.0f} s window with stalled watchers"),
        at_least(f"{pre}.stalled.coalescing_watchers", [r.coalescing for r in stalled_runs], stalled.stalled,
                 unit="watchers", group=g,
                 note="watchers whose one-slot mailbox was coalescing at the end (the stall was real)"),
    ]


def run(quick: bool = False) -> Section:
    """Each fan-out in interleaved rounds, unstalled and stalled."""
    counts, window_s, rounds = ((4, 20), 1.0, QUICK_ROUNDS) if quick else ((10, 100, 1000), 10.0, ROUNDS)
    fan = Section("Fan-out: one engine, many watchers")
    for n in counts:
        # The streams of one tick are written as a burst, so a p99 rests on ticks, not deliveries:
        # 10 s is 100 ticks, of which one disturbed by the machine cannot set the p99 alone.
        def one(with_stall: bool) -> FanoutRun:
            return measure("watchload", n, stalled=max(1, n // 10) if with_stall else 0, window_s=window_s)
        rounds_ = interleaved(one, (False, True), rounds)
        plain_runs, stalled_runs = [p for p, _ in rounds_], [s_ for _, s_ in rounds_]
        fan.figures += figures(plain_runs, stalled_runs)
    fan.discussion = ("One engine process, W WatchLoad streams at interval_ms = 100, read by one watcher "
                      "process; in the stalled runs a tenth of them never read again. The descriptive "
                      "figures are those of the median round by p99 lag; the goals are judged from every "
                      "round. Method and limits: bench/NOTES.md.")
    return fan

