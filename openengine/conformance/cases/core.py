"""Core cases: discovery, the RPCs each advertised profile must serve (and each unadvertised one
must refuse), streaming generation as upstream's events, and cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass
from typing import Callable

import grpc

from openengine.conformance.cases.base import Failed, Skipped, Unchecked, case, expect, expect_no
from openengine.conformance.context import (
    Context, Reader, expect_running, load_contract, poll, profile_versions, read_rest, refusal, rpc_error,
    status_name,
)
from openengine.conformance.stream import Stream, ending, finish_reason_name
from openengine.contract import CORE, RpcInfo, catalogue
from openengine.v1 import generation_pb2, kv_pb2, lifecycle_pb2, model_pb2, server_pb2, sessions_pb2

# Probing these with a request would change the engine's state for the rest of the run; their
# own cases (admin.*) exercise them instead.
DISRUPTIVE_METHODS = {"Drain", "PauseGeneration", "Sleep"}
# How long a probe waits for a stream's first message or status when silence proves nothing
# either way (a served stream may stay quiet); where an answer must come, it waits the RPC deadline.
STREAM_PROBE_SECONDS = 0.5
# Upstream lets an engine with LoRA disabled answer these FAILED_PRECONDITION (REQ-CORE-003).
LORA_METHODS = {"LoadLora", "UnloadLora", "ListLoras"}


def _probe_request(ctx: Context, rpc: RpcInfo):
    """A request that is valid where that is easy, and harmless whatever the engine does."""
    req = rpc.request()
    name = rpc.method.name
    if name == "Generate":
        return ctx.generate_request(max_tokens=1)
    if name == "GetModelInfo":
        req.model = ctx.model
    elif name == "Abort":
        req.request_id = "conformance-probe-no-such-request"
    elif name == "UpdateConfig":
        req.validate_only = True
    elif name == "UnloadLora":
        req.lora_name = "conformance-probe-no-such-adapter"
    return req


async def _probe(ctx: Context, rpc: RpcInfo, *, metadata=None,
                 wait: float = STREAM_PROBE_SECONDS) -> grpc.StatusCode | None:
    """Call one RPC and release what it created (a session); the status it ended with, None for
    a stream that stays open for `wait` seconds."""
    call = ctx.raw_call(rpc, _probe_request(ctx, rpc), metadata=metadata)
    try:
        if not rpc.server_streaming:
            answer = await call
            if rpc.method.name == "OpenSession" and answer.session.session_id:
                with contextlib.suppress(Exception):
                    await ctx.sessions.CloseSession(
                        sessions_pb2.CloseSessionRequest(session_id=answer.session.session_id))
            return grpc.StatusCode.OK
        first = await asyncio.wait_for(call.read(), wait)
    except asyncio.TimeoutError:
        call.cancel()
        return None
    except grpc.aio.AioRpcError as err:
        return err.code()
    if first is grpc.aio.EOF:
        return await call.code()
    call.cancel()
    return None


def _served_case(profile: str):
    async def run(ctx: Context):
        defined = ctx.contract[profile].version
        caps = ctx.discovery.capabilities
        version = next(((p.major, p.minor) for p in caps.profiles if p.name == profile), defined) \
            if caps is not None else defined
        if version[0] != defined[0]:
            # The registry defines no RPC for another major: nothing to probe would pass vacuously.
            raise Failed(f"advertised {profile} {version[0]}.{version[1]}, but the registry defines "
                         f"only major {defined[0]}: advertise {profile} {defined[0]}.x "
                         "(REQ-CAP-004)")
        if profile == "openengine.admin" and not ctx.admin_on_main and not ctx.options.admin_elsewhere:
            ctx.admin()   # unchecked, with the hint to give --admin-target
        missing, checked = [], 0
        for rpc in ctx.contract[profile].rpcs:
            if rpc.since_version[0] != version[0] or rpc.since_version > version \
                    or rpc.method.name in DISRUPTIVE_METHODS:
                continue
            token = ctx.options.admin_token if rpc.service.endswith(".Admin") else None
            code = await _probe(ctx, rpc, metadata=(("authorization", f"Bearer {token}"),) if token else None)
            checked += 1
            if code == grpc.StatusCode.UNIMPLEMENTED:
                missing.append(rpc.full_name)
        shown = "the core" if profile == CORE else f"advertised {profile} {version[0]}.{version[1]}"
        expect(not missing, f"{shown}, but {', '.join(missing)} answered UNIMPLEMENTED: add "
                            f"{'it' if len(missing) == 1 else 'them'}")
        if not checked:
            raise Unchecked(f"{profile} {version[0]}.{version[1]} has no RPC the runner may probe "
                            "without disrupting the engine")
        return f"{checked} RPCs answered"
    return run


def _absent_case(profile: str):
    async def run(ctx: Context):
        answered = []
        for rpc in ctx.contract[profile].rpcs:
            # Never with credentials: an unadvertised Admin must refuse before looking at them.
            # UNIMPLEMENTED must come, so a stream is given the whole deadline to say it.
            code = await _probe(ctx, rpc, wait=ctx.options.rpc_timeout)
            if code == grpc.StatusCode.FAILED_PRECONDITION and rpc.method.name in LORA_METHODS:
                continue
            if code != grpc.StatusCode.UNIMPLEMENTED:
                shown = "kept the stream open" if code is None else f"answered {status_name(code)}"
                answered.append(f"{rpc.full_name} {shown}")
        if answered and not ctx.has_discovery:
            raise Failed(f"{'; '.join(answered)}, so the engine serves {profile}: list it in "
                         f"Capabilities.profiles once Discovery/GetCapabilities is served")
        expect(not answered, f"{profile} is not advertised, but " + "; ".join(answered))
        return f"{len(ctx.contract[profile].rpcs)} RPCs answered UNIMPLEMENTED"
    return run


def _register_profile_cases() -> None:
    for info in load_contract().values():
        case(f"{info.short_name}.rpcs.served", profile=info.name,
             requires=("REQ-CORE-001.1", "REQ-SVC-001") if info.name == CORE
             else ("REQ-CORE-002", "REQ-SVC-001"),
             title=f"every RPC of {info.name} up to the advertised version is served"
             )(_served_case(info.name))
        if info.name != CORE:
            case(f"{info.short_name}.absent.unimplemented", profile=info.name, when="absent",
                 requires=("REQ-CORE-003", "REQ-SVC-004"),
                 title=f"{info.name} is not advertised, so its RPCs answer UNIMPLEMENTED"
                 )(_absent_case(info.name))


# Discovery
@case("core.discovery.answers", profile=CORE, requires=("REQ-CORE-001.1",),
      title="Control/GetServerInfo, GetModelInfo of every supported model and "
            "Discovery/GetCapabilities answer")
async def discovery_answers(ctx: Context):
    d = ctx.discovery
    expect(d.error is None, d.error or "")
    expect(bool(d.server_info.supported_models), "ServerInfo.supported_models is empty")
    if not ctx.has_discovery:
        raise Failed(ctx.missing_discovery() + " (REQ-CORE-001.1)")
    return f"{len(d.models)} model(s)"


@case("core.server-info.instance-id", profile=CORE, requires=("REQ-CORE-012",),
      title="ServerInfo has an engine_role, and an instance_id that is set and stable across reads")
async def instance_id(ctx: Context):
    first = ctx.server_info.instance_id
    expect(bool(first), "ServerInfo.instance_id is empty")
    expect(ctx.server_info.engine_role != 0, "ServerInfo.engine_role is ENGINE_ROLE_UNSPECIFIED")
    again = await ctx.control.GetServerInfo()
    expect(again.instance_id == first,
           f"ServerInfo.instance_id changed between reads: {first!r} then {again.instance_id!r}")


@case("core.server-info.revisions", profile=CORE, requires=("REQ-REV-009",),
      title="ServerInfo names this contract's schema revision, minimum client revision 1 and an "
            "immutable schema release")
async def server_revisions(ctx: Context):
    info, contract = ctx.server_info, catalogue()
    problems = []
    if info.schema_revision != contract.schema_revision:
        problems.append(f"schema_revision is {info.schema_revision}; an engine of this contract "
                        f"serves {contract.schema_revision} (upstream v1 is 1, this contract one "
                        f"additive revision on it) with schema_release {contract.schema_release!r}")
    if info.minimum_client_revision != contract.minimum_client_revision:
        problems.append(f"minimum_client_revision is {info.minimum_client_revision}, not "
                        f"{contract.minimum_client_revision}: every revision-"
                        f"{contract.minimum_client_revision} client is served")
    release = info.schema_release
    if not release or release in ("main", "master", "HEAD"):
        problems.append(f"schema_release is {release!r}: it names an immutable release "
                        f"({contract.schema_release!r})")
    expect_no(problems)
    return f"revision {info.schema_revision}, release {release}"


@case("core.model-info.answers", profile=CORE, requires=("REQ-CORE-020.1", "REQ-CORE-020.2"),
      title="GetModelInfo names each supported model as asked, selects the only model for an "
            "empty name (INVALID_ARGUMENT with several), and fails NOT_FOUND for an unknown one")
async def model_info(ctx: Context):
    problems = []
    for name, info in ctx.discovery.models.items():
        if info.served_model_name != name:
            problems.append(f"GetModelInfo({name!r}) answered served_model_name "
                            f"{info.served_model_name!r}")
    unknown = model_pb2.GetModelInfoRequest(model="conformance-no-such-model")
    problems.append(await refusal(ctx.control.GetModelInfo(unknown), (grpc.StatusCode.NOT_FOUND,),
                                  "GetModelInfo for an unknown model"))
    several = len(ctx.discovery.models) > 1
    try:
        default = await ctx.control.GetModelInfo()
        if several:
            problems.append(f"GetModelInfo with an empty model answered {default.served_model_name!r} "
                            f"although {len(ctx.discovery.models)} models are served, not INVALID_ARGUMENT")
        elif default.served_model_name not in ctx.discovery.models:
            problems.append(f"GetModelInfo with an empty model answered "
                            f"{default.served_model_name!r}, not the served model")
    except grpc.aio.AioRpcError as err:
        if not several:
            problems.append(f"GetModelInfo with an empty model failed with {status_name(err.code())}: "
                            "an empty name selects the only model")
        elif err.code() != grpc.StatusCode.INVALID_ARGUMENT:
            problems.append(f"GetModelInfo with an empty model on an engine serving several failed with "
                            f"{status_name(err.code())}, not INVALID_ARGUMENT")
    expect_no(problems)
    return f"{len(ctx.discovery.models)} model(s)"


@case("core.capabilities.stable", profile=CORE, requires=("REQ-CORE-005",),
      title="the profile list does not change with load or health")
async def capabilities_stable(ctx: Context):
    ctx.require_decoding(observable=True)
    before = profile_versions(ctx.require_capabilities())
    async with ctx.running():
        busy = profile_versions(await ctx.discovery_rpc.GetCapabilities())
    expect(busy == before, f"profiles while a request runs {busy} != at start {before}")
    if ctx.can_admin():
        async with ctx.paused():
            paused = profile_versions(await ctx.discovery_rpc.GetCapabilities())
        expect(paused == before, f"profiles while paused {paused} != at start {before}")
        return "checked while busy and while paused"
    return "checked while busy (pausing needs --admin-token)"


# Generation
def _expect_success(stream: Stream, what: str) -> None:
    failure = stream.failure()
    if failure:
        raise Failed(f"{what} within every limit: {failure} instead of finished events")


@case("core.generate.stream", profile=CORE,
      requires=("REQ-CORE-009.1", "REQ-CORE-009.3", "REQ-CORE-001.1", "REQ-CORE-015", "REQ-SVC-002",
                "REQ-CORE-016.1", "REQ-CORE-017.1", "REQ-CORE-017.2",
                "REQ-CORE-017.3", "REQ-CORE-017.4", "REQ-CORE-019.1", "REQ-CORE-019.3", "REQ-CORE-006"),
      title="Generate streams token events, then one finished (LENGTH at max_tokens) with the "
            "usage on the final response and the request id on every one, then OK")
async def generate_stream(ctx: Context):
    ctx.require_decoding()

    # ignore_eos: the output runs to max_tokens, so an output that runs past it is seen.
    request = ctx.generate_request(max_tokens=6, ignore_eos=True)
    stream = Stream(await ctx.generate(request), request)
    expect_no(stream.shape_problems(request_id=request.request_id))
    _expect_success(stream, "a 6-token request")
    out = stream.output(0)
    tokens = len(out.tokens)
    expect(tokens <= 6, f"max_tokens 6 but {tokens} tokens were generated (ignore_eos set): an "
                        "output ends when it has max_tokens tokens (REQ-CORE-019.1)")
    expect(tokens == 6, f"max_tokens 6 with ignore_eos, but the output ended after {tokens} tokens "
                        f"with {finish_reason_name(out.finished.reason)} (REQ-CORE-019.3)")
    expect(out.finished.reason == generation_pb2.FINISH_REASON_LENGTH,
           f"the output reached max_tokens and ended with {finish_reason_name(out.finished.reason)}, "
           "not FINISH_REASON_LENGTH (REQ-CORE-019.1)")
    usage = stream.usage
    expect(usage.completion_tokens == tokens,
           f"usage.completion_tokens {usage.completion_tokens} != {tokens} tokens streamed "
           "(REQ-CORE-017.3)")
    expect(usage.prompt_tokens > 0, "usage.prompt_tokens is 0 for a non-empty prompt (REQ-CORE-017.3)")
    return f"{tokens} tokens, usage {usage.prompt_tokens}+{usage.completion_tokens}"


# Tokens asked for where a case needs several token events of one output: an engine may send
# every token that is ready in one event, so a short output can arrive in one or two.
SEVERAL_EVENTS_TOKENS = 64


@case("core.generate.delta-text", profile=CORE, requires=("REQ-CORE-016.2",),
      title="each token event carries only the text its tokens add, never the output's text so far")
async def generate_delta_text(ctx: Context):
    ctx.require_decoding()
    tokens = min(SEVERAL_EVENTS_TOKENS, ctx.long_generation_tokens())
    request = ctx.generate_request(max_tokens=tokens, ignore_eos=True)
    stream = Stream(await ctx.generate(request), request)
    _expect_success(stream, f"a {tokens}-token request")
    # Fails three or more events of which each begins with the whole text before it.
    expect_no(stream.shape_problems(request_id=request.request_id))
    texts = stream.output(0).texts
    if any(not later.startswith(earlier) for earlier, later in zip(texts, texts[1:])):
        return f"{len(texts)} token events, none repeating the text before it"
    raise Unchecked(f"the {len(stream.output(0).tokens)} tokens came in {len(texts)} token event(s) "
                    "with text, each beginning with the text before it: with fewer than three, text "
                    "repeated from before cannot be told from new text that begins the same way")


@case("core.generate.request-id", profile=CORE, requires=("REQ-CORE-015",),
      title="a request without request_id gets one id from the engine, the same on every response")
async def generate_request_id(ctx: Context):
    request = ctx.generate_request(max_tokens=3, request_id="")
    request.request_id = ""
    stream = Stream(await ctx.generate(request), request)
    _expect_success(stream, "a 3-token request")
    ids = sorted({r.request_id for r in stream.responses})
    expect(ids and ids != [""], "the responses of a request sent without request_id carry no id: "
                                "the engine gives the request one and puts it on every response")
    expect(len(ids) == 1, f"the responses of one request carried {len(ids)} ids: {ids}")
    return f"id {ids[0]!r}"


@case("core.generate.terminal", profile=CORE,
      requires=("REQ-CORE-009.1", "REQ-CORE-009.2", "REQ-CORE-016.1", "REQ-CORE-017.3"),
      title="each of num_sequences outputs ends with exactly one finished event, nothing follows "
            "it, and usage counts every output")
async def generate_terminal(ctx: Context):
    ctx.require_decoding()
    # Every output the engine advertises (bounded, so the case stays short).
    n = max(1, min(MAX_OUTPUTS_ASKED, int(ctx.limit(CORE, "max_sequences"))))
    request = ctx.generate_request(max_tokens=4, num_sequences=n)
    stream = Stream(await ctx.generate(request), request)
    _expect_success(stream, f"a request for {n} outputs")
    expect_no(stream.shape_problems(outputs=n, request_id=request.request_id))
    finished = sorted(i for i, o in stream.outputs.items() if o.finished is not None)
    expect(finished == list(range(n)), f"with num_sequences={n} the stream finished outputs "
                                       f"{finished}: expected one finished event for each of "
                                       f"0..{n - 1}")
    expect(stream.usage.completion_tokens == stream.counted_tokens(),
           f"usage.completion_tokens {stream.usage.completion_tokens} != "
           f"{stream.counted_tokens()} tokens over the {n} outputs (REQ-CORE-017.3)")
    return f"{n} output(s)"


MAX_OUTPUTS_ASKED = 8


@dataclass(frozen=True)
class LimitProbe:
    """One request that an advertised limit or switch decides: `accept` says which way."""

    limit: str            # `openengine.core.min_p`
    shown: str            # what the request does, for the report
    change: Callable      # sets the field on a GenerateRequest
    accept: bool


# A valid constraint of each guided-decoding mode (the oneof member of GuidedDecoding).
GUIDED_EXAMPLES: dict[str, Callable] = {
    "json_schema": lambda g: setattr(g, "json_schema", '{"type": "object"}'),
    "json_object": lambda g: g.json_object.SetInParent(),
    "regex": lambda g: setattr(g, "regex", "[a-z]+"),
    "ebnf_grammar": lambda g: setattr(g, "ebnf_grammar", 'root ::= "yes" | "no"'),
    "structural_tag": lambda g: setattr(g, "structural_tag", '{"structures": [], "triggers": []}'),
    "choice": lambda g: g.choice.choices.extend(["yes", "no"]),
}


# A request value for each switch the request table ties to a field.
SWITCH_EXAMPLES: dict[str, Callable] = {
    "sampling.min_p": lambda r: setattr(r.sampling, "min_p", 0.1),
    "response.return_output_logprobs": lambda r: setattr(r.response, "return_output_logprobs", True),
    "response.return_prompt_logprobs": lambda r: setattr(r.response, "return_prompt_logprobs", True),
    "|input": lambda r: r.token_ids.ids.extend([72, 105]),   # a token-id prompt
}
# The switch a bounded field needs before its bound can be judged.
NEEDS_SWITCH = {"response.output_candidates.top_n": ("response.return_output_logprobs", "output_logprobs"),
                "response.prompt_candidates.top_n": ("response.return_prompt_logprobs", "prompt_logprobs")}


def limit_probes(limit_of: Callable[[str], object]) -> list[LimitProbe]:
    """Every GenerateRequest probe of REQ-CAP-009 for the core limits, from the contract's
    request table (which field each limit bounds or switches) and its guided modes: a request
    one above each numeric limit and one at it, each switch used when advertised off (and on),
    each guided mode not listed (and listed)."""
    probes: list[LimitProbe] = []
    for row in catalogue().request_limits:
        if row.request != "GenerateRequest" or row.profile != CORE or row.limit is None:
            continue
        name = f"{row.profile}.{row.limit}"
        value = limit_of(row.limit)
        if row.check == "at_most":
            field = row.field
            switch, switch_limit = NEEDS_SWITCH.get(field, (None, None))
            on = True if switch is None else bool(limit_of(switch_limit))

            def change(r, f=field, v=0, s=switch):
                if s:
                    SWITCH_EXAMPLES[s](r)
                *parents, leaf = f.split(".")
                setattr(functools.reduce(getattr, parents, r), leaf, v)
            above = int(value) + 1
            probes.append(LimitProbe(name, f"{field}={above}",
                                     lambda r, c=change, v=above: c(r, v=v), accept=False))
            if int(value) >= 1:
                probes.append(LimitProbe(name, f"{field}={int(value)}",
                                         lambda r, c=change, v=int(value): c(r, v=v), accept=on))
        elif row.check == "enabled":
            change = SWITCH_EXAMPLES.get(row.field)
            if change is None:
                raise KeyError(f"no example request value for {row.field} ({name})")
            shown = "a token-id prompt" if row.field == "|input" else f"{row.field} set"
            probes.append(LimitProbe(name, shown, change, accept=bool(value)))
        elif row.check == "member" and row.field == "guided|guide":
            listed = set(value)   # enum numbers or their registry spellings
            for fd in generation_pb2.GuidedDecoding.DESCRIPTOR.oneofs_by_name["guide"].fields:
                member = fd.name
                mode = model_pb2.GuidedDecodingMode.Value(f"GUIDED_DECODING_MODE_{member.upper()}")
                def guided(r, m=member):
                    GUIDED_EXAMPLES[m](r.guided)
                probes.append(LimitProbe(name, f"guided {member}", guided,
                                         accept=mode in listed or member in listed))
    return probes


@case("core.generate.limits", profile=CORE, requires=("REQ-CAP-009", "REQ-SVC-003", "REQ-CORE-006"),
      title="each request beyond an advertised limit, or using a feature advertised off, is refused "
            "with INVALID_ARGUMENT; the same within the limits is accepted")
async def generate_limits(ctx: Context):
    ctx.require_capabilities()
    if int(ctx.limit(CORE, "max_sequences")) < 1:
        raise Skipped("max_sequences is out of range (capabilities.limits-in-range)")
    problems, probes = [], limit_probes(lambda name: ctx.limit(CORE, name))
    for probe in probes:
        req = ctx.generate_request(max_tokens=2)
        probe.change(req)
        try:
            got = await ctx.generate(req)
        except grpc.aio.AioRpcError as err:
            if probe.accept:
                problems.append(f"{probe.shown} is within {probe.limit} but failed with "
                                f"{status_name(err.code())}")
            elif err.code() != grpc.StatusCode.INVALID_ARGUMENT:
                problems.append(f"{probe.shown} ({probe.limit}) failed with "
                                f"{status_name(err.code())}, not INVALID_ARGUMENT")
            continue
        if not probe.accept:
            problems.append(f"{probe.shown} was accepted ({len(got)} messages) although "
                            f"{probe.limit} is {_shown_limit(ctx.limit(CORE, probe.limit.rsplit('.', 1)[1]))}")
    expect_no(problems)
    return f"{len(probes)} probes"


def _shown_limit(value) -> str:
    if isinstance(value, bool):
        return "false" if not value else "true"
    if isinstance(value, list):
        names = [model_pb2.GuidedDecodingMode.Name(v) if isinstance(v, int) else str(v)
                 for v in value]
        return "[" + ", ".join(names) + "]"
    return str(value)


# Advertised features that change what Generate returns: each one asked for must be delivered.
@case("core.generate.output-logprobs", profile=CORE, requires=("REQ-CORE-006", "REQ-CAP-009"),
      title="with output log-probabilities advertised, a request for them and max_logprobs "
            "candidates gets a logprob, a rank and that many candidates on every token")
async def output_logprobs(ctx: Context):
    ctx.require_decoding()
    if not ctx.limit(CORE, "output_logprobs"):
        raise Skipped("output log-probabilities are not advertised")
    top = int(ctx.limit(CORE, "max_logprobs"))
    request = ctx.generate_request(max_tokens=4, ignore_eos=True)
    request.response.return_output_logprobs = True
    if top:
        request.response.output_candidates.top_n = top
    stream = Stream(await ctx.generate(request), request)
    _expect_success(stream, f"a request for output logprobs with top_n {top}")
    tokens = stream.output(0).tokens
    expect(tokens, "the request for output logprobs delivered no token")
    problems = []
    for k, t in enumerate(tokens):
        if not t.HasField("logprob"):
            problems.append(f"token {k} has no logprob")
        elif top and len(t.candidates) != top:
            problems.append(f"token {k} has {len(t.candidates)} candidates, not the {top} asked")
    expect(not problems, "advertised output logprobs (max_logprobs " + str(top) + ") were not "
                         "delivered: " + "; ".join(problems[:3]))
    return f"{len(tokens)} tokens with logprobs and {top} candidates"


@case("core.generate.prompt-logprobs", profile=CORE, requires=("REQ-CORE-006", "REQ-CORE-016.3"),
      title="with prompt log-probabilities advertised, a request for them and max_logprobs "
            "candidates gets one prompt event first, one TokenInfo per prompt token, each after the "
            "first with a logprob and that many candidates")
async def prompt_logprobs(ctx: Context):
    ctx.require_decoding()
    if not ctx.limit(CORE, "prompt_logprobs"):
        raise Skipped("prompt log-probabilities are not advertised")
    top = int(ctx.limit(CORE, "max_logprobs"))
    request = ctx.generate_request(max_tokens=2)
    request.response.return_prompt_logprobs = True
    if top:
        request.response.prompt_candidates.top_n = top
    stream = Stream(await ctx.generate(request), request)
    _expect_success(stream, "a request for prompt logprobs")
    expect_no(stream.shape_problems(request_id=request.request_id))
    expect(stream.prompt is not None, "advertised prompt logprobs were asked for but no prompt "
                                      "event came")
    tokens = list(stream.prompt.tokens)
    expect(len(tokens) == stream.usage.prompt_tokens,
           f"the prompt event has {len(tokens)} tokens, usage.prompt_tokens says "
           f"{stream.usage.prompt_tokens}")
    missing = [k for k, t in enumerate(tokens[1:], 1) if not t.HasField("logprob")]
    expect(not missing, f"prompt tokens {missing[:5]} have no logprob")
    short = [k for k, t in enumerate(tokens[1:], 1) if top and len(t.candidates) != top]
    expect(not short, f"prompt tokens {short[:5]} do not carry the {top} candidates asked "
                      f"(max_logprobs {top})")
    return f"{len(tokens)} prompt tokens" + (f", {top} candidates each" if top else "")


@case("core.generate.stop-in-output", profile=CORE, requires=("REQ-CORE-013.3", "REQ-CORE-006"),
      title="with supports_stop_in_output reported, include_stop_in_output keeps the matched stop "
            "string at the output's end")
async def stop_in_output(ctx: Context):
    ctx.require_decoding()
    info = ctx.discovery.models.get(ctx.model)
    gen = info.generation if info is not None and info.HasField("generation") else None
    if gen is None or not gen.supports_stop_in_output:
        raise Skipped("ModelInfo.generation.supports_stop_in_output is not true")

    def choose(_ids, text):
        return _choose_stop_string(text)

    stop, ids, text, final = await _stop_runs(ctx, choose, lambda r, s: (
        r.stopping.conditions.add(stop_text=s), setattr(r.stopping, "include_stop_in_output", True)))
    _reached(final, f"stop string {stop!r}")
    expect(text.endswith(stop), f"include_stop_in_output was set but the output {text[-20:]!r} does "
                                f"not end with the matched stop string {stop!r}")
    return f"kept {stop!r}"


# Cancellation
async def _abort_running(ctx: Context, abort_request_for) -> str:
    """Start a long request, abort it once it streams, and check how its stream ends."""
    req = ctx.long_request()
    call = ctx.inference.Generate(req)
    responses, aborted = [], None
    try:
        first = await call.read()
        expect(first is not grpc.aio.EOF, "the Generate stream ended with OK before its first "
                                           "message: an accepted stream ends with a finished or "
                                           "error event")
        responses.append(first)
        aborted = await ctx.control.Abort(abort_request_for(req))
        responses.extend(await read_rest(call))
    except grpc.aio.AioRpcError as err:
        # A stream still running at its deadline after Abort answered was not ended by it, however
        # slowly the machine runs.
        if aborted is not None and err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise Failed(f"Abort answered {lifecycle_pb2.AbortStatus.Name(aborted.status)} but the "
                         f"aborted stream was still running at its deadline, {len(responses)} "
                         "messages in, not ended with a finished event of FINISH_REASON_CANCELLED "
                         "(REQ-CORE-010.4)") from None
        raise rpc_error(err, "the aborted Generate stream") from None
    finally:
        call.cancel()
    stream = Stream(responses, req)
    outs = list(stream.outputs.values())
    # Every output ends with a finished event of reason CANCELLED (REQ-CORE-010.4).
    if not outs or stream.error is not None or any(
            o.finished is None or o.finished.reason != generation_pb2.FINISH_REASON_CANCELLED for o in outs):
        if aborted.status == lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED and stream.error is None:
            raise Unchecked(f"the request ran all {req.stopping.max_tokens} tokens the model "
                            "allows before Abort reached it, so the abort could not be observed")
        raise Failed(f"Abort answered {lifecycle_pb2.AbortStatus.Name(aborted.status)} but the aborted "
                     f"stream {ending(responses[-1], stream.completion_tokens)}, not with a finished "
                     "event of FINISH_REASON_CANCELLED (REQ-CORE-010.4)")
    expect_no(stream.shape_problems(request_id=req.request_id))
    code = await call.code()
    expect(code == grpc.StatusCode.OK, f"the aborted stream ended with {status_name(code)}, not OK")
    expect(aborted.status == lifecycle_pb2.ABORT_STATUS_ABORTED,
           f"Abort ended the running request but answered "
           f"{lifecycle_pb2.AbortStatus.Name(aborted.status)}, not ABORT_STATUS_ABORTED")
    return f"aborted after {len(responses)} messages"


def _by_id(req):
    return lifecycle_pb2.AbortRequest(request_id=req.request_id)


@case("core.abort.by-id", profile=CORE,
      requires=("REQ-CORE-010.1", "REQ-CORE-010.4", "REQ-CORE-017.1", "REQ-SVC-002"),
      title="Abort by request id answers ABORTED and ends the running stream with a CANCELLED "
            "finished event carrying the usage, then OK")
async def abort_by_id(ctx: Context):
    ctx.require_decoding(observable=True)
    return await _abort_running(ctx, _by_id)


@case("core.abort.all", profile=CORE, requires=("REQ-CORE-010.3", "REQ-CORE-010.4", "REQ-SVC-002"),
      title="Abort(all_requests) ends every running stream")
async def abort_all(ctx: Context):
    ctx.require_decoding(observable=True)

    everything = lifecycle_pb2.AbortRequest(all_requests=lifecycle_pb2.AllRequests())
    return await _abort_running(ctx, lambda req: everything)


@case("core.abort.targets", profile=CORE,
      requires=("REQ-CORE-010.2", "REQ-CORE-010.5", "REQ-CORE-010.6", "REQ-CORE-010.8"),
      title="Abort answers ALREADY_FINISHED for a finished request, NOT_FOUND for an unknown "
            "request or KV session, INVALID_ARGUMENT without a target, and ends nothing then")
async def abort_targets(ctx: Context):
    finished = ctx.generate_request(max_tokens=2)
    await ctx.generate(finished)
    running = ctx.long_request(prompt="conformance keeps running")
    # A prefill engine holds no request for long: the Aborts are judged without one running.
    call = None if ctx.prefill else ctx.inference.Generate(running, timeout=ctx.options.case_timeout + 5)
    problems = []
    try:
        if call is not None:
            expect_running(await call.read(), running)
        forms = [
            ("an unknown request id", lifecycle_pb2.AbortRequest(request_id="conformance-no-such-request"),
             {grpc.StatusCode.NOT_FOUND}),
            ("a KV session no request belongs to", lifecycle_pb2.AbortRequest(
                kv_session=kv_pb2.KvSessionRef(session_id="conformance-no-such-session")),
             {grpc.StatusCode.NOT_FOUND}),
            ("no target", lifecycle_pb2.AbortRequest(), {grpc.StatusCode.INVALID_ARGUMENT}),
        ]
        for what, form, codes in forms:
            try:
                answer = await ctx.control.Abort(form)
                problems.append(f"Abort naming {what} answered "
                                f"{lifecycle_pb2.AbortStatus.Name(answer.status)}, not "
                                f"{'/'.join(c.name for c in codes)}")
            except grpc.aio.AioRpcError as err:
                if err.code() not in codes:
                    problems.append(f"Abort naming {what} failed with {status_name(err.code())}, "
                                    f"not {'/'.join(c.name for c in codes)}")
        try:
            again = await ctx.control.Abort(_by_id(finished))
            if again.status != lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED:
                problems.append(f"Abort naming a request that had just finished answered "
                                f"{lifecycle_pb2.AbortStatus.Name(again.status)}, not "
                                "ABORT_STATUS_ALREADY_FINISHED")
        except grpc.aio.AioRpcError as err:
            # It finished moments ago: an engine still remembers it.
            problems.append(f"Abort naming a request that had just finished failed with "
                            f"{status_name(err.code())}, not ABORT_STATUS_ALREADY_FINISHED: "
                            "aborting a finished request is not an error")
        own = await ctx.control.Abort(_by_id(running)) if call is not None else None
        # How the running request ended tells whether an Abort that did not target it ended it,
        # or it reached its end by itself while the Aborts were made.
        rest = await asyncio.wait_for(read_rest(call), ctx.options.rpc_timeout) \
            if own is not None and own.status != lifecycle_pb2.ABORT_STATUS_ABORTED else []
    except asyncio.TimeoutError:
        rest = []
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, "Abort") from None
    finally:
        if call is not None:
            call.cancel()
    expect_no(problems)
    if own is None:
        return "4 targets, no request running beside them (a prefill engine)"
    last = rest[-1] if rest else None
    if own.status == lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED and last is not None \
            and last.HasField("finished") and last.finished.reason != generation_pb2.FINISH_REASON_CANCELLED:
        raise Unchecked(f"the running request ended by itself (a finished event, reason "
                        f"{finish_reason_name(last.finished.reason)}) while the Aborts targeting other "
                        "requests were made, so none was seen leaving it running")
    expect(own.status == lifecycle_pb2.ABORT_STATUS_ABORTED,
           f"after Aborts targeting other requests, aborting the running request by its own id "
           f"answered {lifecycle_pb2.AbortStatus.Name(own.status)}: it had already been ended by "
           "an Abort that did not target it")
    return "4 targets"


async def _tokens_until(reader: Reader, count: int, timeout: float) -> tuple[int, object]:
    """Read a stream until it has carried `count` more tokens: (tokens read, the message that
    ended it or None while it runs)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    seen = 0
    while seen < count:
        msg = await reader.read(max(0.0, end - loop.time()))
        if msg is None:
            raise Failed(f"the witness request sent no token for {timeout:g} s")
        if msg is grpc.aio.EOF or msg.HasField("finished") or msg.HasField("error"):
            return seen, msg
        seen += len(msg.token.tokens) if msg.HasField("token") else 0
    return seen, None


def witness_end(msg, tokens: int, seen: int) -> str:
    """Why a witness request ended before the check, as it ended: never a guess."""
    why = ""
    if msg is not grpc.aio.EOF and msg.HasField("finished"):
        why = ("; the model's max_output_tokens is too small to observe a cancellation" if seen + 1 >= tokens
               else f", of the {tokens} it asked for with ignore_eos and min_tokens")
    return f"the witness request {ending(msg, seen)}{why}"


async def _freed_beside_witness(ctx: Context, witness: Reader, request, counted: int, tokens: int,
                                seen: int) -> str:
    """GetLoad counted fewer than the two requests. That shows the cancelled one freed only if it
    counted the witness, far from its end: the cancelled request started with it and goes at its
    pace, so, not stopped, it would have been counted too. The client may read the witness late,
    so the witness is aborted: the usage its stream ends with bounds how far it had got."""
    if counted < 1:
        raise Unchecked(f"GetLoad counted neither request after the client cancelled one: the witness "
                        f"had ended too (the client had read {seen} of its {tokens} tokens), so no "
                        "count showed the cancelled request freed while an identical one ran")
    try:
        await ctx.control.Abort(lifecycle_pb2.AbortRequest(request_id=request.request_id))
    except grpc.aio.AioRpcError as err:
        raise Unchecked(f"GetLoad counted one request after the client cancelled the other, but Abort of "
                        f"the witness failed with {err.code().name}, so how far it had got is not known") from None
    more, ended = await _tokens_until(witness, tokens + 1, ctx.options.case_timeout)
    usage = ended.usage if ended is not grpc.aio.EOF and ended.HasField("usage") else None
    if usage is None or usage.completion_tokens > tokens - max(2, tokens // 8):
        got = "no usage" if usage is None else f"{usage.completion_tokens} tokens"
        raise Unchecked(f"GetLoad counted one request after the client cancelled the other, but the "
                        f"witness, aborted then, {ending(ended, seen + more)} ({got} of {tokens}): it "
                        "was too near its end to show the cancelled request freed rather than ended")
    return (f"freed: GetLoad counted only the witness, which had made {usage.completion_tokens} of "
            f"its {tokens} tokens when aborted after")


@case("core.generate.client-cancel", profile=CORE, requires=("REQ-CORE-011.1",),
      title="a request the client cancels stops and is freed while an identical request started "
            "with it is still running")
async def client_cancel(ctx: Context):
    """Two identical long requests start together and the client cancels one; while the other (the
    witness) still runs, the cancelled one must be gone from GetLoad: the yardstick is the
    engine's own pace, not a clock."""
    ctx.require_decoding(observable=True)
    if int(ctx.limit(CORE, "max_running_requests")) < 2:
        raise Unchecked("max_running_requests is 1: no request can run beside the cancelled one "
                        "to show it would still be running")
    tokens = ctx.long_generation_tokens()
    info = await ctx.control.GetLoad()
    baseline = info.running_requests + info.queued_requests
    cancelled_req = ctx.long_request(prompt="conformance cancels this request")
    cancelled = ctx.inference.Generate(cancelled_req, timeout=ctx.options.case_timeout + 5)
    witness_req = ctx.long_request(prompt="conformance cancels this request")
    witness = Reader(ctx.inference.Generate(witness_req, timeout=ctx.options.case_timeout + 5))
    try:
        first = await cancelled.read()
        expect_running(first, cancelled_req)
        seen, ended = await _tokens_until(witness, 1, ctx.options.rpc_timeout)
        if ended is not None:
            raise (Failed if ended is not grpc.aio.EOF and ended.HasField("error") else Unchecked)(
                witness_end(ended, tokens, seen))
        info = await ctx.control.GetLoad()
        counted = info.running_requests + info.queued_requests - baseline
        if counted < 2:
            raise Failed(f"with both requests streaming GetLoad counted {counted} of them "
                         "(REQ-LOAD-001.2)")
        cancelled.cancel()
        # A grace of an eighth of the request, in the engine's own tokens, to notice the cancel.
        more, ended = await _tokens_until(witness, max(2, tokens // 8), ctx.options.case_timeout)
        seen += more
        limit = tokens // 2
        while ended is None:
            info = await ctx.control.GetLoad()
            counted = info.running_requests + info.queued_requests - baseline
            if counted < 2:
                return await _freed_beside_witness(ctx, witness, witness_req, counted, tokens, seen)
            if seen >= limit:
                raise Failed(f"after the client cancelled the request, an identical request "
                             f"started with it streamed {seen} of {tokens} tokens and GetLoad "
                             "still counts it: the cancelled request was not stopped")
            more, ended = await _tokens_until(witness, max(1, tokens // 32), ctx.options.case_timeout)
            seen += more
        if ended is not grpc.aio.EOF and ended.HasField("error"):
            raise Failed(witness_end(ended, tokens, seen))
        raise Unchecked(witness_end(ended, tokens, seen))
    finally:
        cancelled.cancel()
        witness.cancel()


_register_profile_cases()


@case("core.discovery.stable", profile=CORE, requires=("REQ-REV-002",),
      title="within one revision, GetCapabilities, GetModelInfo and GetServerInfo answer the same")
async def discovery_stable(ctx: Context):
    known = ctx.require_capabilities()
    caps = await ctx.discovery_rpc.GetCapabilities()
    info = await ctx.control.GetServerInfo()
    if info.capability_revision != ctx.server_info.capability_revision:
        raise Unchecked("the revision changed between reads, so stability within one could not be seen")
    expect(caps == known, "GetCapabilities answered differently within one revision")
    before = ctx.server_info
    for name in ("engine_role", "parallelism", "capacity", "supported_models"):
        expect(getattr(info, name) == getattr(before, name),
               f"ServerInfo.{name} changed within one revision")
    for model, was in ctx.discovery.models.items():
        now = await ctx.control.GetModelInfo(model_pb2.GetModelInfoRequest(model=model))
        expect(now == was, f"GetModelInfo({model!r}) answered differently within one revision")


@case("core.revision.unchanged-by-state", profile=CORE, requires=("REQ-REV-004",),
      title="requests, load changes and pause/resume leave the capability revision unchanged")
async def revision_unchanged(ctx: Context):
    before = ctx.server_info.capability_revision
    await ctx.generate(ctx.generate_request(max_tokens=3))
    done = ["a request"]
    if ctx.can_admin():
        async with ctx.paused():
            mid = await ctx.control.GetServerInfo()
            expect(mid.capability_revision == before,
                   f"pausing changed the revision {before} -> {mid.capability_revision}")
        done.append("pause/resume")
    after = await ctx.control.GetServerInfo()
    expect(after.capability_revision == before,
           f"the revision changed {before} -> {after.capability_revision} after " + " and ".join(done))
    return "after " + " and ".join(done)


@case("core.services.names", profile=CORE, requires=("REQ-SVC-001",),
      title="RPCs are not served under short, mis-cased or other services' names")
async def service_names(ctx: Context):
    wrong = ["/Control/GetServerInfo", "/openengine.v1.control/GetServerInfo",
             "/openengine.v1.Inference/GetServerInfo", "/openengine.Control/GetServerInfo",
             "/openengine.v1.Discovery/GetServerInfo"]
    answered = []
    for path in wrong:
        multi = ctx.channel.unary_unary(
            path, request_serializer=server_pb2.GetServerInfoRequest.SerializeToString,
            response_deserializer=server_pb2.ServerInfo.FromString)
        call = multi(server_pb2.GetServerInfoRequest(), timeout=ctx.options.rpc_timeout)
        answered.append(await refusal(call, (grpc.StatusCode.UNIMPLEMENTED,), path))
    answered = [a for a in answered if a]
    expect(not answered, "served under a wrong name: " + "; ".join(answered))


@case("core.generate.not-found", profile=CORE, requires=("REQ-SVC-003",),
      title="a request naming an unknown model (adapter, session) fails NOT_FOUND before any message")
async def generate_not_found(ctx: Context):
    tries = [("model", lambda r: setattr(r, "model", "conformance-no-such-model"))]
    if ctx.advertised("openengine.adapters"):
        tries.append(("adapter", lambda r: setattr(r, "lora_name", "conformance-no-such-adapter")))
    if ctx.advertised("openengine.sessions"):
        tries.append(("session", lambda r: setattr(r, "session_id", "conformance-no-such-session")))
    problems = []
    for what, change in tries:
        req = ctx.generate_request(max_tokens=1)
        change(req)
        problems.append(await refusal(ctx.generate(req), (grpc.StatusCode.NOT_FOUND,), f"an unknown {what}"))
    expect_no(problems)


# Stop conditions
STOP_PROBE_TOKENS = 24


async def _stop_runs(ctx: Context, choose, apply) -> tuple[object, list[int], str, object]:
    """Run a greedy request that ignores EOS, choose a stop condition from its output with
    `choose(ids, text)`, run it again with `apply(request, stop)`: (stop, ids, text, finished)
    of the second run. Greedy and seeded, so the second run follows the first up to the stop."""
    tokens = min(STOP_PROBE_TOKENS, ctx.long_generation_tokens())

    def request():
        return ctx.generate_request(max_tokens=tokens, prompt="conformance stops here",
                                    ignore_eos=True, temperature=0.0, seed=7)

    first = Stream(await ctx.generate(request()))
    _expect_success(first, f"a greedy {tokens}-token request")
    ids, text = first.output(0).token_ids, first.output(0).text
    stop = choose(ids, text)
    if stop is None:
        raise Unchecked(f"the {len(ids)} tokens of a greedy request offered no stop condition "
                        "that first occurs after its first tokens")
    again = request()
    apply(again, stop)
    second = Stream(await ctx.generate(again), again)
    _expect_success(second, "the same request with a stop condition")
    out = second.output(0)
    expect(out.finished is not None, "the stream carried no finished event for output 0: each output "
                                     "ends with one")
    return stop, out.token_ids, out.text, out.finished


def _first_new(items, start: int):
    """Index of the first item at or after `start` that does not occur before it, or None."""
    for k in range(start, len(items)):
        if items[k] not in items[:k]:
            return k
    return None


def _choose_stop_string(text: str):
    if not text:
        raise Unchecked("a greedy request's output carried no text, so no stop string could be "
                        "chosen from it")
    pairs = [text[k:k + 2] for k in range(len(text) - 1)]
    k = _first_new(pairs, 2)
    return None if k is None or not pairs[k].strip() else pairs[k]


def _reached(final, stop: str) -> None:
    """A second greedy run that did not stop never reached `stop`: it differed from the first."""
    if final.reason != generation_pb2.FINISH_REASON_STOP:
        raise Unchecked(f"the second greedy run never reached {stop} (it differed from the first), so "
                        "stopping on it could not be observed")


def _expect_stop_match(final, match: str, stop, shown: str) -> None:
    expect(final.stop_match.WhichOneof("match") == match and getattr(final.stop_match, match) == stop,
           f"the output stopped on {shown} but stop_match is "
           f"{final.stop_match.WhichOneof('match') or 'unset'} (REQ-CORE-018)")


@case("core.generate.stop-token-ids", profile=CORE,
      requires=("REQ-CORE-013.1", "REQ-CORE-018", "REQ-CORE-006"),
      title="an output ends with FINISH_REASON_STOP at the first token given as a stop_token_id, "
            "ignore_eos notwithstanding, names it in stop_match, and sends nothing after it")
async def stop_token_ids(ctx: Context):
    ctx.require_decoding()

    def choose(ids, _text):
        k = _first_new(ids, 2)
        return None if k is None else ids[k]

    stop, ids, _, final = await _stop_runs(
        ctx, choose, lambda r, t: r.stopping.conditions.add(stop_token_id=t))
    if stop in ids:
        at = ids.index(stop)
        expect(at == len(ids) - 1, f"stop token {stop} was generated at position {at} and "
                                   f"{len(ids) - 1 - at} more tokens followed (finish reason "
                                   f"{finish_reason_name(final.reason)}): the output must "
                                   "end at the stop token")
        expect(final.reason == generation_pb2.FINISH_REASON_STOP,
               f"the output ended at stop token {stop} with finish reason "
               f"{finish_reason_name(final.reason)}, not FINISH_REASON_STOP")
    _reached(final, f"stop token {stop}")
    _expect_stop_match(final, "stop_token_id", stop, f"stop token {stop}")
    return f"stopped at token {stop} after {len(ids)} tokens"


@case("core.generate.stop-strings", profile=CORE,
      requires=("REQ-CORE-013.2", "REQ-CORE-013.3", "REQ-CORE-018", "REQ-CORE-006"),
      title="an output ends with FINISH_REASON_STOP when its text reaches a stop_text condition, "
            "names it in stop_match, and the string is left out of the output")
async def stop_strings(ctx: Context):
    ctx.require_decoding()
    stop, ids, text, final = await _stop_runs(
        ctx, lambda _ids, text: _choose_stop_string(text),
        lambda r, s: r.stopping.conditions.add(stop_text=s))
    at = text.find(stop)
    expect(at < 0, f"stop string {stop!r} appears in the output text at character {at} and "
                   f"{len(text) - at - len(stop)} characters follow it (finish reason "
                   f"{finish_reason_name(final.reason)}): the output must end there, "
                   "and without include_stop_in_output the string is left out")
    _reached(final, f"stop string {stop!r}")
    _expect_stop_match(final, "stop_text", stop, f"stop string {stop!r}")
    return f"stopped at {stop!r} after {len(ids)} tokens"


@case("core.generate.min-tokens", profile=CORE, requires=("REQ-CORE-019.2", "REQ-CORE-006"),
      title="a stop condition the output reaches before min_tokens does not end it")
async def min_tokens(ctx: Context):
    ctx.require_decoding()
    def choose(ids, _text):
        k = _first_new(ids, 1)
        return None if k is None or k + 4 > len(ids) else (ids[k], k)

    def apply(r, stop):
        token, at = stop
        r.stopping.conditions.add(stop_token_id=token)
        r.stopping.min_tokens = at + 4

    (token, at), ids, _, final = await _stop_runs(ctx, choose, apply)
    floor = at + 4
    # A stop token that ended the output is generated though kept out of it (REQ-CORE-017.3).
    withheld = final.stop_match.WhichOneof("match") == "stop_token_id" and ids[-1:] != [token]
    made = len(ids) + withheld
    expect(made >= floor, f"with min_tokens {floor} and stop token {token} (generated at "
                              f"position {at}), the output ended after {made} tokens with "
                              f"{finish_reason_name(final.reason)}: nothing ends an output before "
                              "min_tokens")
    return f"stop token at {at} held back until {floor}"


# Long enough for a model whose EOS grows likelier with each position to end on its own.
EOS_PROBE_TOKENS = 256


def _ended_by_eos(stream: Stream) -> bool:
    out = stream.outputs.get(0)
    return (stream.error is None and out is not None and out.finished is not None
            and out.finished.stop_match.WhichOneof("match") == "eos_token_id")


@case("core.generate.ignore-eos", profile=CORE, requires=("REQ-CORE-019.3", "REQ-CORE-018", "REQ-CORE-006"),
      title="a greedy request whose output ends with the end-of-sequence token runs to max_tokens "
            "(FINISH_REASON_LENGTH) when sent again with ignore_eos")
async def ignore_eos(ctx: Context):
    ctx.require_decoding()

    info = ctx.discovery.models.get(ctx.model)
    eos = info.eos_token_id if info is not None and info.HasField("eos_token_id") else None
    tried = []
    # The witness may legitimately run long on a slow engine: give it half the case's time and
    # count a witness that did not end by then as one that could not show EOS, never a failure.
    budget = ctx.options.case_timeout / 2

    # Greedy requests that may make the model end its output with EOS, cheapest first: (what it
    # is, max_tokens, how it changes the request). A model left to run ends on its own sooner or
    # later (the prompt ends in "}", so a model counting on from its prompt's last character is
    # one step from the end of printable ASCII); a finished choice leaves it nothing but EOS.
    witnesses = [("a free-running request", min(EOS_PROBE_TOKENS, ctx.long_generation_tokens()),
                  lambda r: None)]
    modes = set(ctx.limit(CORE, "guided_decoding_modes") or ())
    if "choice" in modes or model_pb2.GUIDED_DECODING_MODE_CHOICE in modes:
        witnesses.insert(0, ("a guided choice", 16, lambda r: GUIDED_EXAMPLES["choice"](r.guided)))
    for what, tokens, change in witnesses:
        def request(ignore: bool, max_tokens: int):
            r = ctx.generate_request(max_tokens=max_tokens, prompt="conformance ends this }",
                                     ignore_eos=ignore, temperature=0.0, seed=11)
            change(r)
            return r
        first = request(False, tokens)
        started = asyncio.get_running_loop().time()
        try:
            witness = Stream(await ctx.generate(first, timeout=budget), first)
        except Failed as slow:
            if "had not ended after" not in str(slow):
                raise
            tried.append(f"{what} had not ended after {budget:g} s")
            continue
        took = asyncio.get_running_loop().time() - started
        _expect_success(witness, what)
        out = witness.output(0)
        if not _ended_by_eos(witness):
            how = finish_reason_name(out.finished.reason) if out.finished else "no finished event"
            tried.append(f"{what} ended with {how} after {len(out.tokens)} tokens")
            continue
        ended = len(out.tokens)
        expect(eos is None or out.finished.stop_match.eos_token_id == eos,
               f"{what} ended on end-of-sequence token {out.finished.stop_match.eos_token_id}, but "
               f"ModelInfo.eos_token_id is {eos} (REQ-CORE-018)")
        if ended >= tokens:
            tried.append(f"{what} ended with EOS only at max_tokens {tokens}")
            continue
        # A few tokens past where EOS came are enough to see it ignored, and keep the second
        # request about as long as the first, whatever the engine's speed.
        tokens = min(tokens, ended + 8)
        again = request(True, tokens)
        stream = Stream(await ctx.generate(again, timeout=ctx.options.rpc_timeout + 2 * took), again)
        _expect_success(stream, f"{what} with ignore_eos")
        expect_no(stream.shape_problems(request_id=again.request_id))
        out = stream.output(0)
        made, reason = len(out.tokens), finish_reason_name(out.finished.reason)
        expect(not _ended_by_eos(stream),
               f"{what} ended with EOS after {ended} tokens; sent again with ignore_eos it still "
               f"ended with EOS (stop_match.eos_token_id) after {made} tokens: ignore_eos is not "
               "honoured (REQ-CORE-019.3)")
        expect(made == tokens and out.finished.reason == generation_pb2.FINISH_REASON_LENGTH,
               f"{what} ended with EOS after {ended} tokens; sent again with ignore_eos it ended "
               f"after {made} of max_tokens {tokens} with {reason}, not FINISH_REASON_LENGTH at "
               "max_tokens (REQ-CORE-019.3)")
        return f"{what}: EOS after {ended} tokens, {made} with ignore_eos"
    raise Unchecked("no greedy request made the model end its output with the end-of-sequence "
                    f"token, so ignoring it could not be observed: {'; '.join(tried)}")


@case("core.generate.seed", profile=CORE, requires=("REQ-CORE-006",),
      title="requests with the same seed and sampling parameters generate the same tokens")
async def seed(ctx: Context):
    ctx.require_decoding()
    outputs = []
    for _ in range(3):
        request = ctx.generate_request(max_tokens=8, ignore_eos=True, prompt="conformance seeds this",
                                       temperature=1.0, seed=1234)
        stream = Stream(await ctx.generate(request), request)
        _expect_success(stream, "a seeded request")
        outputs.append(tuple(stream.output(0).token_ids))
    # Engines need not be bit-exact under concurrency; two of three alike shows the seed is used.
    expect(len(set(outputs)) < 3, f"three requests with seed 1234 and temperature 1.0 generated "
                                  f"three different outputs {[list(o) for o in outputs]}: "
                                  "sampling.seed is not honoured")
    return "same seed, same tokens"


# Limits of each model
@case("core.generate.model-limits", profile=CORE, requires=("REQ-CAP-009",),
      title="each served model refuses max_tokens above its own ModelInfo.max_output_tokens with "
            "INVALID_ARGUMENT and accepts a request within it")
async def model_limits(ctx: Context):
    problems, checked = [], []
    for model, info in ctx.discovery.models.items():
        if not info.max_output_tokens:
            continue
        over = info.max_output_tokens + 1
        req = ctx.generate_request(max_tokens=over)
        req.model = model
        problems.append(await refusal(ctx.generate(req), (grpc.StatusCode.INVALID_ARGUMENT,),
                                      f"model {model!r}: max_tokens {over} (its max_output_tokens is "
                                      f"{info.max_output_tokens})"))
        within = ctx.generate_request(max_tokens=1)
        within.model = model
        try:
            await ctx.generate(within)
        except grpc.aio.AioRpcError as err:
            problems.append(f"model {model!r}: max_tokens 1 failed with {status_name(err.code())}")
        checked.append(model)
    if not checked:
        raise Unchecked("no served model's ModelInfo sets max_output_tokens")
    expect_no(problems)
    return f"{len(checked)} model(s)"


# Load (Control/GetLoad) and health (Control/Health)
@case("core.load.back-to-idle", profile=CORE,
      requires=("REQ-LOAD-001.2", "REQ-LOAD-024.1", "REQ-LOAD-024.2"),
      title="GetLoad counts a running request, and once every stream has ended reports 0 running "
            "and 0 queued, with no negative figure")
async def back_to_idle(ctx: Context):
    busy = None
    if not ctx.prefill:     # a prefill engine holds no request long enough to be counted
        async with ctx.running("conformance counts this request"):
            busy = await ctx.control.GetLoad()
        expect(busy.running_requests + busy.queued_requests >= 1,
               "a request had streamed its first tokens, but GetLoad counted no running or "
               "queued request (REQ-LOAD-001.2)")
    await ctx.generate(ctx.generate_request(max_tokens=2))
    within = max(1.0, ctx.options.rpc_timeout)
    info, idle = await poll(ctx.control.GetLoad, lambda now: now.running_requests == 0 and now.queued_requests == 0,
                            within, 0.05)
    expect(idle, f"every Generate stream of the runner had ended, but GetLoad still counted "
                 f"{info.running_requests} running and {info.queued_requests} queued requests "
                 f"{within:g} s later: a request stops counting once its stream has ended")
    if busy is None:
        return "idle after (a prefill engine: no request counted while running)"
    cap = int(ctx.limit(CORE, "max_running_requests"))
    expect(busy.running_requests <= cap, f"GetLoad counted {busy.running_requests} running "
                                         f"requests, above max_running_requests {cap}")
    return "counted while running, idle after"


@case("core.control-health", profile=CORE, requires=("REQ-HEALTH-014",),
      title="Control/Health answers READY (or DEGRADED) while the engine serves")
async def control_health(ctx: Context):
    stream = Stream(await ctx.generate(ctx.generate_request(max_tokens=1)))
    if stream.error is not None:
        raise Unchecked(f"a 1-token request {stream.failure()[4:]}, so whether the engine serves "
                        "could not be seen")
    answer = await ctx.control.Health()
    expect(answer.state in (lifecycle_pb2.HEALTH_STATE_READY, lifecycle_pb2.HEALTH_STATE_DEGRADED),
           f"Control/Health answered {lifecycle_pb2.HealthState.Name(answer.state)} while the "
           "engine serves Generate")
    return lifecycle_pb2.HealthState.Name(answer.state)
