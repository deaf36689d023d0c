"""Core cases: discovery, the RPCs each advertised profile must serve (and each unadvertised one
must refuse), streaming generation, and cancellation."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Callable

import grpc

from openengine.conformance.cases.base import Failed, Skipped, Unchecked, case, expect
from openengine.conformance.context import Context, Reader, read_rest, rpc_error, status_name
from openengine.conformance.contract import CORE, RpcInfo, load_contract

# Probing these with a request would change the engine's state for the rest of the run; their
# own cases (admin.*) exercise them instead.
DISRUPTIVE_METHODS = {"Drain", "PauseGeneration", "Sleep"}
# How long a probe waits for a stream's first message or status when silence proves nothing
# either way (a served stream may stay quiet); where an answer must come, it waits the RPC deadline.
STREAM_PROBE_SECONDS = 0.5


def _probe_request(ctx: Context, rpc: RpcInfo):
    """A request that is valid where that is easy, and harmless whatever the engine does."""
    req = rpc.request()
    name = rpc.method.name
    if name == "Generate":
        return ctx.generate_request(max_tokens=1)
    if name == "GetModelInfo":
        req.model = ctx.model
    elif name == "Abort":
        req.request_ids.values.append("conformance-probe-no-such-request")
    elif name == "UpdateConfig":
        req.validate_only = True
    elif name == "Check" or name == "Watch":
        req.service = ""
    return req


async def _probe(ctx: Context, rpc: RpcInfo, *, metadata=None,
                 wait: float = STREAM_PROBE_SECONDS) -> tuple[grpc.StatusCode | None, object]:
    """Call one RPC; the status it ended with (None: a stream that stays open for `wait`
    seconds) and its answer."""
    call = ctx.raw_call(rpc, _probe_request(ctx, rpc), metadata=metadata)
    if not rpc.server_streaming:
        try:
            return grpc.StatusCode.OK, await call
        except grpc.aio.AioRpcError as err:
            return err.code(), None
    try:
        first = await asyncio.wait_for(call.read(), wait)
    except asyncio.TimeoutError:
        call.cancel()
        return None, None
    except grpc.aio.AioRpcError as err:
        return err.code(), None
    if first is grpc.aio.EOF:
        return await call.code(), None
    call.cancel()
    return None, first


async def _undo_probe(ctx: Context, rpc: RpcInfo, answer) -> None:
    """Release what a probe may have created (a session, an adapter)."""
    from openengine.v1 import adapters_pb2, sessions_pb2

    with contextlib.suppress(Exception):
        if rpc.method.name == "OpenSession" and answer is not None and answer.session.session_id:
            await ctx.sessions.CloseSession(
                sessions_pb2.CloseSessionRequest(session_id=answer.session.session_id))
        if rpc.method.name == "LoadAdapter" and answer is not None and answer.adapter.name:
            await ctx.adapters.UnloadAdapter(adapters_pb2.UnloadAdapterRequest(
                name=answer.adapter.name, model=answer.adapter.model))


def _served_case(profile: str):
    async def run(ctx: Context):
        advertised = {p.name: (p.major, p.minor) for p in ctx.capabilities.profiles}
        defined = ctx.contract.profiles[profile].version
        version = advertised.get(profile, defined)
        if version[0] != defined[0]:
            # The registry defines no RPC for another major: nothing to probe would pass vacuously.
            raise Failed(f"advertised {profile} {version[0]}.{version[1]}, but the registry defines "
                         f"only major {defined[0]}: advertise {profile} {defined[0]}.x "
                         "(REQ-CAP-004)")
        if profile == "openengine.admin" and not ctx.admin_on_main and not ctx.options.admin_elsewhere:
            ctx.admin()   # unchecked, with the hint to give --admin-target
        missing, checked = [], 0
        for rpc in ctx.contract.profiles[profile].rpcs:
            if rpc.since_version[0] != version[0] or rpc.since_version > version:
                continue
            if rpc.method.name in DISRUPTIVE_METHODS:
                continue
            md = None
            if rpc.service.endswith(".Admin") and ctx.options.admin_token:
                md = (("authorization", f"Bearer {ctx.options.admin_token}"),)
            code, answer = await _probe(ctx, rpc, metadata=md)
            await _undo_probe(ctx, rpc, answer)
            checked += 1
            if code == grpc.StatusCode.UNIMPLEMENTED:
                missing.append(rpc.full_name)
        expect(not missing, f"advertised {profile} {version[0]}.{version[1]} but "
                            f"{', '.join(missing)} answered UNIMPLEMENTED")
        if not checked:
            raise Unchecked(f"{profile} {version[0]}.{version[1]} has no RPC the runner may probe "
                            "without disrupting the engine")
        return f"{checked} RPCs answered"
    return run


def _absent_case(profile: str):
    async def run(ctx: Context):
        answered = []
        for rpc in ctx.contract.profiles[profile].rpcs:
            # Never with credentials: an unadvertised Admin must refuse before looking at them.
            # UNIMPLEMENTED must come, so a stream is given the whole deadline to say it.
            code, answer = await _probe(ctx, rpc, wait=ctx.options.rpc_timeout)
            await _undo_probe(ctx, rpc, answer)
            if code != grpc.StatusCode.UNIMPLEMENTED:
                shown = "kept the stream open" if code is None else f"answered {status_name(code)}"
                answered.append(f"{rpc.full_name} {shown}")
        expect(not answered, f"{profile} is not advertised, but " + "; ".join(answered))
        return f"{len(ctx.contract.profiles[profile].rpcs)} RPCs answered UNIMPLEMENTED"
    return run


def _register_profile_cases() -> None:
    for info in load_contract().profiles.values():
        case(f"{info.short_name}.rpcs.served", profile=info.name,
             requires=("REQ-CORE-001", "REQ-SVC-001") if info.name == CORE
             else ("REQ-CORE-002", "REQ-SVC-001"),
             title=f"every RPC of {info.name} up to the advertised version is served"
             )(_served_case(info.name))
        if info.name != CORE:
            case(f"{info.short_name}.absent.unimplemented", profile=info.name, when="absent",
                 requires=("REQ-CORE-003", "REQ-SVC-004"),
                 title=f"{info.name} is not advertised, so its RPCs answer UNIMPLEMENTED"
                 )(_absent_case(info.name))


# ------------------------------------------------------------------------------------------------
# Discovery

@case("core.discovery.answers", profile=CORE, requires=("REQ-CORE-001",),
      title="GetEngineInfo, GetCapabilities and GetModelInfo of every served model answer")
async def discovery_answers(ctx: Context):
    d = ctx.discovery
    expect(d.error is None, d.error or "")
    expect(bool(d.engine_info.served_models), "EngineInfo.served_models is empty")
    return f"{len(d.models)} model(s)"


@case("core.discovery.instance-id", profile=CORE, requires=("REQ-CORE-012", "REQ-REV-002"),
      title="EngineInfo has a role, and an instance_id that is set and stable across reads")
async def instance_id(ctx: Context):
    from openengine.v1 import discovery_pb2

    first = ctx.engine_info.instance_id
    expect(bool(first), "EngineInfo.instance_id is empty")
    expect(ctx.engine_info.role != 0, "EngineInfo.role is ROLE_UNSPECIFIED")
    again = await ctx.discovery_rpc.GetEngineInfo(discovery_pb2.GetEngineInfoRequest())
    expect(again.instance_id == first,
           f"EngineInfo.instance_id changed between reads: {first!r} then {again.instance_id!r}")


@case("core.capabilities.stable", profile=CORE, requires=("REQ-CORE-005",),
      title="the profile list does not change with load or health")
async def capabilities_stable(ctx: Context):
    from openengine.v1 import discovery_pb2

    def key(caps):
        return sorted((p.name, p.major, p.minor) for p in caps.profiles)

    before = key(ctx.capabilities)
    call = ctx.inference.Generate(ctx.long_request())
    try:
        first = await call.read()
        expect(first is not grpc.aio.EOF, "the long request ended before its first message")
        busy = key(await ctx.discovery_rpc.GetCapabilities(discovery_pb2.GetCapabilitiesRequest()))
        if first.HasField("final") or first.HasField("error"):
            raise Unchecked("the longest request the model allows ended at its first message, so "
                            "the engine could not be read while busy")
        expect(busy == before, f"profiles while a request runs {busy} != at start {before}")
    finally:
        call.cancel()
    if ctx.can_admin():
        async with ctx.paused():
            paused = key(await ctx.discovery_rpc.GetCapabilities(
                discovery_pb2.GetCapabilitiesRequest()))
        expect(paused == before, f"profiles while paused {paused} != at start {before}")
        return "checked while busy and while paused"
    return "checked while busy (pausing needs --admin-token)"


# ------------------------------------------------------------------------------------------------
# Generation

def _finals(responses) -> dict[int, object]:
    return {r.final.index: r.final for r in responses if r.WhichOneof("kind") == "final"}


@case("core.generate.stream", profile=CORE, requires=("REQ-CORE-009", "REQ-CORE-001"),
      title="Generate streams chunks, then one final with finish reason and usage, then OK")
async def generate_stream(ctx: Context):
    from openengine.v1 import generation_pb2

    responses = await ctx.generate(ctx.generate_request(max_tokens=6))
    kinds = [r.WhichOneof("kind") for r in responses]
    expect(kinds, "the stream ended without any message")
    if "error" in kinds:
        raise Failed(f"the stream carried an error: {responses[kinds.index('error')].error}")
    expect(kinds[-1] == "final", f"the last message is {kinds[-1]!r}, not the final response")
    expect(kinds.count("final") == 1, f"{kinds.count('final')} finals for one sequence")
    final = responses[-1].final
    expect(final.finish_reason != generation_pb2.FINISH_REASON_UNSPECIFIED,
           "GenerateFinal.finish_reason is not set")
    expect(final.HasField("usage"), "GenerateFinal.usage is not set")
    tokens = sum(len(r.chunk.token_ids) for r in responses if r.HasField("chunk")) + len(final.token_ids)
    expect(tokens <= 6, f"max_tokens 6 but {tokens} tokens were generated")
    expect(final.usage.completion_tokens == tokens,
           f"usage.completion_tokens {final.usage.completion_tokens} != {tokens} tokens streamed")


@case("core.generate.terminal", profile=CORE, requires=("REQ-CORE-009",),
      title="each of n sequences ends with exactly one final, and nothing follows the last")
async def generate_terminal(ctx: Context):
    n = max(1, min(2, int(ctx.limit(CORE, "max_sequences"))))
    responses = await ctx.generate(ctx.generate_request(max_tokens=4, n=n))
    kinds = [r.WhichOneof("kind") for r in responses]
    expect("error" not in kinds, "the stream carried an error")
    finals = [r.final.index for r in responses if r.HasField("final")]
    expect(sorted(finals) == list(range(n)), f"finals for indexes {finals}, expected 0..{n - 1}")
    last_final = max(i for i, k in enumerate(kinds) if k == "final")
    seen_final: set[int] = set()
    for r in responses:
        if r.HasField("final"):
            seen_final.add(r.final.index)
        elif r.HasField("chunk"):
            expect(r.chunk.index not in seen_final,
                   f"a chunk of sequence {r.chunk.index} followed its final")
    expect(last_final == len(kinds) - 1, "messages followed the last final")


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
    "json_object": lambda g: setattr(g, "json_object", True),
    "regex": lambda g: setattr(g, "regex", "[a-z]+"),
    "ebnf_grammar": lambda g: setattr(g, "ebnf_grammar", 'root ::= "yes" | "no"'),
    "structural_tag": lambda g: setattr(g, "structural_tag", '{"structures": [], "triggers": []}'),
    "choice": lambda g: g.choice.values.extend(["yes", "no"]),
}
# A request value for each switch the validators' request table ties to a field.
SWITCH_EXAMPLES: dict[str, Callable] = {
    "sampling.min_p": lambda r: setattr(r.sampling, "min_p", 0.1),
    "sampling.logit_bias": lambda r: r.sampling.logit_bias.__setitem__(1, 1.0),
    "sampling.prompt_logprobs": lambda r: setattr(r.sampling, "prompt_logprobs", 1),
    "|prompt": lambda r: r.token_ids.ids.extend([72, 105]),
}


def _guided_modes():
    """(oneof member, GuidedDecodingMode value) for every mode the contract defines."""
    from openengine.v1 import capabilities_pb2, generation_pb2

    oneof = generation_pb2.GuidedDecoding.DESCRIPTOR.oneofs_by_name["constraint"]
    enum = capabilities_pb2.GuidedDecodingMode
    return [(f.name, enum.Value(f"GUIDED_DECODING_MODE_{f.name.upper()}")) for f in oneof.fields]


def _set_path(request, path: str, value) -> None:
    *parents, name = path.split(".")
    msg = request
    for part in parents:
        msg = getattr(msg, part)
    setattr(msg, name, value)


def limit_probes(limit_of: Callable[[str], object]) -> list[LimitProbe]:
    """Every GenerateRequest probe of REQ-CAP-009 for the core limits, from the validators'
    request table (which field each limit bounds or switches) and the contract's guided modes:
    a request one above each numeric limit and one at it, each switch used when advertised off
    (and on), each guided mode not listed (and listed). Advisory limits (`ignored`) get none."""
    from openengine.validate._preflight import REQUEST_LIMITS

    probes: list[LimitProbe] = []
    for row in REQUEST_LIMITS:
        if row.request != "GenerateRequest" or row.profile != CORE or row.limit is None:
            continue
        name = f"{row.profile}.{row.limit}"
        value = limit_of(row.limit)
        if row.check == "at_most":
            field = row.field
            above = int(value) + 1

            def over(r, f=field, v=above):
                _set_path(r, f, v)
            probes.append(LimitProbe(name, f"{field}={above}", over, accept=False))
            if field != "sampling.prompt_logprobs":   # at the limit, it also needs its switch
                probes.append(LimitProbe(name, f"{field}={int(value)}",
                                         lambda r, f=field, v=int(value): _set_path(r, f, v),
                                         accept=True))
        elif row.check == "enabled":
            change = SWITCH_EXAMPLES.get(row.field)
            if change is None:
                raise KeyError(f"no example request value for {row.field} ({name})")
            shown = "a token-id prompt" if row.field == "|prompt" else f"{row.field} set"
            probes.append(LimitProbe(name, shown, change, accept=bool(value)))
        elif row.check == "member" and row.field == "sampling.guided|constraint":
            listed = set(value)   # enum numbers or their registry spellings, as the report gives them
            for member, mode in _guided_modes():
                def guided(r, m=member):
                    GUIDED_EXAMPLES[m](r.sampling.guided)
                probes.append(LimitProbe(name, f"guided {member}", guided,
                                         accept=mode in listed or member in listed))
    return probes


@case("core.generate.limits", profile=CORE, requires=("REQ-CAP-009", "REQ-SVC-003", "REQ-CORE-006"),
      title="each request beyond an advertised limit, or using a feature advertised off, is refused "
            "with INVALID_ARGUMENT; the same within the limits is accepted")
async def generate_limits(ctx: Context):
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
    expect(not problems, "; ".join(problems))
    return f"{len(probes)} probes"


def _shown_limit(value) -> str:
    if isinstance(value, bool):
        return "false" if not value else "true"
    if isinstance(value, list):
        from openengine.v1 import capabilities_pb2

        names = [capabilities_pb2.GuidedDecodingMode.Name(v) if isinstance(v, int) else str(v)
                 for v in value]
        return "[" + ", ".join(names) + "]"
    return str(value)


# ------------------------------------------------------------------------------------------------
# Cancellation

def _aborted(responses) -> bool:
    """The stream ended as REQ-SVC-002 says a failure after acceptance ends: one EngineError."""
    from openengine.v1 import common_pb2

    return bool(responses) and responses[-1].HasField("error") \
        and responses[-1].error.code == common_pb2.ERROR_CODE_ABORTED


async def _abort_running(ctx: Context, abort_request_for) -> str:
    """Start a long request, abort it once it streams, and check how its stream ends."""
    from openengine.v1 import lifecycle_pb2

    req = ctx.long_request()
    call = ctx.inference.Generate(req)
    responses = []
    try:
        first = await call.read()
        expect(first is not grpc.aio.EOF, "the stream ended before its first message")
        responses.append(first)
        aborted = await ctx.lifecycle.Abort(abort_request_for(req, lifecycle_pb2))
        responses.extend(await read_rest(call))
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, "the aborted Generate stream") from None
    finally:
        call.cancel()
    if not _aborted(responses):
        if aborted.aborted == 0 and responses[-1].HasField("final"):
            raise Unchecked(f"the request ran all {req.sampling.max_tokens} tokens the model allows "
                            "before Abort reached it, so the abort could not be observed")
        last = responses[-1]
        shown = (f"final with finish reason {finish_reason_name(last.final.finish_reason)}"
                 if last.HasField("final") else last.WhichOneof("kind"))
        raise Failed(f"Abort answered aborted={aborted.aborted} but the stream ended with "
                     f"{shown}, not a terminal EngineError with code ERROR_CODE_ABORTED")
    errors = [r for r in responses if r.HasField("error")]
    expect(len(errors) == 1, f"{len(errors)} EngineError messages on one stream")
    code = await call.code()
    expect(code == grpc.StatusCode.OK, f"the aborted stream ended with {status_name(code)}, not OK")
    expect(aborted.aborted >= 1, f"AbortResponse.aborted is {aborted.aborted}, expected >= 1")
    return f"aborted after {len(responses)} messages"


@case("core.abort.by-id", profile=CORE, requires=("REQ-CORE-010", "REQ-SVC-002"),
      title="Abort by request id ends the running stream with an aborted terminal message, then OK")
async def abort_by_id(ctx: Context):
    return await _abort_running(ctx, lambda req, pb: _by_id(req))


def _by_id(req):
    from openengine.v1 import common_pb2, lifecycle_pb2

    return lifecycle_pb2.AbortRequest(request_ids=common_pb2.StringList(values=[req.request_id]))


@case("core.abort.all", profile=CORE, requires=("REQ-CORE-010", "REQ-SVC-002"),
      title="Abort(all) ends every running stream")
async def abort_all(ctx: Context):
    return await _abort_running(ctx, lambda req, pb: pb.AbortRequest(all=True))


def finish_reason_name(value: int) -> str:
    from openengine.v1 import generation_pb2

    try:
        return generation_pb2.FinishReason.Name(value)
    except ValueError:
        return f"{value} (not a FinishReason)"


async def _tokens_until(reader: Reader, count: int, timeout: float) -> tuple[int, bool]:
    """Read a stream until it has carried `count` more tokens: (tokens read, whether it ended)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    seen = 0
    while seen < count:
        msg = await reader.read(max(0.0, end - loop.time()))
        if msg is None:
            raise Failed(f"the witness request sent no token for {timeout:g} s")
        if msg is grpc.aio.EOF or msg.HasField("final") or msg.HasField("error"):
            return seen, True
        seen += len(msg.chunk.token_ids) if msg.HasField("chunk") else 0
    return seen, False


@case("core.generate.client-cancel", profile=CORE, requires=("REQ-CORE-011",),
      title="a request the client cancels stops and is freed while an identical request started "
            "with it is still running")
async def client_cancel(ctx: Context):
    """Two identical long requests (ignore_eos, min_tokens = max_tokens) start together; the
    client cancels one. The other is the witness: while it still runs, the cancelled one would
    still be running had the engine ignored the cancellation, so it must already be gone from
    load (or, without load, unknown to Abort). No clock is involved: the engine's own pace,
    shown by the witness's tokens, is the yardstick."""
    from openengine.v1 import load_pb2

    if int(ctx.limit(CORE, "max_running_requests")) < 2:
        raise Unchecked("max_running_requests is 1: no request can run beside the cancelled one "
                        "to show it would still be running")
    tokens = ctx.long_generation_tokens()
    use_load = ctx.advertised("openengine.load")
    baseline = 0
    if use_load:
        info = await ctx.observability.GetLoad(load_pb2.GetLoadRequest())
        baseline = info.running_requests + info.queued_requests
    cancelled_req = ctx.long_request(prompt="conformance cancels this request")
    cancelled = ctx.inference.Generate(cancelled_req, timeout=ctx.options.case_timeout + 5)
    witness = Reader(ctx.inference.Generate(ctx.long_request(prompt="conformance cancels this request"),
                                            timeout=ctx.options.case_timeout + 5))
    try:
        first = await cancelled.read()
        expect(first is not grpc.aio.EOF, "the stream ended before its first message")
        _, done = await _tokens_until(witness, 1, ctx.options.rpc_timeout)
        if done or first.HasField("final"):
            raise Unchecked(f"a request of {tokens} tokens (the model's max_output_tokens) ended at "
                            "once, so cancelling one could not be observed")
        if use_load:
            # Freed is judged from the count, so first see both requests in it.
            info = await ctx.observability.GetLoad(load_pb2.GetLoadRequest())
            counted = info.running_requests + info.queued_requests - baseline
            if counted < 2:
                raise Unchecked(f"with both requests streaming GetLoad counted {counted} of them, so "
                                "whether the cancelled one was freed cannot be read from it")
        cancelled.cancel()
        # A grace of an eighth of the request, in the engine's own tokens, to notice the cancel.
        seen, done = await _tokens_until(witness, max(2, tokens // 8), ctx.options.case_timeout)
        limit = tokens // 2
        while not done:
            if use_load:
                info = await ctx.observability.GetLoad(load_pb2.GetLoadRequest())
                still = info.running_requests + info.queued_requests - baseline >= 2
            else:
                from openengine.v1 import lifecycle_pb2

                left = await ctx.lifecycle.Abort(_by_id(cancelled_req))
                still = left.aborted > 0
            if not still:
                return (f"freed within {seen} tokens of the witness" +
                        ("" if use_load else " (checked with Abort)"))
            if not use_load or seen >= limit:
                shown = "GetLoad still counts it" if use_load else "Abort still found it running"
                raise Failed(f"after the client cancelled the request, an identical request "
                             f"started with it streamed {seen} of {tokens} tokens and {shown}: "
                             "the cancelled request was not stopped")
            more, done = await _tokens_until(witness, max(1, tokens // 32), ctx.options.case_timeout)
            seen += more
        raise Unchecked(f"the witness request finished ({tokens} tokens) before the check; the "
                        "model's max_output_tokens is too small to observe a cancellation")
    finally:
        cancelled.cancel()
        witness.cancel()


_register_profile_cases()


@case("core.discovery.stable", profile=CORE, requires=("REQ-REV-002",),
      title="within one revision, GetCapabilities, GetModelInfo and GetEngineInfo answer the same")
async def discovery_stable(ctx: Context):
    from openengine.v1 import discovery_pb2

    caps = await ctx.discovery_rpc.GetCapabilities(discovery_pb2.GetCapabilitiesRequest())
    info = await ctx.discovery_rpc.GetEngineInfo(discovery_pb2.GetEngineInfoRequest())
    if info.capability_revision != ctx.engine_info.capability_revision:
        raise Unchecked("the revision changed between reads, so stability within one could not be seen")
    expect(caps == ctx.capabilities, "GetCapabilities answered differently within one revision")
    before = ctx.engine_info
    for name in ("role", "parallelism", "served_models"):
        expect(getattr(info, name) == getattr(before, name),
               f"EngineInfo.{name} changed within one revision")
    for model, was in ctx.discovery.models.items():
        now = await ctx.discovery_rpc.GetModelInfo(discovery_pb2.GetModelInfoRequest(model=model))
        expect(now == was, f"GetModelInfo({model!r}) answered differently within one revision")


@case("core.revision.unchanged-by-state", profile=CORE, requires=("REQ-REV-004",),
      title="requests, load changes and pause/resume leave the capability revision unchanged")
async def revision_unchanged(ctx: Context):
    from openengine.v1 import discovery_pb2

    before = ctx.engine_info.capability_revision
    await ctx.generate(ctx.generate_request(max_tokens=3))
    done = ["a request"]
    if ctx.can_admin():
        async with ctx.paused():
            mid = await ctx.discovery_rpc.GetEngineInfo(discovery_pb2.GetEngineInfoRequest())
            expect(mid.capability_revision == before,
                   f"pausing changed the revision {before} -> {mid.capability_revision}")
        done.append("pause/resume")
    after = await ctx.discovery_rpc.GetEngineInfo(discovery_pb2.GetEngineInfoRequest())
    expect(after.capability_revision == before,
           f"the revision changed {before} -> {after.capability_revision} after " + " and ".join(done))
    return "after " + " and ".join(done)


@case("core.services.names", profile=CORE, requires=("REQ-SVC-001",),
      title="RPCs are not served under short, mis-cased or other services' names")
async def service_names(ctx: Context):
    from openengine.v1 import discovery_pb2

    wrong = ["/Discovery/GetEngineInfo", "/openengine.v1.discovery/GetEngineInfo",
             "/openengine.v1.Inference/GetEngineInfo", "/openengine.Discovery/GetEngineInfo"]
    answered = []
    for path in wrong:
        multi = ctx.channel.unary_unary(
            path, request_serializer=discovery_pb2.GetEngineInfoRequest.SerializeToString,
            response_deserializer=discovery_pb2.EngineInfo.FromString)
        try:
            await multi(discovery_pb2.GetEngineInfoRequest(), timeout=ctx.options.rpc_timeout)
            answered.append(path)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                answered.append(f"{path} ({status_name(err.code())})")
    expect(not answered, "served under a wrong name: " + ", ".join(answered))


@case("core.generate.not-found", profile=CORE, requires=("REQ-SVC-003",),
      title="a request naming an unknown model (adapter, session) fails NOT_FOUND before any message")
async def generate_not_found(ctx: Context):
    tries = [("model", lambda r: setattr(r, "model", "conformance-no-such-model"))]
    if ctx.advertised("openengine.adapters"):
        tries.append(("adapter", lambda r: setattr(r, "adapter", "conformance-no-such-adapter")))
    if ctx.advertised("openengine.sessions"):
        tries.append(("session", lambda r: setattr(r, "session_id", "conformance-no-such-session")))
    problems = []
    for what, change in tries:
        req = ctx.generate_request(max_tokens=1)
        change(req)
        try:
            got = await ctx.generate(req)
            problems.append(f"an unknown {what} was served ({len(got)} messages)")
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.NOT_FOUND:
                problems.append(f"an unknown {what} failed with {status_name(err.code())}")
    expect(not problems, "; ".join(problems))


# ------------------------------------------------------------------------------------------------
# Stop conditions

STOP_PROBE_TOKENS = 24


def _sequence(responses, index: int = 0) -> tuple[list[int], str, object]:
    """The token ids, text and final of one output sequence of a finished stream."""
    ids, text, final = [], "", None
    for r in responses:
        part = r.chunk if r.HasField("chunk") else r.final if r.HasField("final") else None
        if part is None or part.index != index:
            continue
        ids += list(part.token_ids)
        text += part.text
        if r.HasField("final"):
            final = r.final
    return ids, text, final


async def _stop_runs(ctx: Context, choose, apply) -> tuple[object, list[int], str, object]:
    """Run a greedy request that ignores EOS, choose a stop condition from its output with
    `choose(ids, text)`, run it again with `apply(request, stop)`: (stop, ids, text, final) of
    the second run. Greedy and seeded, so the second run follows the first up to the stop."""
    tokens = min(STOP_PROBE_TOKENS, ctx.long_generation_tokens())

    def request():
        return ctx.generate_request(max_tokens=tokens, prompt="conformance stops here",
                                    ignore_eos=True, temperature=0.0, seed=7)

    ids, text, _ = _sequence(await ctx.generate(request()))
    stop = choose(ids, text)
    if stop is None:
        raise Unchecked(f"the {len(ids)} tokens of a greedy request offered no stop condition "
                        "that first occurs after its first tokens")
    again = request()
    apply(again, stop)
    return (stop, *_sequence(await ctx.generate(again)))


def _first_new(items, start: int):
    """Index of the first item at or after `start` that does not occur before it, or None."""
    for k in range(start, len(items)):
        if items[k] not in items[:k]:
            return k
    return None


@case("core.generate.stop-token-ids", profile=CORE, requires=("REQ-CORE-013", "REQ-CORE-006"),
      title="a sequence ends with FINISH_REASON_STOP at the first token listed in stop_token_ids, "
            "ignore_eos notwithstanding, and sends nothing after it")
async def stop_token_ids(ctx: Context):
    from openengine.v1 import generation_pb2

    def choose(ids, _text):
        k = _first_new(ids, 2)
        return None if k is None else ids[k]

    stop, ids, _, final = await _stop_runs(ctx, choose, lambda r, t: r.sampling.stop_token_ids.append(t))
    expect(final is not None, "the stream carried no final for sequence 0")
    if stop in ids:
        at = ids.index(stop)
        expect(at == len(ids) - 1, f"stop token {stop} was generated at position {at} and "
                                   f"{len(ids) - 1 - at} more tokens followed (finish reason "
                                   f"{finish_reason_name(final.finish_reason)}): the sequence must "
                                   "end at the stop token")
    elif final.finish_reason != generation_pb2.FINISH_REASON_STOP:
        raise Unchecked(f"the second greedy run never generated stop token {stop} (it differed "
                        "from the first), so stopping on it could not be observed")
    expect(final.finish_reason == generation_pb2.FINISH_REASON_STOP,
           f"the sequence ended at stop token {stop} with finish reason "
           f"{finish_reason_name(final.finish_reason)}, not FINISH_REASON_STOP")
    return f"stopped at token {stop} after {len(ids)} tokens"


@case("core.generate.stop-strings", profile=CORE, requires=("REQ-CORE-013", "REQ-CORE-006"),
      title="a sequence ends with FINISH_REASON_STOP when its text reaches a string listed in "
            "stop, and the string is left out of the output")
async def stop_strings(ctx: Context):
    from openengine.v1 import generation_pb2

    def choose(_ids, text):
        if not text:
            raise Unchecked("a greedy request's output carried no text, so no stop string could be "
                            "chosen from it")
        pairs = [text[k:k + 2] for k in range(len(text) - 1)]
        k = _first_new(pairs, 2)
        return None if k is None or not pairs[k].strip() else pairs[k]

    stop, ids, text, final = await _stop_runs(ctx, choose, lambda r, s: r.sampling.stop.append(s))
    expect(final is not None, "the stream carried no final for sequence 0")
    at = text.find(stop)
    expect(at < 0, f"stop string {stop!r} appears in the output text at character {at} and "
                   f"{len(text) - at - len(stop)} characters follow it (finish reason "
                   f"{finish_reason_name(final.finish_reason)}): the sequence must end there, "
                   "and without include_stop_in_output the string is left out")
    if final.finish_reason != generation_pb2.FINISH_REASON_STOP:
        raise Unchecked(f"the second greedy run never reached stop string {stop!r} (it differed "
                        "from the first), so stopping on it could not be observed")
    return f"stopped at {stop!r} after {len(ids)} tokens"


# ------------------------------------------------------------------------------------------------
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
        try:
            got = await ctx.generate(req)
            problems.append(f"model {model!r}: max_tokens {over} (its max_output_tokens is "
                            f"{info.max_output_tokens}) was accepted ({len(got)} messages), not "
                            "refused with INVALID_ARGUMENT")
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.INVALID_ARGUMENT:
                problems.append(f"model {model!r}: max_tokens {over} above its max_output_tokens "
                                f"failed with {status_name(err.code())}, not INVALID_ARGUMENT")
        within = ctx.generate_request(max_tokens=1)
        within.model = model
        try:
            await ctx.generate(within)
        except grpc.aio.AioRpcError as err:
            problems.append(f"model {model!r}: max_tokens 1 failed with {status_name(err.code())}")
        checked.append(model)
    if not checked:
        raise Unchecked("no served model's ModelInfo sets max_output_tokens")
    expect(not problems, "; ".join(problems))
    return f"{len(checked)} model(s)"


@case("core.abort.unknown", profile=CORE, requires=("REQ-CORE-010",),
      title="Abort naming only unknown or finished requests answers OK with aborted 0 and leaves "
            "a running request alone")
async def abort_unknown(ctx: Context):
    from openengine.v1 import common_pb2, lifecycle_pb2

    finished = ctx.generate_request(max_tokens=2)
    await ctx.generate(finished)
    running = ctx.long_request(prompt="conformance keeps running")
    call = ctx.inference.Generate(running, timeout=ctx.options.case_timeout + 5)
    try:
        first = await call.read()
        expect(first is not grpc.aio.EOF, "the long request ended before its first message")
        names = {"an unknown request id": "conformance-no-such-request",
                 "a finished request's id": finished.request_id}
        for what, name in names.items():
            try:
                answer = await ctx.lifecycle.Abort(lifecycle_pb2.AbortRequest(
                    request_ids=common_pb2.StringList(values=[name])))
            except grpc.aio.AioRpcError as err:
                raise Failed(f"Abort naming {what} failed with {status_name(err.code())}: naming a "
                             "request that is unknown or finished is not an error, it answers OK "
                             "with aborted 0") from None
            expect(answer.aborted == 0, f"Abort naming {what} answered aborted={answer.aborted}, "
                                        "expected 0")
        if first.HasField("final") or first.HasField("error"):
            raise Unchecked("the longest request the model allows ended at its first message, so "
                            "no request could be running beside the Aborts")
        # Still there to be aborted by its own id: the Aborts naming others left it alone.
        own = await ctx.lifecycle.Abort(_by_id(running))
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, "Abort") from None
    finally:
        call.cancel()
    expect(own.aborted == 1, f"after two Aborts naming other requests, aborting the running request "
                             f"by its own id answered aborted={own.aborted}: it had already been "
                             "ended by an Abort that did not name it")
    return "aborted 0 for both"
