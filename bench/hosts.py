"""The server side of the load benchmarks, one process driven by the runner (bench/control.py).

    python -m bench.hosts engines --count 200 --rate 4    # 200 reference engines, one port each
    python -m bench.hosts bare                             # the gRPC floor: a bare streaming RPC

`engines` hosts N reference engines (`openengine.engine.EngineServer`, the same object
`oespec engine` runs) in one event loop, each on its own 127.0.0.1 port, with Poisson load changes
(bench/synthetic.py). `bare` is a grpc.aio server with one generic server-streaming method and
no engine behind it, which sends a fixed-size byte string per interval."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import struct
import sys
import time

import grpc

from bench.control import reply, serve_commands
from bench.measure import rss_kib, usage
from bench.synthetic import PoissonDriver, SyntheticLoad

BARE_METHOD = "/bench.Bare/Stream"
BARE_REQUEST = struct.Struct("=II")    # interval ms, payload bytes
STAMP = struct.Struct("=q")            # a bare message starts with its send time (monotonic ns)


def _engine_config(max_watchers: int):
    from openengine.engine import EngineConfig, resolve_config

    return resolve_config(EngineConfig(host="127.0.0.1", port=0, profiles=("load",),
                                       limits={"load": {"max_watchers": max_watchers}}))


async def host_engines(count: int, rate: float, seed: int, max_watchers: int) -> None:
    from openengine.engine import EngineServer

    resolved = _engine_config(max_watchers)
    engines = []
    for i in range(count):
        engine = EngineServer(dataclasses.replace(resolved, instance_id=f"bench-{i:04d}"))
        await engine.start()
        engines.append(engine)
    loads = [SyntheticLoad(e.rt) for e in engines]
    driver = PoissonDriver(loads, rate, seed=seed)
    clock = engines[0].rt.clock
    offset = clock.now_ns() - time.monotonic_ns()   # engine timestamps -> CLOCK_MONOTONIC
    reply(ports=[e.port for e in engines], pid=_pid(), clock_offset_ns=offset)

    def mark(**_):
        return {"usage": usage().as_dict()}

    def start_changes(**_):
        driver.start()
        return {}

    def stop_changes(**_):
        driver.stop()
        return {}

    def changes(path: str, **_):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(driver.log, fh)
        return {"path": path, "count": len(driver.log)}

    def state(**_):
        watchers = [w for e in engines for w in e.rt.load.watchers]
        return {"watchers": len(watchers),
                "coalescing": sum(1 for w in watchers if w.coalesced > 0),
                "pending": sum(1 for w in watchers if w.pending is not None or w.dirty),
                "rss_kib": rss_kib()}

    try:
        await serve_commands({"mark": mark, "start_changes": start_changes, "stop_changes": stop_changes,
                              "changes": changes, "state": state})
    finally:
        driver.stop()
        await asyncio.gather(*(e.stop(0.2) for e in engines), return_exceptions=True)


async def host_bare() -> None:
    async def stream(request: bytes, context):
        interval_ms, size = BARE_REQUEST.unpack(request)
        pad = b"\x00" * max(0, size - STAMP.size)
        yield STAMP.pack(time.monotonic_ns()) + pad
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            yield STAMP.pack(time.monotonic_ns()) + pad

    handler = grpc.method_handlers_generic_handler("bench.Bare", {
        "Stream": grpc.unary_stream_rpc_method_handler(stream)})
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    reply(ports=[port], pid=_pid(), clock_offset_ns=0)

    def mark(**_):
        return {"usage": usage().as_dict()}

    def state(**_):
        return {"rss_kib": rss_kib()}

    try:
        await serve_commands({"mark": mark, "state": state})
    finally:
        await server.stop(0.2)


def _pid() -> int:
    import os
    return os.getpid()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hosts")
    sub = parser.add_subparsers(dest="what", required=True)
    e = sub.add_parser("engines")
    e.add_argument("--count", type=int, default=1)
    e.add_argument("--rate", type=float, default=0.0, help="load changes per second per engine (Poisson)")
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--max-watchers", type=int, default=64)
    sub.add_parser("bare")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        if args.what == "engines":
            asyncio.run(host_engines(args.count, args.rate, args.seed, args.max_watchers))
        else:
            asyncio.run(host_bare())
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
