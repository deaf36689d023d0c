"""A client of upstream OpenEngine v1 (ai-dynamo/openengine at the pin), written only against stubs
generated from upstream/openengine-v1.binpb: it calls every upstream RPC of an engine and checks
each answer against upstream's docs/api.md, as a client built from upstream's protos would.

Run it in a process whose `openengine` package is upstream's alone (tests/interop/stubs.py builds
the command line):

    python -I -S tests/interop/upstream_client.py --stubs DIR --site-packages SITE --target HOST:PORT

`-I -S` keeps the project's own `openengine` (installed editable, or on PYTHONPATH) out of reach;
DIR holds the generated stubs and SITE the site-packages that hold grpc and protobuf. One line per
check (PASS or FAIL); the exit status is 1 when any check fails, 2 when the arguments are wrong or
the engine cannot be reached.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import uuid


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="check an engine with a client of upstream OpenEngine v1")
    parser.add_argument("--target", required=True, help="the engine's address, HOST:PORT")
    parser.add_argument("--stubs", required=True, help="the folder holding the generated openengine/v1 stubs")
    parser.add_argument("--site-packages", action="append", default=[],
                        help="a folder holding grpc and protobuf (repeatable)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds allowed for each call (default: 30)")
    parser.add_argument("--prompt", default="Count with me: one, two, three,",
                        help="the prompt of every Generate call")
    parser.add_argument("--abort-max-tokens", type=int, default=0,
                        help="max_tokens of the request that is aborted while it runs (default: the model's "
                             "max_output_tokens, else 4096)")
    return parser.parse_args(argv)


ARGS = _arguments(sys.argv[1:])
STUBS = os.path.realpath(ARGS.stubs)
# Upstream's stubs first; grpc and protobuf after them. Nothing else: no site, no PYTHONPATH.
sys.path[:0] = [STUBS]
sys.path.extend(ARGS.site_packages)

import grpc  # noqa: E402

import openengine  # noqa: E402
from openengine.v1 import (  # noqa: E402
    generation_pb2, kv_pb2, lifecycle_pb2, lora_pb2, model_pb2, openengine_pb2_grpc, server_pb2,
)

CLIENT_REVISION = 1      # the schema revision this client was generated from
TOKEN_LIMIT = 8
SEED = 1234


class Checks:
    """Records one line per check and whether any failed."""

    def __init__(self):
        self.failed = 0

    def report(self, ok: bool, name: str, detail: str) -> bool:
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        self.failed += not ok
        return ok

    def skip(self, name: str, why: str) -> None:
        """A check of an optional feature the engine does not advertise."""
        print(f"SKIP {name}: {why}", flush=True)

    def expect(self, name: str, problems: list[str], success: str) -> bool:
        return self.report(not problems, name, "; ".join(problems) if problems else success)


def _code(err: grpc.RpcError) -> grpc.StatusCode:
    return err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN


def _status(err: grpc.RpcError) -> str:
    details = err.details() if hasattr(err, "details") else str(err)
    return f"{_code(err).name} ({details})"


# ------------------------------------------------------------------------------------------------
# Generate: one stream, read whole, judged against the stream rules of docs/api.md


class Stream:
    def __init__(self, request_id: str, responses: list, status: grpc.StatusCode, error: str = ""):
        self.request_id = request_id
        self.responses = responses
        self.status = status
        self.error = error

    @property
    def tokens(self) -> list[int]:
        return [t.token_id for r in self.responses if r.WhichOneof("event") == "token" for t in r.token.tokens]

    @property
    def text(self) -> str:
        return "".join(r.token.text for r in self.responses if r.WhichOneof("event") == "token")

    @property
    def finished(self) -> list:
        return [r.finished for r in self.responses if r.WhichOneof("event") == "finished"]

    @property
    def usage(self):
        last = self.responses[-1] if self.responses else None
        return last.usage if last is not None and last.HasField("usage") else None

    def problems(self) -> list[str]:
        """What breaks the rules every Generate stream follows."""
        found = []
        if self.status != grpc.StatusCode.OK:
            return [f"the stream ended with {self.status.name} ({self.error})"]
        if not self.responses:
            return ["the stream ended without a response"]
        finished_at: dict[int, int] = {}
        for i, r in enumerate(self.responses):
            event = r.WhichOneof("event")
            if r.request_id != self.request_id:
                found.append(f"response {i} has request_id {r.request_id!r}, not {self.request_id!r}")
            if event is None:
                found.append(f"response {i} carries no event")
            if event in ("token", "finished"):
                body = getattr(r, event)
                if not body.HasField("output_index"):
                    found.append(f"response {i} ({event}) has no output_index")
                index = body.output_index
                if index in finished_at:
                    found.append(f"response {i} ({event}) follows the finished event of output {index}")
                if event == "finished":
                    finished_at[index] = i
            if event == "error":
                found.append(f"the engine failed the request: {r.error.code} {r.error.message}")
            if r.HasField("usage") and i != len(self.responses) - 1:
                found.append(f"response {i} carries usage but is not the final response")
        outputs = {0} | {r.token.output_index for r in self.responses if r.WhichOneof("event") == "token"}
        for index in sorted(outputs - set(finished_at)):
            found.append(f"no finished event for output {index}")
        usage = self.usage
        if usage is None:
            found.append("the final response carries no usage")
        elif usage.total_tokens != usage.prompt_tokens + usage.completion_tokens:
            found.append(f"usage total_tokens {usage.total_tokens} is not prompt_tokens {usage.prompt_tokens} + "
                         f"completion_tokens {usage.completion_tokens}")
        return found


class Client:
    def __init__(self, channel: grpc.Channel, timeout: float):
        self.inference = openengine_pb2_grpc.InferenceStub(channel)
        self.control = openengine_pb2_grpc.ControlStub(channel)
        self.timeout = timeout
        self.model = ""
        self.text_input = True

    def request(self, tag: str, *, max_tokens: int, seed: int | None = None, temperature: float | None = None,
                stop: str = "", stop_token: int | None = None, sequences: int = 0,
                logprobs: bool = False) -> generation_pb2.GenerateRequest:
        req = generation_pb2.GenerateRequest(request_id=f"upstream-client-{tag}-{uuid.uuid4().hex[:12]}",
                                             model=self.model)
        if self.text_input:
            req.prompt = ARGS.prompt
        else:
            req.token_ids.ids.extend([1, 2, 3, 4])
        req.stopping.max_tokens = max_tokens
        req.stopping.ignore_eos = True       # so only max_tokens or the stop text ends the output
        if seed is not None:
            req.sampling.seed = seed
        if temperature is not None:
            req.sampling.temperature = temperature
        if stop:
            req.stopping.conditions.add(stop_text=stop)
        if stop_token is not None:
            req.stopping.conditions.add(stop_token_id=stop_token)
        if stop or stop_token is not None:
            req.stopping.include_stop_in_output = False     # unset would leave it to the engine
        if sequences:
            req.sampling.num_sequences = sequences
        if logprobs:
            req.response.return_output_logprobs = True
        return req

    def generate(self, req: generation_pb2.GenerateRequest) -> Stream:
        responses = []
        try:
            for r in self.inference.Generate(req, timeout=self.timeout):
                responses.append(r)
        except grpc.RpcError as err:
            return Stream(req.request_id, responses, _code(err), err.details() if hasattr(err, "details") else "")
        return Stream(req.request_id, responses, grpc.StatusCode.OK)


# ------------------------------------------------------------------------------------------------
# The checks, in the order a client meets an engine


def check_server_info(c: Client, checks: Checks):
    try:
        info = c.control.GetServerInfo(server_pb2.GetServerInfoRequest(), timeout=c.timeout)
    except grpc.RpcError as err:
        checks.report(False, "control.get_server_info", _status(err))
        return None
    problems = []
    if info.schema_revision < 1:
        problems.append(f"schema_revision {info.schema_revision} (zero is invalid)")
    if info.minimum_client_revision > CLIENT_REVISION:
        problems.append(f"minimum_client_revision {info.minimum_client_revision}: a revision-{CLIENT_REVISION} "
                        "client cannot use this server")
    if not info.schema_release:
        problems.append("schema_release is empty")
    if not info.instance_id:
        problems.append("instance_id is empty")
    if not info.supported_models:
        problems.append("supported_models is empty")
    checks.expect("control.get_server_info", problems,
                  f"schema_revision {info.schema_revision}, minimum_client_revision {info.minimum_client_revision} "
                  f"(accepts a revision-{CLIENT_REVISION} client), release {info.schema_release!r}, "
                  f"models {list(info.supported_models)}")
    return info


def check_model_info(c: Client, checks: Checks, models: list[str]):
    first = None
    for model in models:
        try:
            info = c.control.GetModelInfo(model_pb2.GetModelInfoRequest(model=model), timeout=c.timeout)
        except grpc.RpcError as err:
            checks.report(False, f"control.get_model_info[{model}]", _status(err))
            continue
        names = {info.model_id, info.served_model_name, *info.served_model_aliases}
        checks.expect(f"control.get_model_info[{model}]",
                      [] if model in names else [f"the answer names {sorted(n for n in names if n)}, not {model!r}"],
                      f"model_id {info.model_id!r}, served as {info.served_model_name!r}")
        first = first or info
    unknown = f"no-such-model-{uuid.uuid4().hex[:8]}"
    try:
        c.control.GetModelInfo(model_pb2.GetModelInfoRequest(model=unknown), timeout=c.timeout)
        checks.report(False, "control.get_model_info[unknown]", f"{unknown!r} was answered, not NOT_FOUND")
    except grpc.RpcError as err:
        checks.report(_code(err) == grpc.StatusCode.NOT_FOUND, "control.get_model_info[unknown]", _status(err))
    return first


def check_load(c: Client, checks: Checks, instance_id: str):
    try:
        load = c.control.GetLoad(server_pb2.GetLoadRequest(), timeout=c.timeout)
    except grpc.RpcError as err:
        checks.report(False, "control.get_load", _status(err))
        return
    problems = []
    if load.instance_id and instance_id and load.instance_id != instance_id:
        problems.append(f"instance_id {load.instance_id!r} differs from GetServerInfo's {instance_id!r}")
    checks.expect("control.get_load", problems,
                  f"running_requests {load.running_requests if load.HasField('running_requests') else 'unreported'}")


def check_health(c: Client, checks: Checks):
    try:
        health = c.control.Health(lifecycle_pb2.HealthRequest(), timeout=c.timeout)
    except grpc.RpcError as err:
        checks.report(False, "control.health", _status(err))
        return
    state = lifecycle_pb2.HealthState.Name(health.state) if health.state in lifecycle_pb2.HealthState.values() \
        else str(health.state)
    checks.report(health.state == lifecycle_pb2.HEALTH_STATE_READY, "control.health", f"state {state}")


def check_max_tokens(c: Client, checks: Checks):
    s = c.generate(c.request("max-tokens", max_tokens=TOKEN_LIMIT))
    problems = s.problems()
    if s.status == grpc.StatusCode.OK:
        reasons = [generation_pb2.FinishReason.Name(f.reason) for f in s.finished]
        if reasons != ["FINISH_REASON_LENGTH"]:
            problems.append(f"finished with {reasons}, not [FINISH_REASON_LENGTH]")
        if len(s.tokens) != TOKEN_LIMIT:
            problems.append(f"{len(s.tokens)} tokens for max_tokens {TOKEN_LIMIT}")
        if s.usage is not None and s.usage.completion_tokens != len(s.tokens):
            problems.append(f"usage completion_tokens {s.usage.completion_tokens}, but {len(s.tokens)} tokens came")
    checks.expect("inference.generate.max_tokens", problems,
                  f"{len(s.tokens)} tokens, finished LENGTH, request_id on all {len(s.responses)} responses, "
                  "output_index on every event, usage only on the final one")
    return s


def check_stop_text(c: Client, checks: Checks):
    ref = c.generate(c.request("stop-reference", max_tokens=TOKEN_LIMIT, seed=SEED, temperature=0.0))
    # The stop text is one token's text, or one character of the output when the token records
    # carry no text: not one event's text, since upstream lets an event carry several tokens and an
    # engine may send the whole output in one or two. A character is a letter or a digit, never
    # the replacement character a lone byte token decodes to.
    token_texts = [t.token for r in ref.responses if r.WhichOneof("event") == "token" for t in r.token.tokens]
    if token_texts and all(token_texts):
        pieces = [text for text in token_texts if text.strip()]
    else:
        pieces = [ch for ch in ref.text if ch.isascii() and ch.isalnum()]
    if ref.problems() or len(pieces) < 3:
        checks.report(False, "inference.generate.stop_text",
                      "; ".join(ref.problems()) or "the reference output has too little text to choose a stop text")
        return
    stop = pieces[2]
    expected = ref.text[:ref.text.find(stop)]
    s = c.generate(c.request("stop", max_tokens=TOKEN_LIMIT, seed=SEED, temperature=0.0, stop=stop))
    problems = s.problems()
    if s.status == grpc.StatusCode.OK:
        finished = s.finished
        reasons = [generation_pb2.FinishReason.Name(f.reason) for f in finished]
        if reasons != ["FINISH_REASON_STOP"]:
            problems.append(f"finished with {reasons}, not [FINISH_REASON_STOP]")
        elif finished[0].stop_match.WhichOneof("match") != "stop_text" or finished[0].stop_match.stop_text != stop:
            problems.append(f"stop_match is {finished[0].stop_match}, not stop_text {stop!r}")
        if s.text != expected:
            problems.append(f"the output is {s.text!r}; the stop text {stop!r} should end it at {expected!r}")
    checks.expect("inference.generate.stop_text", problems,
                  f"stop text {stop!r} ended the output at {expected!r} (reason STOP, stop_match.stop_text)")


def check_stop_token(c: Client, checks: Checks):
    ref = c.generate(c.request("stop-token-reference", max_tokens=TOKEN_LIMIT, seed=SEED, temperature=0.0))
    if ref.problems() or len(ref.tokens) < 3:
        checks.report(False, "inference.generate.stop_token",
                      "; ".join(ref.problems()) or "the reference output has fewer than 3 tokens")
        return
    stop = ref.tokens[2]
    expected = ref.tokens[:ref.tokens.index(stop)]
    s = c.generate(c.request("stop-token", max_tokens=TOKEN_LIMIT, seed=SEED, temperature=0.0, stop_token=stop))
    problems = s.problems()
    if s.status == grpc.StatusCode.OK:
        finished = s.finished
        reasons = [generation_pb2.FinishReason.Name(f.reason) for f in finished]
        if reasons != ["FINISH_REASON_STOP"]:
            problems.append(f"finished with {reasons}, not [FINISH_REASON_STOP]")
        elif finished[0].stop_match.WhichOneof("match") != "stop_token_id" or \
                finished[0].stop_match.stop_token_id != stop:
            problems.append(f"stop_match is {finished[0].stop_match}, not stop_token_id {stop}")
        if s.tokens != expected:
            problems.append(f"the output is {s.tokens}; the stop token {stop} should end it at {expected}")
    checks.expect("inference.generate.stop_token", problems,
                  f"stop token {stop} ended the output after {len(expected)} tokens (reason STOP, stop_token_id)")


def check_sequences(c: Client, checks: Checks, model_info):
    """Each output of a request with several gets its own index and exactly one finished event."""
    name = "inference.generate.num_sequences"
    most = model_info.generation.max_num_sequences if model_info is not None and \
        model_info.generation.HasField("max_num_sequences") else 1
    if most < 2:
        checks.skip(name, "the model does not advertise generation.max_num_sequences of 2 or more")
        return
    s = c.generate(c.request("sequences", max_tokens=TOKEN_LIMIT, sequences=2))
    problems = s.problems()
    if s.status == grpc.StatusCode.OK:
        finished = sorted((f.output_index, generation_pb2.FinishReason.Name(f.reason)) for f in s.finished)
        if finished != [(0, "FINISH_REASON_LENGTH"), (1, "FINISH_REASON_LENGTH")]:
            problems.append(f"finished events {finished}, not one LENGTH for each of outputs 0 and 1")
        per_output = {i: sum(len(r.token.tokens) for r in s.responses
                             if r.WhichOneof("event") == "token" and r.token.output_index == i) for i in (0, 1)}
        if per_output != {0: TOKEN_LIMIT, 1: TOKEN_LIMIT}:
            problems.append(f"tokens per output {per_output}, not {TOKEN_LIMIT} each")
        if s.usage is not None and s.usage.completion_tokens != len(s.tokens):
            problems.append(f"usage completion_tokens {s.usage.completion_tokens}, but {len(s.tokens)} tokens came "
                            "over both outputs")
    checks.expect(name, problems, f"outputs 0 and 1 with {TOKEN_LIMIT} tokens and one finished event each, "
                                  "usage summed over both")


def check_logprobs(c: Client, checks: Checks, model_info):
    name = "inference.generate.output_logprobs"
    if model_info is None or not model_info.generation.output_logprobs.supported:
        checks.skip(name, "the model does not advertise generation.output_logprobs.supported")
        return
    s = c.generate(c.request("logprobs", max_tokens=TOKEN_LIMIT, logprobs=True))
    problems = s.problems()
    infos = [t for r in s.responses if r.WhichOneof("event") == "token" for t in r.token.tokens]
    if s.status == grpc.StatusCode.OK and not all(t.HasField("logprob") for t in infos):
        problems.append(f"{sum(not t.HasField('logprob') for t in infos)} of {len(infos)} tokens have no logprob")
    checks.expect(name, problems, f"every one of {len(infos)} tokens carries its logprob")


def check_seed(c: Client, checks: Checks):
    runs = [c.generate(c.request(f"seed-{i}", max_tokens=TOKEN_LIMIT, seed=SEED, temperature=1.0)) for i in (1, 2)]
    problems = [p for s in runs for p in s.problems()]
    if not problems and runs[0].tokens != runs[1].tokens:
        problems.append(f"seed {SEED} gave {runs[0].tokens} and then {runs[1].tokens}")
    checks.expect("inference.generate.seed", problems, f"seed {SEED} gave the same {len(runs[0].tokens)} tokens twice")


def check_abort(c: Client, checks: Checks, model_info):
    limit = ARGS.abort_max_tokens or (model_info.max_output_tokens if model_info is not None and
                                      model_info.HasField("max_output_tokens") else 4096)
    req = c.request("abort", max_tokens=limit)
    call = c.inference.Generate(req, timeout=c.timeout)
    responses, outcome = [], {}
    first = threading.Event()

    def read():
        try:
            for r in call:
                responses.append(r)
                first.set()
            outcome["status"] = grpc.StatusCode.OK
        except grpc.RpcError as err:
            outcome["status"], outcome["error"] = _code(err), _status(err)
        first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    first.wait(c.timeout)
    problems = []
    try:
        answer = c.control.Abort(lifecycle_pb2.AbortRequest(request_id=req.request_id), timeout=c.timeout)
        status = lifecycle_pb2.AbortStatus.Name(answer.status) if answer.status in \
            lifecycle_pb2.AbortStatus.values() else str(answer.status)
        if answer.status != lifecycle_pb2.ABORT_STATUS_ABORTED:
            problems.append(f"Abort of the running request answered {status}, not ABORT_STATUS_ABORTED "
                            f"(if it had finished already, raise --abort-max-tokens)")
    except grpc.RpcError as err:
        problems.append(f"Abort of the running request failed: {_status(err)}")
    reader.join(c.timeout)
    if reader.is_alive():
        call.cancel()
        problems.append("the aborted stream did not end")
    else:
        s = Stream(req.request_id, responses, outcome.get("status", grpc.StatusCode.UNKNOWN), outcome.get("error", ""))
        problems += s.problems()
        reasons = [generation_pb2.FinishReason.Name(f.reason) for f in s.finished]
        if s.status == grpc.StatusCode.OK and reasons != ["FINISH_REASON_CANCELLED"]:
            problems.append(f"the aborted stream finished with {reasons}, not [FINISH_REASON_CANCELLED]")
    checks.expect("control.abort.running", problems, "ABORTED, and the stream ended with finished CANCELLED")

    unknown = f"upstream-client-unknown-{uuid.uuid4().hex[:12]}"
    for name, request, wanted in (("control.abort.unknown", lifecycle_pb2.AbortRequest(request_id=unknown),
                                   grpc.StatusCode.NOT_FOUND),
                                  ("control.abort.no_target", lifecycle_pb2.AbortRequest(),
                                   grpc.StatusCode.INVALID_ARGUMENT)):
        try:
            answer = c.control.Abort(request, timeout=c.timeout)
            checks.report(False, name, f"answered {answer.status}, not {wanted.name}")
        except grpc.RpcError as err:
            checks.report(_code(err) == wanted, name, _status(err))


# Statuses that are a clean refusal of an optional RPC: not served, or not enabled here. An
# INTERNAL status is what a response that does not decode as upstream's message turns into.
REFUSALS = {grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.FAILED_PRECONDITION}


def check_optional(c: Client, checks: Checks):
    missing = f"upstream-client-missing-{uuid.uuid4().hex[:8]}"
    unary = (
        ("control.load_lora", c.control.LoadLora,
         lora_pb2.LoadLoraRequest(adapter=lora_pb2.LoraAdapter(lora_id=1, lora_name=missing,
                                                              source_path=f"/nonexistent/{missing}")),
         # An engine with LoRA may refuse a path it cannot read, or name the adapter unknown.
         REFUSALS | {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}),
        ("control.unload_lora", c.control.UnloadLora, lora_pb2.UnloadLoraRequest(lora_name=missing),
         REFUSALS | {grpc.StatusCode.NOT_FOUND}),
        ("control.list_loras", c.control.ListLoras, lora_pb2.ListLorasRequest(), REFUSALS),
        ("control.get_kv_event_sources", c.control.GetKvEventSources, kv_pb2.GetKvEventSourcesRequest(), REFUSALS),
    )
    for name, rpc, request, allowed in unary:
        try:
            answer = rpc(request, timeout=c.timeout)
            checks.report(True, name, f"answered {type(answer).__name__}")
        except grpc.RpcError as err:
            checks.report(_code(err) in allowed, name, _status(err))
    # A subscription may stay open without events: a quiet stream until the deadline is an answer.
    call = c.control.SubscribeKvEvents(kv_pb2.SubscribeKvEventsRequest(), timeout=min(c.timeout, 2.0))
    try:
        first = next(iter(call), None)
        call.cancel()
        if first is None:
            checks.report(True, "control.subscribe_kv_events", "the stream ended without events")
        else:
            checks.report(first.WhichOneof("event") is not None, "control.subscribe_kv_events",
                          f"first response carries {first.WhichOneof('event') or 'no event'}")
    except grpc.RpcError as err:
        ok = _code(err) in REFUSALS | {grpc.StatusCode.DEADLINE_EXCEEDED}
        checks.report(ok, "control.subscribe_kv_events",
                      "open, no events before the deadline" if _code(err) == grpc.StatusCode.DEADLINE_EXCEEDED
                      else _status(err))


def main() -> int:
    here = os.path.realpath(openengine.__file__)
    if not here.startswith(STUBS + os.sep):
        print(f"FAIL setup: openengine is imported from {here}, not from the upstream stubs in {STUBS}")
        return 2
    checks = Checks()
    with grpc.insecure_channel(ARGS.target) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=ARGS.timeout)
        except grpc.FutureTimeoutError:
            print(f"FAIL setup: no engine answers at {ARGS.target}")
            return 2
        c = Client(channel, ARGS.timeout)
        info = check_server_info(c, checks)
        models = list(info.supported_models) if info is not None else []
        c.model = models[0] if models else ""
        model_info = check_model_info(c, checks, models)
        if model_info is not None and model_info.HasField("supports_text_input"):
            c.text_input = model_info.supports_text_input or not model_info.supports_token_ids_input
        check_load(c, checks, info.instance_id if info is not None else "")
        check_health(c, checks)
        check_max_tokens(c, checks)
        check_stop_text(c, checks)
        check_stop_token(c, checks)
        check_seed(c, checks)
        check_sequences(c, checks, model_info)
        check_logprobs(c, checks, model_info)
        check_abort(c, checks, model_info)
        check_optional(c, checks)
    print(f"{checks.failed} check{'s' if checks.failed != 1 else ''} failed" if checks.failed else "every check passed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
