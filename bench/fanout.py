"""Fan-out: one reference engine with many WatchLoad watchers at a fixed interval, with and without
a tenth of them stalled, and the gRPC floor this machine allows for the same traffic: a bare
grpc.aio server-streaming RPC that sends byte strings of the same size at the same interval.

The engine runs in its own process (bench/hosts.py), the watchers in another (bench/watchers.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.control import Child, idle_cpu_per_s
from bench.figures import ROUNDS, Figure, Section, at_least, at_most, info, interleaved, ratio


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
    if kind == "watchload":
        server_args = ["engines", "--count", "1", "--max-watchers", str(max(64, watchers + 16))]
    elif kind == "sdk":
        server_args = ["sdk", "--max-watchers", str(max(64, watchers + 16))]
    else:
        server_args = ["bare"]
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
            s0 = server.ask("mark")["usage"]
            c0 = client.ask("go")
            time.sleep(window_s)
            c1 = client.ask("stop")
            s1 = server.ask("mark")["usage"]
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
    plain, stalled = _median(plain_runs), _median(stalled_runs)
    n = plain.watchers
    g = f"fan-out {n} watchers"
    pre = f"fanout.w{n}"
    lags = [_lag_ratios(p, s) for p, s in zip(plain_runs, stalled_runs)]
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
        at_most(f"{pre}.stalled_lag_p50_ratio", [r50 for r50, _ in lags], 1.25, group=g,
                note="healthy watchers' p50 lag with a tenth stalled / with none stalled, per round"),
        at_most(f"{pre}.stalled_lag_p99_ratio", [r99 for _, r99 in lags], 1.25, group=g,
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


def limit_figures(engine_runs: list[FanoutRun], bare_runs: list[FanoutRun]) -> list[Figure]:
    engine, bare = _median(engine_runs), _median(bare_runs)
    n = engine.watchers
    g = f"per-message limit, {n} streams"
    pre = f"limit.w{n}"
    return [
        info(f"{pre}.watchload.server_us_per_message", round(engine.server_us_per_message, 1), "us", group=g,
             note=f"{n} WatchLoad streams at {engine.interval_ms} ms, {engine.message_bytes} B messages"),
        info(f"{pre}.bare.server_us_per_message", round(bare.server_us_per_message, 1), "us", group=g,
             note=f"{n} bare grpc.aio streams at {bare.interval_ms} ms, {bare.message_bytes} B messages"),
        at_most(f"{pre}.server_cost_ratio", [e.cost_over(b) for e, b in zip(engine_runs, bare_runs)], 1.5, group=g,
                note="server CPU per message, WatchLoad / bare grpc.aio server streaming, per round"),
        info(f"{pre}.watchload.delivered_fraction", round(engine.delivered / engine.expected, 3), "ratio", group=g),
        info(f"{pre}.bare.delivered_fraction", round(bare.delivered / bare.expected, 3), "ratio", group=g),
        info(f"{pre}.watchload.lag_p99", round(engine.lag_p99_ms, 2), "ms", group=g),
        info(f"{pre}.bare.lag_p99", round(bare.lag_p99_ms, 2), "ms", group=g),
    ]


def run(counts: tuple[int, ...] = (10, 100, 1000), *, interval_ms: int = 100, window_s: float = 3.0,
        rounds: int = ROUNDS, limit_counts: tuple[int, ...] | None = None
        ) -> tuple[Section, Section, list[tuple[FanoutRun, FanoutRun]]]:
    """Each fan-out in `rounds` interleaved rounds, unstalled and stalled; then the per-message
    limit, WatchLoad and bare streams in interleaved rounds. Returns the sections and, per
    fan-out, its median unstalled and stalled rounds."""
    fan = Section("Fan-out: one engine, many watchers")
    pairs = []
    for n in counts:
        def one(with_stall: bool) -> FanoutRun:
            return measure("watchload", n, stalled=max(1, n // 10) if with_stall else 0,
                           interval_ms=interval_ms, window_s=window_s)
        rounds_ = interleaved(one, (False, True), rounds)
        plain_runs, stalled_runs = [p for p, _ in rounds_], [s_ for _, s_ in rounds_]
        pairs.append((_median(plain_runs), _median(stalled_runs)))
        fan.figures += figures(plain_runs, stalled_runs)
    fan.discussion = fanout_discussion(pairs)

    limit = Section("Limit: WatchLoad against a bare gRPC stream")
    texts = []
    for n in limit_counts or counts[-2:]:
        size = next((p.message_bytes for p, _ in pairs if p.watchers == n), 0) or 100
        rounds_ = interleaved(lambda kind: measure(kind, n, interval_ms=interval_ms, window_s=window_s, size=size),
                              ("watchload", "bare"), rounds)
        engine_runs, bare_runs = [e for e, _ in rounds_], [b for _, b in rounds_]
        limit.figures += limit_figures(engine_runs, bare_runs)
        texts.append(limit_discussion(_median(engine_runs), _median(bare_runs)))
    limit.discussion = "\n\n".join(texts)
    return fan, limit, pairs


def _median(runs: list[FanoutRun]) -> FanoutRun:
    """The round whose p99 lag is the median, for the figures that describe rather than judge."""
    return sorted(runs, key=lambda r: r.lag_p99_ms)[(len(runs) - 1) // 2]


def _lag_ratios(plain: FanoutRun, stalled: FanoutRun) -> tuple[float, float]:
    """The healthy watchers' p50 and p99 lag with some stalled over those with none stalled."""
    return ratio(stalled.lag_p50_ms, plain.lag_p50_ms), ratio(stalled.lag_p99_ms, plain.lag_p99_ms)


def fanout_discussion(pairs: list[tuple[FanoutRun, FanoutRun]]) -> str:
    """Each fan-out's unstalled and stalled runs side by side; the method and what limits the
    figures are in bench/NOTES.md."""
    if not pairs:
        return ""
    lines = [f"One engine process, W WatchLoad streams at interval_ms = {pairs[0][0].interval_ms}, read by one "
             "watcher process; in the stalled runs a tenth of them never read again. Goals: lag ratios "
             "stalled/unstalled at most 1.25, the engine's RSS end/start at most 1.05. Method and limits: "
             "bench/NOTES.md.", ""]
    for plain, stalled in pairs:
        r50, r99 = _lag_ratios(plain, stalled)
        lines.append(
            f"- **{plain.watchers} watchers**: lag {plain.lag_p50_ms:.2f} / {plain.lag_p99_ms:.2f} ms (p50/p99), "
            f"{plain.delivered / plain.expected:.0%} of the snapshots one-per-interval would give, "
            f"{plain.server_us_per_message:.0f} us of engine CPU per delivered snapshot "
            f"({100 * plain.server_cpu_s / plain.seconds:.0f}% of a core in all). With {stalled.stalled} stalled: "
            f"{stalled.lag_p50_ms:.2f} / {stalled.lag_p99_ms:.2f} ms in the median rounds (ratios {r50:.2f} / "
            f"{r99:.2f}); RSS {stalled.rss_start_kib / 1024:.1f} -> {stalled.rss_end_kib / 1024:.1f} MiB; "
            f"{stalled.coalescing} mailboxes coalescing at the end. The verdicts, from every round, are in "
            "the table.")
    return "\n".join(lines)


def limit_discussion(engine: FanoutRun, bare: FanoutRun) -> str:
    cost = engine.cost_over(bare)
    return (f"**{engine.watchers} streams.** Server CPU per delivered message above idle, median rounds: "
            f"WatchLoad {engine.server_us_per_message:.1f} us, a bare grpc.aio stream of {bare.message_bytes} B "
            f"messages {bare.server_us_per_message:.1f} us, ratio {cost:.2f}. "
            f"Delivered: WatchLoad {engine.delivered / engine.expected:.0%}, bare {bare.delivered / bare.expected:.0%} "
            "of one message per interval per stream.")

