"""The server side of the load benchmarks, one process driven by the runner (bench/control.py).

    python -m bench.hosts engines --count 200 --rate 4    # 200 reference engines, one port each
    python -m bench.hosts bare                             # the gRPC floor: a bare streaming RPC
    python -m bench.hosts sdk                              # one engine on the SDK (openengine.serve)

`engines` hosts N reference engines (`openengine.engine.ReferenceBackend` on the SDK's `Server`,
what `oespec engine` runs) in one event loop, each on its own 127.0.0.1 port, with Poisson load
changes (bench/synthetic.py). `bare` is a grpc.aio server with one generic server-streaming method and
no engine behind it, which sends a fixed-size byte string per interval, and a Generate-shaped
method that streams the same messages an engine would, built per token. `sdk` serves one backend
through `openengine.serve`: a load that stays put and a Generate that streams one token per
message as fast as the client takes them, so what is measured is the SDK's own cost."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import struct
import sys
import time

import grpc

from bench.control import reply, serve_commands
from bench.measure import usage
from bench.synthetic import PoissonDriver, SyntheticLoad
from openengine.engine import EngineConfig, ReferenceBackend, check, serve_config
from openengine.serve import (Chunk, EngineDescription, Final, FinishReason, Load, Model, ServeConfig, Server,
                              Tokenizer)
from openengine.v1 import generation_pb2

BARE_METHOD = "/bench.Bare/Stream"
BARE_REQUEST = struct.Struct("=II")    # interval ms, payload bytes
STAMP = struct.Struct("=q")            # a bare message starts with its send time (monotonic ns)


def mark(**_) -> dict:
    """The runner's `mark` command: this process's CPU time and memory now."""
    return {"usage": usage()}


def coalescing(watchers) -> dict:
    """The runner's `state` command: how many load watchers' mailboxes hold coalesced updates."""
    return {"coalescing": sum(1 for w in watchers if w.coalesced > 0)}


async def host_engines(count: int, rate: float, max_watchers: int) -> None:
    config = check(EngineConfig(host="127.0.0.1", port=0, profiles=("load",),
                                limits={"load": {"max_watchers": max_watchers}}))
    served = serve_config(config)
    engines = [Server(ReferenceBackend(config), dataclasses.replace(served, instance_id=f"bench-{i:04d}"))
               for i in range(count)]
    for engine in engines:
        await engine.start()
    loads = [SyntheticLoad(e.backend) for e in engines]
    driver = PoissonDriver(loads, rate)
    offset = engines[0].state.clock.now_ns() - time.monotonic_ns()   # engine timestamps -> CLOCK_MONOTONIC
    reply(ports=[int(e.address.rsplit(":", 1)[1]) for e in engines], clock_offset_ns=offset)

    def changes(path: str, **_):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(driver.log, fh)

    try:
        await serve_commands({
            "mark": mark, "start_changes": lambda **_: driver.start(), "changes": changes,
            "stop_changes": lambda **_: driver.stop(),
            "state": lambda **_: coalescing(w for e in engines for w in e.state.load.watchers)})
    finally:
        driver.stop()
        await asyncio.gather(*(e.stop(0.2) for e in engines), return_exceptions=True)


class BenchBackend:
    """The least an engine can be: a fixed load, and `max_tokens` one-token chunks then a final."""

    def describe(self):
        model = Model("bench", max_context_tokens=1 << 20, max_output_tokens=1 << 19,
                      tokenizer=Tokenizer("bytes", 256))
        return EngineDescription("bench-sdk", "1", (model,), limits=self.limits)

    def __init__(self, max_watchers: int):
        self.limits = {"load": {"max_watchers": max_watchers}, "core": {"max_logprobs": 0}}

    def attach(self, engine):
        self.engine = engine

    async def generate(self, request):
        count = request.stopping.max_tokens
        for _ in range(count - 1):
            yield Chunk((65,), text="A")
        yield Final(FinishReason.LENGTH, prompt_tokens=1, completion_tokens=count, token_ids=(65,), text="A")

    async def abort(self, request_id, reason):
        return None

    def load(self):
        return Load(running_requests=3, queued_requests=1, used_kv_blocks=812, total_kv_blocks=4096,
                    running_tokens=1500, waiting_tokens=200, decode_batch_size=3,
                    attributes={"model": "bench", "state": "ENGINE_STATE_SERVING"})


async def host_sdk(max_watchers: int) -> None:
    server = Server(BenchBackend(max_watchers), ServeConfig(host="127.0.0.1", port=0))
    await server.start()
    offset = server.state.clock.now_ns() - time.monotonic_ns()
    reply(ports=[int(server.address.rsplit(":", 1)[1])], clock_offset_ns=offset)
    try:
        await serve_commands({"mark": mark, "state": lambda **_: coalescing(server.state.load.watchers)})
    finally:
        await server.stop(0.2)


async def host_bare() -> None:
    async def stream(request: bytes, context):
        interval_ms, size = BARE_REQUEST.unpack(request)
        pad = b"\x00" * max(0, size - STAMP.size)
        yield STAMP.pack(time.monotonic_ns()) + pad
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            yield STAMP.pack(time.monotonic_ns()) + pad

    async def generate(request, context):
        # What a hand-written servicer streams: one message per token, built as it goes, then the
        # output's end with the usage.
        count = request.stopping.max_tokens
        for _ in range(count):
            yield generation_pb2.GenerateResponse(request_id=request.request_id, token=generation_pb2.TokenOutput(
                output_index=0, tokens=[generation_pb2.TokenInfo(token_id=65, token="A")], text="A"))
        yield generation_pb2.GenerateResponse(
            request_id=request.request_id,
            finished=generation_pb2.GenerationFinished(output_index=0, reason=generation_pb2.FINISH_REASON_LENGTH),
            usage=generation_pb2.Usage(prompt_tokens=1, completion_tokens=count, total_tokens=count + 1))

    handler = grpc.method_handlers_generic_handler("bench.Bare", {
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
        "Generate": grpc.unary_stream_rpc_method_handler(
            generate, request_deserializer=generation_pb2.GenerateRequest.FromString,
            response_serializer=generation_pb2.GenerateResponse.SerializeToString)})
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    reply(ports=[port], clock_offset_ns=0)
    try:
        await serve_commands({"mark": mark, "state": lambda **_: {}})
    finally:
        await server.stop(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hosts")
    sub = parser.add_subparsers(dest="what", required=True)
    e = sub.add_parser("engines")
    e.add_argument("--count", type=int, default=1)
    e.add_argument("--rate", type=float, default=0.0, help="load changes per second per engine (Poisson)")
    e.add_argument("--max-watchers", type=int, default=64)
    sub.add_parser("bare")
    s = sub.add_parser("sdk")
    s.add_argument("--max-watchers", type=int, default=64)
    args = parser.parse_args(argv)
    if args.what == "engines":
        asyncio.run(host_engines(args.count, args.rate, args.max_watchers))
    elif args.what == "sdk":
        asyncio.run(host_sdk(args.max_watchers))
    else:
        asyncio.run(host_bare())
    return 0


if __name__ == "__main__":
    sys.exit(main())
