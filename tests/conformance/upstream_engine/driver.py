"""Drive upstream-only engines as a revision-1 client would, and print what each got wrong.

    python -S driver.py --stubs DIR --site SITE_PACKAGES NAME=HOST:PORT[/CHECK,...] ...

Runs under `python -S` with upstream's stubs first on sys.path (see bootstrap.py), so every
message it sends or decodes is upstream's. Targets are checked at once, the checks of one target
one after another (its load figures must see only the driver's own requests). Prints one JSON
object: {NAME: {FINDING: [problem, ...]}}, a finding being named after its check (the
abort check also reports `load` and `abort-status`); no entry is a pass. The abort check expects the
target to run one request at a time (`--slots 1`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import traceback

SERVED = ("LoadLora", "UnloadLora", "ListLoras", "GetKvEventSources", "SubscribeKvEvents")
NOT_SERVED = ("/grpc.health.v1.Health/Check", "/openengine.v1.Discovery/GetCapabilities",
              "/openengine.v1.Observability/WatchLoad")
CHECK_TIMEOUT = 20.0


class Probe:
    """One target's channel, stubs and findings."""

    def __init__(self, grpc, pb, address: str):
        self.grpc, self.pb = grpc, pb
        self.channel = grpc.aio.insecure_channel(address)
        self.inference = pb.rpc.InferenceStub(self.channel)
        self.control = pb.rpc.ControlStub(self.channel)
        self.found: dict[str, list[str]] = {}
        self.info = None

    def problem(self, check: str, message: str) -> None:
        found = self.found.setdefault(check, [])
        if message not in found:        # one line per kind of finding, however often it recurs
            found.append(message)

    def expect(self, check: str, ok: bool, message: str) -> None:
        if not ok:
            self.problem(check, message)

    def request(self, request_id: str, *, prompt="driver says hello", max_tokens=8, min_tokens=None,
                ignore_eos=True, seed=None, temperature=None, n=None, stops=(), include_stop=None, **response):
        gen = self.pb.gen
        r = gen.GenerateRequest(request_id=request_id, prompt=prompt)
        r.stopping.max_tokens = max_tokens
        if min_tokens is not None:
            r.stopping.min_tokens = min_tokens
        if ignore_eos:
            r.stopping.ignore_eos = True
        if include_stop is not None:
            r.stopping.include_stop_in_output = include_stop
        for stop in stops:
            r.stopping.conditions.append(gen.StopCondition(stop_text=stop) if isinstance(stop, str)
                                         else gen.StopCondition(stop_token_id=stop))
        for name, value in (("seed", seed), ("temperature", temperature), ("num_sequences", n)):
            if value is not None:
                setattr(r.sampling, name, value)
        for name, value in response.items():
            if name.endswith("_candidates"):
                getattr(r.response, name).top_n = value
            else:
                setattr(r.response, name, value)
        return r

    async def generate(self, request, metadata=None) -> list:
        return [m async for m in self.inference.Generate(request, timeout=10, metadata=metadata)]

    def outputs(self, responses) -> dict[int, dict]:
        """Per output index: token ids, text, and its finished events."""
        seen: dict[int, dict] = {}
        for m in responses:
            which = m.WhichOneof("event")
            if which in ("token", "finished"):
                event = getattr(m, which)
                slot = seen.setdefault(event.output_index, {"ids": [], "text": "", "finished": []})
                if which == "token":
                    slot["ids"] += [t.token_id for t in event.tokens]
                    slot["text"] += event.text
                else:
                    slot["finished"].append(event)
        return seen

    def stream_rules(self, check: str, responses, request, outputs: int) -> dict[int, dict]:
        """What upstream's reference asks of every Generate stream, checked on one of them."""
        gen = self.pb.gen
        expect = lambda ok, msg: self.expect(check, ok, msg)     # noqa: E731
        expect(all(m.request_id == request.request_id for m in responses),
               "request_id is not echoed on every response")
        closed: set[int] = set()
        for k, m in enumerate(responses):
            which = m.WhichOneof("event")
            if which in ("token", "finished"):
                event = getattr(m, which)
                expect(event.HasField("output_index"), f"a {which} event has no output_index")
                expect(event.output_index not in closed, f"a {which} event follows output "
                       f"{event.output_index}'s GenerationFinished")
                if which == "finished":
                    closed.add(event.output_index)
            expect(not m.HasField("usage") or k == len(responses) - 1, "usage on a response that is not the final one")
        seen = self.outputs(responses)
        expect(sorted(seen) == list(range(outputs)), f"outputs {sorted(seen)}, asked for {outputs}")
        for index, slot in seen.items():
            expect(len(slot["finished"]) == 1, f"output {index} got {len(slot['finished'])} GenerationFinished events")
        if not responses:
            self.problem(check, "an empty stream")
            return seen
        last = responses[-1]
        expect(last.WhichOneof("event") == "finished", "the final response is not a GenerationFinished")
        if not last.HasField("usage"):
            self.problem(check, "the final response carries no usage")
        else:
            u = last.usage
            emitted = sum(len(s["ids"]) for s in seen.values())
            prompt = len(request.prompt.encode()) if request.WhichOneof("input") == "prompt" else len(request.token_ids.ids)
            expect(u.total_tokens == u.prompt_tokens + u.completion_tokens,
                   f"usage total {u.total_tokens} != prompt {u.prompt_tokens} + completion {u.completion_tokens}")
            expect(u.prompt_tokens == prompt, f"usage prompt_tokens {u.prompt_tokens}, prompt had {prompt}")
            expect(u.completion_tokens == emitted, f"usage completion_tokens {u.completion_tokens}, {emitted} tokens sent")
        stopping = request.stopping
        for index, slot in seen.items():
            expect(len(slot["ids"]) <= stopping.max_tokens,
                   f"output {index}: {len(slot['ids'])} tokens, max_tokens {stopping.max_tokens}")
            for f in slot["finished"]:
                if f.reason == gen.FINISH_REASON_STOP:
                    expect(f.stop_match.WhichOneof("match") is not None, f"output {index} ended STOP with no stop_match")
        return seen

    # -- checks, each a coroutine on this probe -------------------------------------------------

    async def server_info(self):
        info = await self.control.GetServerInfo(self.pb.server.GetServerInfoRequest(), timeout=5)
        self.info = info
        c = "server-info"
        self.expect(c, info.schema_revision == 1, f"schema_revision {info.schema_revision}, upstream v1 is 1")
        self.expect(c, 0 < info.minimum_client_revision <= 1,
                    f"minimum_client_revision {info.minimum_client_revision}: a revision-1 client must reject it")
        self.expect(c, info.schema_release == "4def7c5", f"schema_release {info.schema_release!r}")
        self.expect(c, info.engine_name == "upstream-test-engine", f"engine_name {info.engine_name!r}")
        self.expect(c, bool(info.instance_id) and list(info.supported_models) == ["toy-bytes"], "identity incomplete")
        self.expect(c, info.capacity.HasField("max_running_requests"), "capacity.max_running_requests unset")

    async def model_info(self):
        c, model = "model-info", self.pb.model
        info = await self.control.GetModelInfo(model.GetModelInfoRequest(), timeout=5)
        named = await self.control.GetModelInfo(model.GetModelInfoRequest(model="toy-bytes"), timeout=5)
        self.expect(c, info == named and info.model_id == "toy-bytes", "an empty model does not select the only one")
        self.expect(c, info.HasField("max_context_length") and info.HasField("max_output_tokens"), "limits unset")
        self.expect(c, info.generation.output_logprobs.supported, "output logprobs not advertised")
        await self.status(c, "NOT_FOUND", self.control.GetModelInfo(model.GetModelInfoRequest(model="no-such-model"), timeout=5))

    async def health(self):
        life = self.pb.life
        reply = await self.control.Health(life.HealthRequest(include_inference_probe=True), timeout=5)
        self.expect("health", reply.state == life.HEALTH_STATE_READY, f"state {life.HealthState.Name(reply.state)}")
        self.expect("health", "inference_probe" in [c.name for c in reply.checks], "no inference_probe check")

    async def stream(self):
        request = self.request("basic-1", max_tokens=8)
        responses = await self.generate(request)
        seen = self.stream_rules("stream", responses, request, 1)
        slot = seen.get(0, {"ids": [], "finished": []})
        self.expect("stream", len(slot["ids"]) == 8, f"{len(slot['ids'])} tokens for max_tokens 8 with ignore_eos")
        reasons = [f.reason for f in slot["finished"]]
        self.expect("stream", reasons[:1] == [self.pb.gen.FINISH_REASON_LENGTH], f"finish reasons {reasons}, not LENGTH")
        ids = await self.generate(self.pb.gen.GenerateRequest(
            request_id="basic-ids", token_ids=self.pb.gen.TokenIds(ids=[104, 105]),
            stopping=self.pb.gen.StoppingOptions(max_tokens=3, ignore_eos=True)))
        self.expect("stream", len(self.outputs(ids).get(0, {"ids": []})["ids"]) == 3, "token-id input not served")

    async def seed(self):
        runs = []
        for k, seed in enumerate((42, 42, 43)):
            responses = await self.generate(self.request(f"seed-{k}", max_tokens=16, seed=seed, temperature=1.0))
            runs.append(self.outputs(responses).get(0, {"ids": []})["ids"])
        self.expect("seed", runs[0] == runs[1], "equal seeds gave different outputs")
        self.expect("seed", runs[0] != runs[2], "different seeds gave the same output")

    async def num_sequences(self):
        request = self.request("n-3", max_tokens=5, n=3, seed=5)
        seen = self.stream_rules("num-sequences", await self.generate(request), request, 3)
        self.expect("num-sequences", all(len(s["ids"]) == 5 for s in seen.values()), "an output is short")

    async def logprobs(self):
        request = self.request("lp-1", max_tokens=4, return_output_logprobs=True, output_candidates=3,
                               return_prompt_logprobs=True, prompt_candidates=2)
        responses = await self.generate(request)
        self.stream_rules("logprobs", responses, request, 1)
        prompts = [m for m in responses if m.WhichOneof("event") == "prompt"]
        self.expect("logprobs", len(prompts) == 1 and responses[0] is prompts[0], "PromptOutput not once and first")
        if prompts:
            first, rest = prompts[0].prompt.tokens[0], prompts[0].prompt.tokens[1:]
            self.expect("logprobs", not first.HasField("logprob") and len(rest) == len(request.prompt) - 1,
                        "prompt token records wrong")
            self.expect("logprobs", all(len(t.candidates) == 2 for t in rest), "prompt candidates not top 2")
        infos = [t for m in responses if m.WhichOneof("event") == "token" for t in m.token.tokens]
        self.expect("logprobs", infos and all(t.HasField("logprob") and t.rank >= 1 and len(t.candidates) == 3
                                              for t in infos), "output tokens lack logprob, rank or 3 candidates")

    async def probe(self, request_id):
        responses = await self.generate(self.request(request_id, max_tokens=24, temperature=0.0,
                                                     prompt="driver stops here"))
        slot = self.outputs(responses).get(0, {"ids": [], "text": ""})
        return slot["ids"], slot["text"]

    async def stop_text(self):
        c, gen = "stop-text", self.pb.gen
        ids, text = await self.probe("stop-probe")
        pairs = [text[k:k + 2] for k in range(len(text) - 1)]
        k = next((k for k in range(2, len(pairs)) if pairs[k] not in pairs[:k] and pairs[k].strip()), None)
        if k is None:
            self.problem(c, f"no stop string to choose in {text!r}")
            return
        for include, want in ((None, text[:k]), (True, text[:k + 2])):
            request = self.request(f"stop-text-{include}", max_tokens=24, temperature=0.0, prompt="driver stops here",
                                   stops=[pairs[k]], include_stop=include)
            seen = self.stream_rules(c, await self.generate(request), request, 1)
            slot = seen.get(0, {"text": "", "finished": []})
            self.expect(c, slot["text"] == want, f"text {slot['text']!r} with stop {pairs[k]!r} (include={include}), want {want!r}")
            f = slot["finished"][0] if slot["finished"] else None
            self.expect(c, f is not None and f.reason == gen.FINISH_REASON_STOP and f.stop_match.stop_text == pairs[k],
                        f"finish {f} for stop text {pairs[k]!r}")

    async def stop_token(self):
        c, gen = "stop-token", self.pb.gen
        ids, _ = await self.probe("stop-token-probe")
        k = next((k for k in range(2, len(ids)) if ids[k] not in ids[:k]), None)
        if k is None:
            self.problem(c, f"no stop token to choose in {ids}")
            return
        request = self.request("stop-token", max_tokens=24, temperature=0.0, prompt="driver stops here", stops=[ids[k]])
        slot = self.stream_rules(c, await self.generate(request), request, 1).get(0, {"ids": [], "finished": []})
        self.expect(c, slot["ids"] == ids[:k], f"tokens {slot['ids']} with stop token {ids[k]}, want {ids[:k]}")
        f = slot["finished"][0] if slot["finished"] else None
        self.expect(c, f is not None and f.reason == gen.FINISH_REASON_STOP and f.stop_match.HasField("stop_token_id")
                    and f.stop_match.stop_token_id == ids[k], f"finish {f} for stop token {ids[k]}")

    async def eos(self):
        request = self.request("eos", max_tokens=200, ignore_eos=False, temperature=0.0)
        slot = self.stream_rules("eos", await self.generate(request), request, 1).get(0, {"finished": []})
        f = slot["finished"][0] if slot["finished"] else None
        self.expect("eos", f is not None and f.reason == self.pb.gen.FINISH_REASON_STOP
                    and f.stop_match.HasField("eos_token_id"), f"finish {f}: not STOP on EOS")

    async def min_tokens(self):
        request = self.request("min", max_tokens=120, min_tokens=120, ignore_eos=False, temperature=0.0)
        slot = self.stream_rules("min-tokens", await self.generate(request), request, 1).get(0, {"ids": []})
        self.expect("min-tokens", len(slot["ids"]) == 120, f"{len(slot['ids'])} tokens with min_tokens 120")

    async def abort_and_load(self):
        gen, life, server = self.pb.gen, self.pb.life, self.pb.server
        limits = await self.control.GetModelInfo(self.pb.model.GetModelInfoRequest(), timeout=5)
        long = min(1000, limits.max_output_tokens)
        requests = [self.request(f"long-{k}", max_tokens=long, min_tokens=long, n=2) for k in "ab"]
        calls = [self.inference.Generate(r, timeout=15) for r in requests]
        first = await calls[0].read()
        self.expect("abort", first.WhichOneof("event") == "token", "the long request sent no token first")
        await asyncio.sleep(0.05)
        load = await self.control.GetLoad(server.GetLoadRequest(), timeout=5)
        self.expect("load", (load.running_requests, load.queued_requests) == (1, 1),
                    f"load {load.running_requests} running, {load.queued_requests} queued; want 1 and 1 (one slot)")
        reply = await self.control.Abort(life.AbortRequest(request_id="long-a"), timeout=5)
        self.expect("abort", reply.status == life.ABORT_STATUS_ABORTED, f"Abort(long-a) said {reply.status}")
        for k, call in enumerate(calls):
            if k == 1:
                reply = await self.control.Abort(life.AbortRequest(all_requests=life.AllRequests()), timeout=5)
                self.expect("abort", reply.status == life.ABORT_STATUS_ABORTED, f"Abort(all) said {reply.status}")
            rest = await self.drain(call)
            responses = ([first] if k == 0 else []) + rest
            seen = self.stream_rules("abort", responses, requests[k], 2)
            reasons = [f.reason for s in seen.values() for f in s["finished"]]
            self.expect("abort", reasons == [gen.FINISH_REASON_CANCELLED] * 2, f"long-{'ab'[k]} ended {reasons}, not CANCELLED twice")
        load = await self.control.GetLoad(server.GetLoadRequest(), timeout=5)
        self.expect("load", (load.running_requests, load.queued_requests) == (0, 0),
                    f"after the requests ended: {load.running_requests} running, {load.queued_requests} queued")
        try:
            again = (await self.control.Abort(life.AbortRequest(request_id="long-a"), timeout=5)).status
        except self.grpc.aio.AioRpcError as err:
            again = err.code().name
        self.expect("abort-status", again == life.ABORT_STATUS_ALREADY_FINISHED,
                    f"Abort of a request that finished said {again}, not ALREADY_FINISHED")
        await self.status("abort-status", "NOT_FOUND", self.control.Abort(life.AbortRequest(request_id="never-sent"), timeout=5))
        await self.status("abort-status", "INVALID_ARGUMENT", self.control.Abort(life.AbortRequest(), timeout=5))

    async def drain(self, call) -> list:
        # read() and iteration may not be mixed on one call, and the first was read().
        out = []
        while (m := await call.read()) is not self.grpc.aio.EOF:
            out.append(m)
        return out

    async def unimplemented(self):
        for name in SERVED:
            kind = "unary_stream" if name == "SubscribeKvEvents" else "unary_unary"
            await self.status("unimplemented", "UNIMPLEMENTED", self.raw(kind, f"/openengine.v1.Control/{name}"))
        for method in NOT_SERVED:
            await self.status("unimplemented", "UNIMPLEMENTED", self.raw("unary_unary", method))

    async def raw(self, kind, method):
        call = getattr(self.channel, kind)(method, request_serializer=None, response_deserializer=None)(b"", timeout=5)
        return [m async for m in call] if kind == "unary_stream" else await call

    async def refusals(self):
        gen = self.pb.gen
        cases = {
            "unknown model": ("NOT_FOUND", gen.GenerateRequest(request_id="r1", model="no-such-model", prompt="x")),
            "max_tokens over the limit": ("INVALID_ARGUMENT", self.request("r2", max_tokens=10**6)),
            "num_sequences 0": ("INVALID_ARGUMENT", self.request("r3", n=0)),
            "no input": ("INVALID_ARGUMENT", gen.GenerateRequest(request_id="r4")),
            "top_n too large": ("INVALID_ARGUMENT", self.request("r5", return_output_logprobs=True, output_candidates=99)),
        }
        for what, (code, request) in cases.items():
            await self.status("refusals", code, self.generate(request), what)
        metadata = {
            "a malformed priority": ("INVALID_ARGUMENT", (("openengine-priority", "high"),)),
            "a repeated routing key": ("INVALID_ARGUMENT", (("openengine-routing-key", "a"), ("openengine-routing-key", "b"))),
            "a priority the model does not use": ("OK", (("openengine-priority", "-3"),)),
        }
        for what, (code, pairs) in metadata.items():
            await self.status("refusals", code, self.generate(self.request(f"md-{code}", max_tokens=2), pairs), what)

    async def status(self, check, code, awaitable, what=""):
        try:
            await awaitable
        except self.grpc.aio.AioRpcError as err:
            got = err.code().name
        else:
            got = "OK"
        self.expect(check, got == code, f"{what or 'call'}: {got}, want {code}")

    CHECKS = ("server_info", "model_info", "health", "stream", "seed", "num_sequences", "logprobs",
              "stop_text", "stop_token", "eos", "min_tokens", "abort_and_load", "unimplemented", "refusals")

    async def run(self, only: list[str]) -> dict[str, list[str]]:
        async with self.channel:
            for name in only or self.CHECKS:
                try:
                    await asyncio.wait_for(getattr(self, name)(), CHECK_TIMEOUT)
                except Exception as exc:       # a check that cannot finish is a finding, not a crash
                    self.problem(name.replace("_", "-"), f"{type(exc).__name__}: {exc}"[:300])
        return self.found


class Stubs:
    def __init__(self):
        from openengine.v1 import (
            generation_pb2, lifecycle_pb2, model_pb2, openengine_pb2_grpc, server_pb2,
        )
        self.gen, self.life, self.model, self.server = generation_pb2, lifecycle_pb2, model_pb2, server_pb2
        self.rpc = openengine_pb2_grpc


async def drive(targets: dict[str, str]) -> dict:
    import grpc

    pb = Stubs()
    probes = {name: Probe(grpc, pb, address) for name, (address, _) in targets.items()}
    found = await asyncio.gather(*(p.run(targets[name][1]) for name, p in probes.items()))
    return dict(zip(probes, found))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stubs", required=True)
    p.add_argument("--site", action="append", default=[])
    p.add_argument("targets", nargs="+", help="NAME=HOST:PORT, or NAME=HOST:PORT/CHECK,... for some checks only")
    args = p.parse_args(argv)
    from bootstrap import use_stubs

    problem = use_stubs(args.stubs, args.site)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    targets = {}
    for target in args.targets:
        name, rest = target.split("=", 1)
        address, _, only = rest.partition("/")
        checks = [c.replace("-", "_") for c in only.split(",") if c]
        unknown = set(checks) - set(Probe.CHECKS)
        if unknown:
            print(f"unknown checks {sorted(unknown)}; known: {', '.join(Probe.CHECKS)}", file=sys.stderr)
            return 2
        targets[name] = (address, checks)
    try:
        result = asyncio.run(drive(targets))
    except Exception:
        traceback.print_exc()
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
