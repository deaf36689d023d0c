"""The engine SDK's own cost: server CPU per message of an engine served by `openengine.serve`
against a bare grpc.aio server streaming the same messages, in the same run.

WatchLoad: one SDK engine (bench/hosts.py `sdk`, a backend with a fixed load) with W streams at
100 ms against the bare stream of byte strings of the same size (bench/fanout.py measures both).
Generate: a few clients stream long Generate calls from the SDK engine, whose backend yields one
token per chunk as fast as they are taken, and from a bare method that builds and streams the same
messages; the figure is server CPU per streamed token above the server process's idle cost."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

from bench import fanout
from bench.control import Child, idle_cpu_per_s
from bench.figures import QUICK_ROUNDS, ROUNDS, Section, at_most, info, interleaved, median_round

GENERATE_PATHS = {"sdk": "/openengine.v1.Inference/Generate", "bare": "/bench.Bare/Generate"}


@dataclass
class GenerateRun:
    kind: str
    tokens: int
    seconds: float
    server_cpu_s: float
    idle_cpu_per_s: float

    @property
    def server_us_per_token(self) -> float:
        busy = max(0.0, self.server_cpu_s - self.idle_cpu_per_s * self.seconds)
        return busy / self.tokens * 1e6 if self.tokens else float("inf")


def measure_generate(kind: str, *, clients: int = 4, calls: int = 4, tokens: int = 2000,
                     idle_s: float = 1.0) -> GenerateRun:
    from openengine.v1 import generation_pb2

    with Child("bench.hosts", "sdk" if kind == "sdk" else "bare", name=f"{kind} generate server") as server:
        port = server.read(60)["ports"][0]
        idle_rate = idle_cpu_per_s(server, idle_s)
        request = generation_pb2.GenerateRequest(prompt="x", stopping=generation_pb2.StoppingOptions(max_tokens=tokens))
        received = [0] * clients

        def client(i: int) -> None:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_stream(GENERATE_PATHS[kind], request_serializer=type(request).SerializeToString,
                                            response_deserializer=generation_pb2.GenerateResponse.FromString)
                for _ in range(calls):
                    received[i] += sum(1 for _ in call(request, timeout=120))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        s0 = server.ask("mark")["usage"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s1 = server.ask("mark")["usage"]
    return GenerateRun(kind, sum(received), (s1["mono_ns"] - s0["mono_ns"]) / 1e9, s1["cpu_s"] - s0["cpu_s"],
                       idle_rate)


def run(quick: bool = False) -> Section:
    section = Section("Engine SDK: server CPU against bare gRPC")
    counts, window, rounds = ((20,), 1.0, QUICK_ROUNDS) if quick else ((100, 1000), 3.0, ROUNDS)
    for n in counts:
        size = fanout.measure("sdk", n, window_s=0.5).message_bytes or 100   # the bare side sends as much
        pairs = interleaved(lambda kind: fanout.measure(kind, n, window_s=window, size=size), ("sdk", "bare"),
                            rounds)
        sdk, bare = (median_round([p[i] for p in pairs], lambda r: r.lag_p99_ms) for i in (0, 1))
        g = f"SDK WatchLoad, {n} streams"
        section.figures += [
            info(f"sdk.watch.w{n}.server_us_per_message", round(sdk.server_us_per_message, 1), "us", group=g,
                 note=f"{n} WatchLoad streams at 100 ms from an engine on openengine.serve, {sdk.message_bytes} B"),
            info(f"sdk.watch.w{n}.bare.server_us_per_message", round(bare.server_us_per_message, 1), "us", group=g,
                 note=f"{n} bare grpc.aio streams at 100 ms, {bare.message_bytes} B"),
            at_most(f"sdk.watch.w{n}.server_cost_ratio", [s.cost_over(b) for s, b in pairs], 1.2, group=g,
                    note="server CPU per message, SDK WatchLoad / bare grpc.aio server streaming, per round"),
            info(f"sdk.watch.w{n}.delivered_fraction", round(sdk.delivered / sdk.expected, 3), "ratio", group=g),
        ]
    tokens, calls = (200, 1) if quick else (2000, 4)
    pairs = interleaved(lambda kind: measure_generate(kind, tokens=tokens, calls=calls), ("sdk", "bare"), rounds)
    sdk, bare = (median_round([p[i] for p in pairs], lambda r: r.server_us_per_token) for i in (0, 1))
    g = "SDK Generate"
    section.figures += [
        info("sdk.generate.server_us_per_token", round(sdk.server_us_per_token, 2), "us", group=g,
             note=f"{sdk.tokens} tokens, one per message, 4 concurrent calls; the median of {rounds} rounds"),
        info("sdk.generate.bare.server_us_per_token", round(bare.server_us_per_token, 2), "us", group=g,
             note=f"the same messages from a bare grpc.aio method; the median of {rounds} rounds"),
        at_most("sdk.generate.server_cost_ratio", [s.server_us_per_token / b.server_us_per_token
                                                   for s, b in pairs], 1.5, group=g,
                note="server CPU per streamed token, SDK Generate / bare grpc.aio server streaming, per round"),
    ]
    return section
