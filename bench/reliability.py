"""Reliability soak: one engine on the SDK (the example counting engine, `max_running_requests`
16 and `max_queued_requests` 64) driven the way a fleet drives it, on loopback, every phase bounded
in count and time:

1. at the queue limit: exactly running + queue Generate calls at once (the reference time to
   first token), then bursts of 500 and 2,000 at once with 50 change-driven load watchers open;
2. clients killed mid-stream: two client processes holding 50 streams each, SIGKILLed;
3. idle connections: 300 sockets that send nothing, a third of them only the HTTP/2 preface;
4. a restart under watchers: the engine SIGKILLed and started again on the same port.

What it reports: requests lost (a call that ended neither with its final message nor refused
RESOURCE_EXHAUSTED), UNKNOWN statuses, tracebacks in the engine's log, requests accepted beyond
the bound (the most running + queued any snapshot showed, above running + queue), refusals
against LoadInfo.rejected_requests, p99 time to first token of the admitted requests of the
2,000 burst against the run at the queue limit, the engine's RSS after the run against before it
(both after a warm-up round of the same bursts), and whether every watcher followed the restart.

    python -m bench.reliability serve --port 0     # the engine process (the runner starts it)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import selectors
import signal
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from bench.control import Child, counting_backend, reply, serve_commands
from bench.figures import QUICK_ROUNDS, ROUNDS, Section, at_least, at_most, info, interleaved, quantile
from bench.measure import rss_kib
from openengine.conformance.cases.overload import engine_error
from openengine.validate import RULES, Severity

SLOTS, QUEUE = 16, 64
BOUND = SLOTS + QUEUE
TOKEN_MS = 10.0
TOKENS = 100                 # per request: about a second of counting once it runs, longer than a burst takes to arrive
WATCHERS = 50
IDLE_CONNECTIONS = 300
HANDSHAKE_S = 2.0            # the soak engine's handshake timeout, so silent sockets go quickly
KILLED_ROUNDS, KILLED_PER_ROUND = 2, 50
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CHANNELS = 8                 # client connections a burst is spread over
PATIENCE_S = 30.0            # the longest any wait of the soak lasts


# -- the engine process --------------------------------------------------------------------------

async def _serve(port: int) -> None:
    from openengine.serve import ConnectionPolicy, ServeConfig, Server

    backend = counting_backend()(TOKEN_MS / 1000.0, slots=SLOTS, queue=QUEUE)
    config = ServeConfig(port=port, connections=ConnectionPolicy(handshake_timeout_s=HANDSHAKE_S))
    server = Server(backend, config)
    await server.start()
    reply(address=server.address, instance_id=server.state.instance_id)
    try:
        await serve_commands({})
    finally:
        await server.stop(0.5)


async def _hold(address: str, count: int) -> None:
    """A client that opens `count` long streams, says so once the engine shows them all accepted,
    and waits to be killed."""
    from openengine.v1 import generation_pb2, inference_service_pb2_grpc

    channel = grpc.aio.insecure_channel(address)
    stub = inference_service_pb2_grpc.InferenceStub(channel)
    stopping = generation_pb2.StoppingOptions(max_tokens=2048, min_tokens=2048, ignore_eos=True)
    calls = [stub.Generate(generation_pb2.GenerateRequest(prompt="hold", stopping=stopping), timeout=120)
             for _ in range(count)]
    await _until(lambda: _accepted(address), lambda accepted: accepted >= count)
    reply(held=count)
    await asyncio.sleep(PATIENCE_S * 4)
    del calls


# -- the runner's side ----------------------------------------------------------------------------

@dataclass
class Burst:
    sent: int
    completed: int = 0
    refused: int = 0
    refused_retryable: int = 0
    statuses: dict[str, int] = field(default_factory=dict)   # other endings, by status name
    ttft_s: list[float] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.sent - self.completed - self.refused

    def p99_ttft_ms(self) -> float:
        return 1000.0 * quantile(sorted(self.ttft_s), 0.99)


async def _burst(address: str, count: int) -> Burst:
    """`count` Generate calls at once, each to its end."""
    from openengine.v1 import generation_pb2, inference_service_pb2_grpc

    channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
    stubs = [inference_service_pb2_grpc.InferenceStub(c) for c in channels]
    result = Burst(count)
    stopping = generation_pb2.StoppingOptions(max_tokens=TOKENS, min_tokens=TOKENS, ignore_eos=True)

    def ended(status: str) -> None:
        result.statuses[status] = result.statuses.get(status, 0) + 1

    async def one(i: int) -> None:
        started = time.monotonic()
        first = None
        try:
            call = stubs[i % CHANNELS].Generate(generation_pb2.GenerateRequest(prompt="soak", stopping=stopping),
                                                timeout=PATIENCE_S * 2)
            async for message in call:
                if first is None:
                    first = time.monotonic() - started
                event = message.WhichOneof("event")
                if event == "finished":
                    result.completed += 1
                    result.ttft_s.append(first)
                    return
                if event == "error":
                    return ended(f"EngineError {message.error.code}")
            ended("OK without an end")
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and first is None:
                result.refused += 1
                error = engine_error(err)
                result.refused_retryable += bool(error is not None and error.retryable)
            else:
                ended(err.code().name)

    await asyncio.gather(*(one(i) for i in range(count)))
    for channel in channels:
        await channel.close()
    return result


class Watchers:
    """Load watchers (openengine.client.AsyncLoadWatcher) at `interval_ms` (0: change-driven), each
    on its own connection; they record the most requests any snapshot showed accepted."""

    def __init__(self, address: str, count: int, interval_ms: int = 100):
        self.address, self.count, self.interval_ms = address, count, interval_ms
        self.peak = 0
        self.watchers = []
        self.channels = []

    def _seen(self, load) -> None:
        self.peak = max(self.peak, load.running_requests + load.queued_requests)

    async def start(self) -> "Watchers":
        from openengine.client import AsyncLoadWatcher
        from openengine.v1 import load_pb2

        for _ in range(self.count):
            channel = grpc.aio.insecure_channel(self.address)
            watcher = AsyncLoadWatcher(channel, request=load_pb2.WatchLoadRequest(interval_ms=self.interval_ms),
                                       on_snapshot=self._seen)
            await watcher.start()
            self.channels.append(channel)
            self.watchers.append(watcher)
        return self

    async def wait(self, holds) -> None:
        await _until(lambda: asyncio.sleep(0), lambda _: all(holds(w) for w in self.watchers))

    @property
    def violations(self) -> Counter[str]:
        """What the watchers' stream checks found, by rule."""
        return sum((Counter(w.violation_counts) for w in self.watchers), Counter())

    async def stop(self) -> None:
        for watcher in self.watchers:
            await watcher.stop()
        for channel in self.channels:
            await channel.close()


async def _get_load(address: str):
    from openengine.v1 import control_service_pb2_grpc, server_pb2

    async with grpc.aio.insecure_channel(address) as channel:
        stub = control_service_pb2_grpc.ControlStub(channel)
        return await stub.GetLoad(server_pb2.GetLoadRequest(), timeout=5)


async def _accepted(address: str) -> int:
    """Requests the engine is running or holding in its queue."""
    load = await _get_load(address)
    return load.running_requests + load.queued_requests


async def _until(read, holds):
    """`await read()` again and again until `holds` of it, or PATIENCE_S is over; its last value."""
    deadline = time.monotonic() + PATIENCE_S
    while not holds(value := await read()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return value


def _sockets(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def _idle_connections(address: str) -> tuple[int, float]:
    """Open IDLE_CONNECTIONS silent sockets (a third send the preface); how many the engine closed
    within PATIENCE_S, and how long the last one took."""
    host, port = address.rsplit(":", 1)
    peers = [socket.create_connection((host, int(port))) for _ in range(IDLE_CONNECTIONS)]
    for sock in peers[::3]:
        sock.sendall(PREFACE)
    waiting = selectors.DefaultSelector()
    for sock in peers:
        waiting.register(sock, selectors.EVENT_READ)
    started, last = time.monotonic(), 0.0
    while waiting.get_map() and time.monotonic() - started < PATIENCE_S:
        for key, _ in waiting.select(0.05):
            try:
                closed = not key.fileobj.recv(65536)
            except ConnectionResetError:
                closed = True
            if closed:
                waiting.unregister(key.fileobj)
                last = time.monotonic() - started
    left = len(waiting.get_map())
    waiting.close()
    for sock in peers:
        sock.close()
    return IDLE_CONNECTIONS - left, last


def _kill_clients(address: str) -> None:
    for _ in range(KILLED_ROUNDS):
        with Child("bench.reliability", "hold", address, str(KILLED_PER_ROUND), name="killed client") as client:
            client.read(PATIENCE_S + 10)
            client.proc.send_signal(signal.SIGKILL)
            client.proc.wait(10)


def _burst_in_child(address: str, count: int) -> Burst:
    """A burst from a client process of its own, so the watchers' loop and the burst's do not slow
    each other down (a client's lateness is not the engine's)."""
    with Child("bench.reliability", "burst", address, str(count), name=f"burst of {count}") as client:
        return Burst(**client.read(PATIENCE_S * 3))


async def _overload_rounds(address: str) -> tuple[Burst, Burst, Burst, Watchers]:
    loop = asyncio.get_running_loop()
    at_limit = await loop.run_in_executor(None, _burst_in_child, address, BOUND)
    watchers = await Watchers(address, WATCHERS).start()
    await watchers.wait(lambda w: w.latest is not None)
    b500 = await loop.run_in_executor(None, _burst_in_child, address, 500)
    b2000 = await loop.run_in_executor(None, _burst_in_child, address, 2000)
    await watchers.stop()
    return at_limit, b500, b2000, watchers


def _round(address: str) -> dict:
    """One round of every phase but the restart: the bursts under watchers, the killed clients,
    the idle connections."""
    load0 = asyncio.run(_get_load(address))
    at_limit, b500, b2000, watchers = asyncio.run(_overload_rounds(address))
    load1 = asyncio.run(_get_load(address))
    _kill_clients(address)
    left = asyncio.run(_until(lambda: _accepted(address), lambda accepted: accepted == 0))
    closed, last = _idle_connections(address)
    return {"bursts": {"at_limit": at_limit, "500": b500, "2000": b2000}, "peak_accepted": watchers.peak,
            "watch_violations": watchers.violations,
            "rejected_counted": load1.rejected_requests - load0.rejected_requests, "left_after_kills": left,
            "idle_closed": closed, "idle_last_closed_s": last}


def soak(rounds: int = ROUNDS) -> dict:
    """A warm-up round, the measured round, `rounds` interleaved rounds of the two bursts whose time
    to first token is compared, then the restart; the measurements, unjudged."""
    engine = Child("bench.reliability", "serve", "--port", "0", name="soak engine")
    stderr_texts = []
    try:
        address = engine.read(60)["address"]
        pid = engine.proc.pid
        # Warm-up: the allocator's arenas and gRPC's pools grow to their working size, which the
        # second round's peaks may still raise a little; a leak grows on every round after.
        _round(address)
        _round(address)
        before = {"rss_before_kib": rss_kib(pid), "sockets_before": _sockets(pid)}
        out = {**_round(address), **before}
        out["rss_after_kib"], out["sockets_after"] = rss_kib(pid), _sockets(pid)
        p99s = interleaved(lambda size: _burst_in_child(address, size).p99_ttft_ms(), (BOUND, 2000), rounds)
        out["ttft_ratios"] = [overload / limit for limit, overload in p99s]
        stderr_texts.append(engine.stderr_text())
        out["restart"], engine = asyncio.run(_restart(engine, address))
    finally:
        stderr_texts.append(engine.stderr_text())
        engine.close()
    out["tracebacks"] = sum(t.count("Traceback (most recent call last)") for t in stderr_texts)
    return out


async def _restart(engine: Child, address: str) -> tuple[dict, Child]:
    """SIGKILL the engine under change-driven watchers and start it again on the same port; what
    the watchers made of it, and the new engine."""
    watchers = await Watchers(address, 20, interval_ms=0).start()
    await watchers.wait(lambda w: w.latest is not None)
    engine.proc.send_signal(signal.SIGKILL)
    engine.proc.wait(10)
    engine.close()
    again = Child("bench.reliability", "serve", "--port", address.rsplit(":", 1)[1], name="restarted soak engine")
    new_id = again.read(60)["instance_id"]
    await watchers.wait(lambda w: w.latest is not None and w.latest.instance_id == new_id)
    result = {
        "followed": sum(1 for w in watchers.watchers if w.latest is not None and w.latest.instance_id == new_id),
        "restarts_reported": sum(len(w.restarts) for w in watchers.watchers),
        "violations": watchers.violations, "watchers": len(watchers.watchers),
    }
    await watchers.stop()
    return result, again


def run(quick: bool = False) -> Section:
    """The soak as a results section. Its bursts are the sizes the goals are stated for, quick or
    not; a quick run has fewer rounds of the compared bursts."""
    started = time.monotonic()
    m = soak(QUICK_ROUNDS if quick else ROUNDS)
    bursts: dict[str, Burst] = m["bursts"]
    section = Section("Reliability soak")
    g = "reliability"
    lost = sum(b.lost for b in bursts.values())
    unknown = sum(b.statuses.get("UNKNOWN", 0) for b in bursts.values())
    cancelled = sum(b.statuses.get("CANCELLED", 0) for b in bursts.values())
    refused = sum(b.refused for b in bursts.values())
    retryable = sum(b.refused_retryable for b in bursts.values())
    limit_p99 = bursts["at_limit"].p99_ttft_ms()
    overload_p99 = bursts["2000"].p99_ttft_ms()
    restart = m["restart"]
    found = m["watch_violations"] + restart["violations"]
    # Only errors count: OEV315 (updates coalesced) is what a watcher that falls behind is told.
    errors = sum(n for rule, n in found.items() if RULES[rule].severity is Severity.ERROR)
    findings = ", ".join(f"{n} {rule}" for rule, n in sorted(found.items())) or "none"
    section.figures = [
        at_most("reliability.requests_lost", lost, 0, "requests", group=g,
                note=f"of {sum(b.sent for b in bursts.values())} sent at once in three bursts "
                     f"({BOUND}, 500, 2,000); CANCELLED among them: {cancelled}"),
        at_most("reliability.unknown_statuses", unknown, 0, "calls", group=g),
        at_most("reliability.tracebacks", m["tracebacks"], 0, "tracebacks", group=g,
                note="in the engine's log, both instances"),
        at_most("reliability.accepted_beyond_bound", max(0, m["peak_accepted"] - BOUND), 0, "requests", group=g,
                note=f"most running + queued any of {WATCHERS} load watchers (100 ms) saw: {m['peak_accepted']}, "
                     f"bound {SLOTS} + {QUEUE}"),
        at_least("reliability.refused_retryable_fraction", round(retryable / refused, 3) if refused else 0.0, 1,
                 group=g, note=f"{refused} refused RESOURCE_EXHAUSTED, each with a retryable EngineError"),
        at_most("reliability.refusals_uncounted", abs(refused - m["rejected_counted"]), 0, "refusals", group=g,
                note=f"LoadInfo.rejected_requests grew by {m['rejected_counted']}"),
        info("reliability.ttft_p99_at_limit_ms", round(limit_p99, 1), "ms", group=g,
             note=f"{BOUND} calls at once, {TOKENS} tokens at {TOKEN_MS:g} ms each"),
        info("reliability.ttft_p99_overload_ms", round(overload_p99, 1), "ms", group=g,
             note=f"the {bursts['2000'].completed} admitted of 2,000 calls at once"),
        at_most("reliability.ttft_p99_overload_ratio", m["ttft_ratios"], 2, group=g,
                note="p99 time to first token of admitted requests, 2,000 at once / at the queue limit, "
                     "per round of the two bursts"),
        at_most("reliability.requests_left_after_killed_clients", m["left_after_kills"], 0, "requests", group=g,
                note=f"{KILLED_ROUNDS} client processes holding {KILLED_PER_ROUND} streams each, SIGKILLed"),
        at_least("reliability.idle_connections_closed_fraction", round(m["idle_closed"] / IDLE_CONNECTIONS, 3), 1,
                 group=g, note=f"{IDLE_CONNECTIONS} silent sockets, a third with the preface only; the last closed "
                               f"after {m['idle_last_closed_s']:.1f} s (handshake timeout {HANDSHAKE_S:g} s)"),
        at_most("reliability.rss_after_over_before", round(m["rss_after_kib"] / m["rss_before_kib"], 3), 1.05,
                group=g, note=f"engine RSS {m['rss_before_kib'] / 1024:.0f} MiB before (after two warm-up rounds), "
                              f"{m['rss_after_kib'] / 1024:.0f} MiB after; sockets {m['sockets_before']} -> "
                              f"{m['sockets_after']}"),
        at_least("reliability.watchers_following_restart_fraction",
                 round(restart["followed"] / restart["watchers"], 3), 1, group=g,
                 note=f"{restart['watchers']} watchers, {restart['restarts_reported']} Restart events"),
        at_most("reliability.watcher_violations", errors, 0, "violations", group=g,
                note="errors the watchers' stream checks found over the overload bursts and the restart; "
                     f"all findings: {findings}"),
    ]
    section.discussion = (f"One run of `bench/reliability.py` ({time.monotonic() - started:.0f} s): the "
                          f"example counting engine with max_running_requests {SLOTS} and "
                          f"max_queued_requests {QUEUE}, each request {TOKENS} tokens at {TOKEN_MS:g} ms. "
                          "What it shows: bench/NOTES.md.")
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--port", type=int, default=0)
    for name in ("hold", "burst"):
        client = sub.add_parser(name)
        client.add_argument("address")
        client.add_argument("count", type=int)
    args = parser.parse_args(argv)
    if args.command == "serve":
        asyncio.run(_serve(args.port))
    elif args.command == "hold":
        asyncio.run(_hold(args.address, args.count))
    else:
        reply(**dataclasses.asdict(asyncio.run(_burst(args.address, args.count))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
