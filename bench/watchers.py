"""Many watchers of one server, in one process: W WatchLoad streams at a fixed interval (or W bare
byte streams, the gRPC floor), of which S are stalled: they open the stream, read its first
message and never read again, on a channel with a tiny receive window so HTTP/2 flow control
pushes back on the server within a second.

Delivery lag of a snapshot = its receipt time at the watcher - its snapshot timestamp (the time
the engine built it), both on CLOCK_MONOTONIC (the engine's wall-anchored clock is converted with
the offset the server process reported).

    python -m bench.watchers --port P --count 100 --stalled 10 --interval-ms 100 --kind watchload

With `--client-cpu` it measures instead what a client spends per streamed update, four readers
and `WatchLoadChecker.feed` in interleaved rounds (bench/NOTES.md, "Watchers: client CPU per
streamed update"), prints one JSON line with every round and exits.

    python -m bench.watchers --port P --client-cpu --count 50 --interval-ms 10 --seconds 2 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections import Counter

import grpc

from bench.control import Child, reply, serve_commands
from bench.figures import QUICK_ROUNDS, ROUNDS, Section, at_most, info, interleaved, quantile
from bench.hosts import BARE_METHOD, BARE_REQUEST, STAMP
from bench.measure import usage
from openengine.v1 import load_pb2, observability_service_pb2_grpc

STREAMS_PER_CHANNEL = 100
WARMUP_S = 0.5   # --client-cpu: before each reader's window
STALLED_OPTIONS = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]


class Watchers:
    def __init__(self, args):
        self.args = args
        self.lags_ns: list[int] = []
        self.delivered = 0
        self.message_bytes = 0   # the size of the last snapshot received
        self.recording = False
        self.errors: list[str] = []
        self._channels: list[grpc.aio.Channel] = []
        self._tasks: list[asyncio.Task] = []
        self._stalled_calls = []

    def _channel(self, index: int, stalled: bool) -> grpc.aio.Channel:
        """Healthy streams share a channel per STREAMS_PER_CHANNEL; stalled ones get their own."""
        options = list(STALLED_OPTIONS) if stalled else []
        # A distinct option keeps grpc from sharing one connection between channels.
        options.append(("bench.channel", f"{'stalled' if stalled else 'healthy'}-{index}"))
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.args.port}", options=options)
        self._channels.append(channel)
        return channel

    def _call(self, channel):
        args = self.args
        if args.kind == "watchload":
            stub = observability_service_pb2_grpc.ObservabilityStub(channel)
            return stub.WatchLoad(load_pb2.WatchLoadRequest(interval_ms=args.interval_ms, heartbeat_ms=1000))
        method = channel.unary_stream(BARE_METHOD)
        return method(BARE_REQUEST.pack(args.interval_ms, args.size))

    async def open(self, **_) -> dict:
        args = self.args
        healthy = args.count - args.stalled
        first_reads = []
        for index in range(args.stalled):
            call = self._call(self._channel(index // STREAMS_PER_CHANNEL, True))
            self._stalled_calls.append(call)
            first_reads.append(call.read())     # the first message: the stream is open; then it stalls
        channel = None
        ready = []
        for index in range(healthy):
            if index % STREAMS_PER_CHANNEL == 0:
                channel = self._channel(index // STREAMS_PER_CHANNEL, False)
            started = asyncio.Event()
            ready.append(started)
            self._tasks.append(asyncio.ensure_future(self._read(self._call(channel), started)))
        await asyncio.wait_for(asyncio.gather(*first_reads, *(e.wait() for e in ready)), 60)
        return {"healthy": healthy, "stalled": args.stalled}

    async def _read(self, call, started: asyncio.Event) -> None:
        offset = self.args.clock_offset_ns
        watchload = self.args.kind == "watchload"
        try:
            while True:
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    break
                now = time.monotonic_ns()
                started.set()
                if watchload:
                    if msg.WhichOneof("kind") != "snapshot":
                        continue
                    made = msg.snapshot.load.timestamp_unix_nanos - offset
                    size = msg.ByteSize()
                else:
                    made = STAMP.unpack_from(msg)[0]
                    size = len(msg)
                if self.recording:
                    self.delivered += 1
                    self.lags_ns.append(now - made)
                    self.message_bytes = size
        except grpc.aio.AioRpcError as err:
            self.errors.append(f"{err.code().name} {err.details()}")
        except asyncio.CancelledError:
            pass
        started.set()

    def go(self, **_) -> dict:
        self.lags_ns.clear()
        self.delivered = 0
        self.recording = True
        return {"usage": usage()}

    def stop(self, **_) -> dict:
        out = {"usage": usage()}
        self.recording = False
        lags = sorted(self.lags_ns)
        out.update(delivered=self.delivered, lags_ns={"p50": quantile(lags, 0.5), "p99": quantile(lags, 0.99)},
                   errors=self.errors[:5], message_bytes=self.message_bytes)
        return out

    async def close(self) -> None:
        for call in self._stalled_calls:
            call.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self._channels), return_exceptions=True)


# -- client CPU per streamed update ------------------------------------------------------------------

# Violations the watchers found, by rule: a loaded machine delays snapshots past the tolerance.
VIOLATIONS: Counter[str] = Counter()


class _Tally:
    """Updates received while the window is open (the synchronous readers count from many threads)."""

    def __init__(self):
        self.counting = False
        self.received = 0
        self._lock = threading.Lock()

    def count(self, _update=None) -> None:
        if self.counting:
            with self._lock:
                self.received += 1


async def _aio_round(args, request, watched: bool) -> tuple[float, int]:
    """CPU seconds and updates of `args.count` grpc.aio readers over `args.seconds`: bare stub
    calls (the floor: the stub parses each message and nothing else happens), or `AsyncLoadWatcher`s."""
    from openengine.client import AsyncLoadWatcher, CapabilityView

    tally = _Tally()

    async def read(call):
        async for _ in call:
            tally.count()

    async with grpc.aio.insecure_channel(f"127.0.0.1:{args.port}") as channel:
        if watched:
            view = await CapabilityView.afetch(channel)
            watchers = [await AsyncLoadWatcher(channel, view=view, request=request, on_snapshot=tally.count).start()
                        for _ in range(args.count)]
        else:
            stub = observability_service_pb2_grpc.ObservabilityStub(channel)
            calls = [stub.WatchLoad(request) for _ in range(args.count)]
            tasks = [asyncio.ensure_future(read(call)) for call in calls]
        await asyncio.sleep(WARMUP_S)
        tally.counting, start = True, time.process_time()
        await asyncio.sleep(args.seconds)
        spent, tally.counting = time.process_time() - start, False
        if watched:
            await asyncio.gather(*(w.stop() for w in watchers))
            for watcher in watchers:
                VIOLATIONS.update(watcher.violation_counts)
        else:
            for call in calls:
                call.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return spent, tally.received


def _sync_round(args, request, watched: bool) -> tuple[float, int]:
    """As `_aio_round` with synchronous gRPC: bare calls read by a thread each, or `LoadWatcher`s."""
    from openengine.client import CapabilityView, LoadWatcher

    tally = _Tally()

    def read(call):
        try:
            for _ in call:
                tally.count()
        except grpc.RpcError:
            pass        # cancelled at the end of the window

    with grpc.insecure_channel(f"127.0.0.1:{args.port}") as channel:
        if watched:
            view = CapabilityView.fetch(channel)
            watchers = [LoadWatcher(channel, view=view, request=request, on_snapshot=tally.count).start()
                        for _ in range(args.count)]
        else:
            stub = observability_service_pb2_grpc.ObservabilityStub(channel)
            calls = [stub.WatchLoad(request) for _ in range(args.count)]
            threads = [threading.Thread(target=read, args=(call,), daemon=True) for call in calls]
            for thread in threads:
                thread.start()
        time.sleep(WARMUP_S)
        tally.counting, start = True, time.process_time()
        time.sleep(args.seconds)
        spent, tally.counting = time.process_time() - start, False
        if watched:
            for watcher in watchers:
                watcher.stop()
            for watcher in watchers:
                VIOLATIONS.update(watcher.violation_counts)
        else:
            for call in calls:
                call.cancel()
            for thread in threads:
                thread.join(5)
    return spent, tally.received


async def _recorded_stream(args, request, count: int) -> list:
    """`count` messages of one stream, as a watcher receives them, to judge again and again."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{args.port}") as channel:
        stub = observability_service_pb2_grpc.ObservabilityStub(channel)
        call = stub.WatchLoad(request)
        messages = []
        async for msg in call:
            messages.append(msg)
            if len(messages) == count:
                break
        call.cancel()
    return messages


def _feed_cost_s(messages, request, limits) -> float:
    """CPU seconds per message of `WatchLoadChecker.feed` over the recorded stream."""
    from openengine.validate import WatchLoadChecker

    instance = messages[0].settings.instance_id
    passes = 20
    start = time.process_time()
    for _ in range(passes):
        checker = WatchLoadChecker(instance_id=instance, observability=limits, request=request,
                                   clock=lambda: 0.0, keep=0)
        for msg in messages:
            checker.feed(msg, 0.0)
    return (time.process_time() - start) / (passes * len(messages))


def client_cpu(args) -> dict:
    """Each reader's and `WatchLoadChecker.feed`'s CPU microseconds per update, in every round."""
    from openengine.client import CapabilityView

    request = load_pb2.WatchLoadRequest(interval_ms=args.interval_ms)
    with grpc.insecure_channel(f"127.0.0.1:{args.port}") as channel:
        limits = CapabilityView.fetch(channel).report.limits["openengine.load"]
    messages = asyncio.run(_recorded_stream(args, request, 300))
    readers = {"bare_aio": lambda: asyncio.run(_aio_round(args, request, False)),
               "async_watcher": lambda: asyncio.run(_aio_round(args, request, True)),
               "bare_sync": lambda: _sync_round(args, request, False),
               "watcher": lambda: _sync_round(args, request, True)}

    def measure(name: str) -> float:
        if name == "feed":
            return _feed_cost_s(messages, request, limits) * 1e6
        spent, count = readers[name]()
        return spent / max(count, 1) * 1e6
    names = (*readers, "feed")
    rounds = interleaved(measure, names, args.rounds)
    return {"rounds_us": {name: [r[i] for r in rounds] for i, name in enumerate(names)},
            "violations": VIOLATIONS}


def run(quick: bool = False) -> Section:
    """`make bench`'s client-CPU figures: one engine process, one client process reading its
    streams every way in interleaved rounds; each goal is judged from the per-round ratios of two
    figures taken in the same round."""
    streams, interval_ms = 20, 10
    rounds, seconds = (QUICK_ROUNDS, 0.5) if quick else (max(ROUNDS, 7), 1.5)
    with Child("bench.hosts", "engines", "--count", "1", "--max-watchers", str(streams + 16),
               name="client-cpu engine") as server:
        port = server.read(60)["ports"][0]
        with Child("bench.watchers", "--port", str(port), "--client-cpu", "--count", str(streams),
                   "--interval-ms", str(interval_ms), "--seconds", str(seconds), "--rounds", str(rounds),
                   name="client-cpu readers") as client:
            result = client.read(60 + rounds * 4 * (seconds + 5))
    each = result["rounds_us"]

    def ratios(top: str, bottom: str) -> list[float]:
        return [a / b for a, b in zip(each[top], each[bottom])]

    def added(reader: str) -> list[float]:
        """What validating adds to a watcher's CPU per update, per round: the check over the rest."""
        return [f / (w - f) for f, w in zip(each["feed"], each[reader])]

    g = "client CPU per update"
    names = {"bare_aio": "bare grpc.aio reader", "async_watcher": "AsyncLoadWatcher",
             "bare_sync": "bare synchronous reader", "watcher": "LoadWatcher",
             "feed": "WatchLoadChecker.feed"}
    figures = [info(f"watchers.{name}.client_us_per_update", round(statistics.median(each[name]), 2), "us",
                    group=g, note=f"{what}, median of {rounds} rounds") for name, what in names.items()]
    figures += [
        at_most("watchers.async_watcher_over_bare_aio", ratios("async_watcher", "bare_aio"), 1.15, group=g,
                note="AsyncLoadWatcher / bare grpc.aio reader of the same streams, CPU per update"),
        at_most("watchers.watcher_over_bare_sync", ratios("watcher", "bare_sync"), 1.15, group=g,
                note="LoadWatcher / bare synchronous reader of the same streams, CPU per update"),
        info("watchers.bare_sync_over_bare_aio", round(statistics.median(ratios("bare_sync", "bare_aio")), 3),
             "ratio", group=g, note="the two floors: synchronous gRPC / grpc.aio, CPU per update"),
        at_most("watchers.async_watcher_validation_added", added("async_watcher"), 0.10, group=g,
                note="feed's CPU per message / the rest of AsyncLoadWatcher's CPU per update"),
        at_most("watchers.watcher_validation_added", added("watcher"), 0.10, group=g,
                note="feed's CPU per message / the rest of LoadWatcher's CPU per update"),
    ]
    violations = ", ".join(f"{count} {rule}" for rule, count in sorted(result["violations"].items())) or "none"
    discussion = (
        f"One reference engine process streams WatchLoad at {interval_ms} ms to {streams} readers in one "
        "client process, read in turn by a bare grpc.aio reader, `AsyncLoadWatcher`, a bare synchronous "
        f"reader (a thread per stream) and `LoadWatcher`, {rounds} interleaved rounds of {seconds:g} s each; "
        "the client process's CPU time over a window divided by the updates it received. "
        "`WatchLoadChecker.feed` is timed in the same rounds on a recorded stream of the same engine. "
        f"Violations the watchers reported (a loaded machine delays and coalesces snapshots): {violations}.")
    return Section("Watchers: client CPU per streamed update", figures, discussion)


async def amain(args) -> None:
    watchers = Watchers(args)
    reply()   # ready
    try:
        await serve_commands({"open": watchers.open, "go": watchers.go, "stop": watchers.stop})
    finally:
        await watchers.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watchers")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--stalled", type=int, default=0)
    parser.add_argument("--interval-ms", type=int, default=100)
    parser.add_argument("--kind", choices=("watchload", "bare"), default="watchload")
    parser.add_argument("--size", type=int, default=100, help="bare message size in bytes")
    parser.add_argument("--clock-offset-ns", type=int, default=0)
    parser.add_argument("--client-cpu", action="store_true", help="measure client CPU per update, print, exit")
    parser.add_argument("--seconds", type=float, default=2.0, help="--client-cpu: window per reader and round")
    parser.add_argument("--rounds", type=int, default=5, help="--client-cpu: rounds")
    args = parser.parse_args(argv)
    if args.client_cpu:
        reply(**client_cpu(args))
        return 0
    asyncio.run(amain(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
