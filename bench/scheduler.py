"""The fleet scheduler: one process that keeps the load of N engines, either through one WatchLoad
stream per engine or by polling GetLoad on each engine every P ms. It logs, for every value it
receives, (engine, CLOCK_MONOTONIC ns on receipt, change counter), and measures its own CPU and
the bytes of its connections between `go` and `stop`.

    python -m bench.scheduler --mode watch --ports 50001,50002
    python -m bench.scheduler --mode poll --ports 50001,50002 --interval-ms 50
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time

import grpc

from bench.control import reply, serve_commands
from bench.measure import tcp_bytes, usage
from bench.synthetic import change_counter
from openengine.v1 import control_service_pb2_grpc, load_pb2, observability_service_pb2_grpc, server_pb2

# Both modes, the same: no HTTP/2 BDP probing. A load channel carries small messages only, so
# the bandwidth estimate it feeds is never used, while each probe costs a PING and its ack
# (a write on the client and a read on the engine) for nearly every message received.
CHANNEL_OPTIONS = [("grpc.http2.bdp_probe", 0)]


class Scheduler:
    def __init__(self, mode: str, ports: list[int], *, interval_ms: int):
        self.mode = mode
        self.ports = ports
        self.interval_ms = interval_ms
        self.observations: list[tuple[int, int, int]] = []
        self.messages = 0       # messages (watch) or responses (poll) received in the window
        self.recording = False
        self.errors: list[str] = []
        self._channels: list[grpc.aio.Channel] = []
        self._tasks: list[asyncio.Task] = []
        self._first: list[asyncio.Event] = []

    def _record(self, engine: int, value: int) -> None:
        self.observations.append((engine, time.monotonic_ns(), value))
        if self.recording:
            self.messages += 1

    async def open(self, **_) -> dict:
        for i, port in enumerate(self.ports):
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
            self._channels.append(channel)
            stub = (observability_service_pb2_grpc.ObservabilityStub(channel) if self.mode == "watch"
                    else control_service_pb2_grpc.ControlStub(channel))
            first = asyncio.Event()
            self._first.append(first)
            run = self._watch if self.mode == "watch" else self._poll
            self._tasks.append(asyncio.ensure_future(run(i, stub, first)))
        await asyncio.wait_for(asyncio.gather(*(f.wait() for f in self._first)), 60)
        # Everything allocated so far (channels, stubs, modules) lives to the end: out of the
        # cyclic collector's way, so its passes walk only what the messages allocate.
        gc.freeze()
        return {"engines": len(self.ports)}

    async def _watch(self, i: int, stub, first: asyncio.Event) -> None:
        request = load_pb2.WatchLoadRequest(interval_ms=0, heartbeat_ms=1000)
        try:
            read = stub.WatchLoad(request).read
            while True:
                msg = await read()
                if msg is grpc.aio.EOF:
                    break
                if msg.WhichOneof("kind") == "snapshot":
                    self._record(i, change_counter(msg.snapshot.load))
                    first.set()
                elif self.recording:
                    self.messages += 1
        except grpc.aio.AioRpcError as err:
            self.errors.append(f"engine {i}: {err.code().name} {err.details()}")
        except asyncio.CancelledError:
            pass
        first.set()

    async def _poll(self, i: int, stub, first: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        period = self.interval_ms / 1000.0
        request = server_pb2.GetLoadRequest()
        # Engines are polled at evenly spread phases, as a scheduler with many targets would.
        next_at = loop.time() + period * i / max(1, len(self.ports))
        try:
            while True:
                delay = next_at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    info = await stub.GetLoad(request, timeout=5)
                except grpc.aio.AioRpcError as err:
                    self.errors.append(f"engine {i}: {err.code().name} {err.details()}")
                    if len(self.errors) > 100:
                        return
                else:
                    self._record(i, change_counter(info))
                    first.set()
                # A late poll is not followed by a burst of catch-up polls.
                next_at = max(next_at + period, loop.time())
        except asyncio.CancelledError:
            pass

    def _reading(self) -> dict:
        return {"usage": usage(), "tcp": tcp_bytes(set(self.ports)).__dict__}

    def go(self, **_) -> dict:
        self.messages = 0
        self.recording = True
        return self._reading()

    def stop(self, **_) -> dict:
        out = self._reading()
        self.recording = False
        out["messages"] = self.messages
        out["error_count"] = len(self.errors)
        return out

    def dump(self, path: str, **_) -> dict:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.observations, fh)
        return {"path": path, "count": len(self.observations)}

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self._channels), return_exceptions=True)


async def amain(args) -> None:
    sched = Scheduler(args.mode, [int(p) for p in args.ports.split(",") if p], interval_ms=args.interval_ms)
    reply()   # ready
    try:
        await serve_commands({"open": sched.open, "go": sched.go, "stop": sched.stop, "dump": sched.dump})
    finally:
        await sched.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler")
    parser.add_argument("--mode", choices=("watch", "poll"), required=True)
    parser.add_argument("--ports", required=True)
    parser.add_argument("--interval-ms", type=int, default=50, help="polling interval")
    args = parser.parse_args(argv)
    asyncio.run(amain(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
