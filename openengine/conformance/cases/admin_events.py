"""Cases of the control profiles: runtime events and admin, plus the disruptive ones that run last
(drain, graceful shutdown)."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from openengine.conformance.cases.base import Failed, Skipped, Unchecked, case, expect, expect_no
from openengine.conformance.context import (
    INFERENCE, Context, Reader, expect_refused, expect_running, read_rest, refusal, rpc_error, status_name,
)
from openengine.conformance.stream import error_code_name
from openengine.contract import CORE, catalogue
from openengine.v1 import admin_pb2, capabilities_pb2, error_pb2, events_pb2, load_pb2

EVENTS, ADMIN = "openengine.runtime-events", "openengine.admin"
S = health_pb2.HealthCheckResponse
# How long a stream must stay open without a status before it counts as accepted.
STREAM_OPEN_SECONDS = 0.2
FINISHED_FIRST = "finished before it could be ended"


class Events(Reader):
    """A SubscribeRuntimeEvents stream with bounded reads."""

    def __init__(self, ctx: Context, *, initial_state: bool):
        super().__init__(ctx.observability.SubscribeRuntimeEvents(
            events_pb2.SubscribeRuntimeEventsRequest(initial_state=initial_state),
            timeout=ctx.options.case_timeout + 5), "SubscribeRuntimeEvents")

    def check_order(self, ctx: Context) -> None:
        seqs = [m.sequence for m in self.received]
        for a, b in zip(seqs, seqs[1:]):
            expect(b == a + 1, f"runtime event sequence went {a} -> {b}")
        # Effective limits spell enum values as the registry does, which is also the event's
        # oneof field name (capability_revision_changed).
        allowed = set(ctx.limit(EVENTS, "event_kinds"))
        for m in self.received:
            kind = m.event.WhichOneof("kind") or ""
            expect(kind in allowed, f"a {kind or 'empty'} event, not in event_kinds")
        stamps = [(m.timestamp.seconds, m.timestamp.nanos) for m in self.received]
        expect(stamps == sorted(stamps), "runtime event timestamps went backwards")


def _state(ev) -> int | None:
    return ev.state_changed.state if ev.WhichOneof("kind") == "state_changed" else None


@case("events.initial-state", profile=EVENTS, requires=("REQ-EVENTS-002", "REQ-EVENTS-001",
                                                          "REQ-HEALTH-011"),
      title="initial_state sends a StateChanged first; SERVING exactly when Inference is")
async def events_initial(ctx: Context):
    ev = Events(ctx, initial_state=True)
    try:
        first = await ev.next(ctx.options.rpc_timeout)
    finally:
        ev.cancel()
    expect(first is not None, f"no event within {ctx.options.rpc_timeout:g} s with initial_state: "
                              "the current state is due first, at once")
    expect(first.sequence == 1, f"the first event has sequence {first.sequence}; sequences start at 1")
    state = _state(first.event)
    expect(state is not None, f"the first event is {first.event.WhichOneof('kind')!r}, not state_changed")
    serving = await ctx.check_health(INFERENCE) == S.SERVING
    expect((state == events_pb2.ENGINE_STATE_SERVING) == serving,
           f"state {events_pb2.EngineState.Name(state)} while Inference is "
           f"{'SERVING' if serving else 'NOT_SERVING'}")


@case("events.state-follows-health", profile=EVENTS, requires=("REQ-HEALTH-011", "REQ-EVENTS-001"),
      title="pausing emits StateChanged PAUSED and resuming SERVING, in step with health")
async def events_state(ctx: Context):
    ctx.admin()
    ev = Events(ctx, initial_state=True)
    try:
        await ev.next(ctx.options.rpc_timeout)
        async with ctx.paused():
            await ev.until(lambda m: _state(m.event) == events_pb2.ENGINE_STATE_PAUSED,
                           ctx.options.rpc_timeout, "StateChanged PAUSED event")
            status = await ctx.check_health(INFERENCE)
            expect(status != S.SERVING, "a PAUSED event while Inference is SERVING")
        await ev.until(lambda m: _state(m.event) == events_pb2.ENGINE_STATE_SERVING, ctx.options.rpc_timeout,
                       "StateChanged SERVING after resume event")
        ev.check_order(ctx)
    finally:
        ev.cancel()


# admin
@case("admin.unauthenticated", profile=ADMIN, requires=("REQ-ADMIN-002",),
      title="Admin without credentials (or with a wrong token) answers UNAUTHENTICATED and does nothing")
async def admin_unauthenticated(ctx: Context):
    ctx.admin()
    problems = []
    wrong = (("authorization", "Bearer conformance-wrong-token"),)
    tries = [("no credentials", ctx.admin_anonymous, ())]
    if ctx.options.admin_token:
        tries.append(("a wrong token", ctx.admin_anonymous, wrong))
        if ctx.options.admin_tls:
            # A trusted client certificate with no token, or a wrong one.
            tries += [("a client certificate but no token", ctx._admin, ()),
                      ("a client certificate and a wrong token", ctx._admin, wrong)]
    for method in ("ResumeGeneration", "ResetPrefixCache", "UpdateConfig", "WakeUp", "PauseGeneration"):
        request = admin_pb2.UpdateConfigRequest(validate_only=True) if method == "UpdateConfig" else None
        for label, stub, md in tries:
            ok = (grpc.StatusCode.UNAUTHENTICATED,) + ((grpc.StatusCode.PERMISSION_DENIED,) if md else ())
            if ctx.options.admin_tls and stub is ctx.admin_anonymous:
                # Mutual TLS may refuse a client without a certificate in the handshake, so that
                # nothing reaches Admin at all (REQ-ADMIN-002).
                ok += (grpc.StatusCode.UNAVAILABLE,)
            call = getattr(stub, method)(request, metadata=md)
            problems.append(await refusal(call, ok, f"{method} with {label}"))
    status = await ctx.check_health(INFERENCE)
    if status != S.SERVING:
        problems.append("Inference is no longer SERVING after unauthenticated admin calls")
        with contextlib.suppress(Exception):
            await ctx._admin.ResumeGeneration()
    expect_no(problems)
    return ", ".join(label for label, _, _ in tries)


@case("admin.pause-resume", profile=ADMIN, requires=("REQ-CORE-002", "REQ-HEALTH-007"),
      title="PauseGeneration makes Inference NOT_SERVING; ResumeGeneration restores it")
async def admin_pause(ctx: Context):
    admin = ctx.admin()
    await admin.PauseGeneration()
    try:
        expect(await ctx.wait_health(INFERENCE, S.NOT_SERVING),
               "Inference is still SERVING after PauseGeneration")
    finally:
        resumed = await admin.ResumeGeneration()
    expect(resumed.resumed, "ResumeGeneration answered resumed=false for a paused engine")
    expect(await ctx.wait_health(INFERENCE, S.SERVING), "Inference is not SERVING after resume")
    again = await admin.ResumeGeneration()
    expect(not again.resumed, "ResumeGeneration answered resumed=true for an engine not paused")


async def accepted_ending(reader: Reader, what: str, within: float, *,
                          may_finish: bool) -> tuple[str | None, str]:
    """How an accepted stream ended once the engine failed it (a shutdown, a pause): (its breach
    of REQ-SVC-002 or None, how it ended). A failure after acceptance is one last message carrying
    an EngineError with a code, then OK; a Generate stream that was done first may end with its
    finished event (FINISHED_FIRST)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    rest = []
    try:
        while (msg := await reader.read(end - loop.time())) is not grpc.aio.EOF:
            if msg is None:
                return f"{what} stayed open {within:g} s after that", "still open"
            rest.append(msg)
    except grpc.aio.AioRpcError as err:
        return (f"{what} was accepted, but ended with status {status_name(err.code())} "
                f"({err.details()!r}) instead of a last message carrying an EngineError, then OK "
                "(REQ-SVC-002)"), f"status {status_name(err.code())}"
    kinds = [m.WhichOneof("event") for m in rest]
    if "error" not in kinds:
        if may_finish and kinds and kinds[-1] in ("finished", "prefill_ready"):
            return None, FINISHED_FIRST
        return (f"{what} ended with OK after {len(rest)} more message(s), none carrying an "
                "EngineError: a failed stream says why (REQ-SVC-002)"), "OK without an error"
    error = rest[kinds.index("error")].error
    if kinds.count("error") > 1 or kinds[-1] != "error":
        return (f"{what} sent {kinds.count('error')} EngineError message(s), and {len(rest)} "
                "message(s) in all: the error is exactly one message, the last (REQ-SVC-002)"), "error not last"
    if error.code == error_pb2.ERROR_CODE_UNSPECIFIED:
        return (f"{what} ended with an EngineError of code ERROR_CODE_UNSPECIFIED: a failure "
                "names its code (REQ-SVC-002)"), "EngineError without a code"
    return None, f"EngineError {error_code_name(error.code)}, then OK"


@case("admin.pause-abort", profile=ADMIN, requires=("REQ-SVC-002",),
      title="PauseGeneration in abort mode ends a running Generate stream with one last EngineError "
            "message, then OK, never a failed status")
async def admin_pause_abort(ctx: Context):
    admin = ctx.admin()
    ctx.require_decoding(observable=True)
    modes = set(ctx.limit(ADMIN, "pause_modes") or ())
    if not modes & {"abort", capabilities_pb2.PAUSE_MODE_ABORT}:
        raise Skipped(f"{ADMIN}.pause_modes does not offer abort")
    request = ctx.long_request(prompt="conformance runs into a pause")
    reader = Reader(ctx.inference.Generate(request, timeout=ctx.options.case_timeout))
    try:
        try:
            first = await reader.read(ctx.options.rpc_timeout)
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, "a long Generate request") from None
        if first is None:
            raise Failed(f"a long Generate request sent nothing for {ctx.options.rpc_timeout:g} s "
                         "on an idle engine")
        expect_running(first, request)
        await admin.PauseGeneration(admin_pb2.PauseGenerationRequest(mode=capabilities_pb2.PAUSE_MODE_ABORT))
        try:
            problem, ending = await accepted_ending(reader, "a Generate stream running when generation "
                                                    "was paused with mode abort", ctx.options.rpc_timeout,
                                                    may_finish=True)
        finally:
            await admin.ResumeGeneration()
            await ctx.wait_health(INFERENCE, S.SERVING)
    finally:
        reader.cancel()
    expect(problem is None, problem or "")
    if ending == FINISHED_FIRST:
        raise Unchecked(f"the request ran all {request.stopping.max_tokens} tokens the model allows "
                        "before the pause could end it, so how a failed stream ends was not observed")
    return ending


@case("admin.sleep-wake", profile=ADMIN, requires=("REQ-CORE-002", "REQ-HEALTH-007"),
      title="Sleep makes Inference NOT_SERVING; WakeUp makes it SERVING again")
async def admin_sleep(ctx: Context):
    admin = ctx.admin()
    await admin.Sleep(admin_pb2.SleepRequest(level=1))
    try:
        expect(await ctx.wait_health(INFERENCE, S.NOT_SERVING),
               "Inference is still SERVING while asleep")
    finally:
        woke = await admin.WakeUp()
    expect(woke.awake, "WakeUp answered awake=false after waking everything")
    expect(await ctx.wait_health(INFERENCE, S.SERVING), "Inference is not SERVING after WakeUp")


@case("admin.reset-prefix-cache", profile=ADMIN, requires=("REQ-CORE-002",),
      title="ResetPrefixCache answers on an idle engine")
async def admin_reset(ctx: Context):
    resp = await ctx.admin().ResetPrefixCache()
    expect(resp.reset, "ResetPrefixCache answered reset=false on an idle engine")


async def _watchload_ending(call, code: grpc.StatusCode, within: float, when: str) -> str | None:
    """Why an open WatchLoad stream did not end with `code` within `within` seconds, or None."""
    try:
        await asyncio.wait_for(read_rest(call), within)
        return f"an open WatchLoad stream ended with OK {when}"
    except grpc.aio.AioRpcError as err:
        return None if err.code() == code else \
            f"an open WatchLoad stream ended with {status_name(err.code())} {when}, not {code.name}"
    except asyncio.TimeoutError:
        return f"an open WatchLoad stream stayed open {when}"
    finally:
        call.cancel()


def _limit_update(ctx: Context):
    """An UpdateConfig change of one updatable scalar limit, and the one that undoes it."""
    for ref in ctx.limit(ADMIN, "updatable_limits"):
        profile, _, name = ref.rpartition(".")
        lim = catalogue().limit(ref)
        if lim is None or lim.repeated or not ctx.advertised(profile):
            continue
        current = ctx.limit(profile, name)
        if isinstance(current, bool):
            return ref, (admin_pb2.LimitUpdate(limit=ref, bool_value=not current),
                         admin_pb2.LimitUpdate(limit=ref, bool_value=current))
        if isinstance(current, (int, float)):
            new = int(current) + 1
            if lim.maximum is not None and new > lim.maximum:
                new = int(current) - 1
            if lim.minimum is not None and new < lim.minimum:
                continue
            return ref, (admin_pb2.LimitUpdate(limit=ref, uint_value=new),
                         admin_pb2.LimitUpdate(limit=ref, uint_value=int(current)))
    raise Skipped("AdminCapabilities.updatable_limits names no scalar limit of an advertised profile")


@case("admin.update-config", profile=ADMIN,
      requires=("REQ-REV-001", "REQ-REV-003", "REQ-REV-005", "REQ-REV-006", "REQ-REV-007",
                "REQ-LOAD-019"),
      title="UpdateConfig raises the capability revision everywhere, emits the event and ends "
            "open WatchLoad streams with ABORTED")
async def admin_update(ctx: Context):
    admin = ctx.admin()
    ref, (change, undo) = _limit_update(ctx)
    before = ctx.server_info.capability_revision
    events = Events(ctx, initial_state=False) if ctx.advertised(EVENTS) else None
    watch = None
    if ctx.advertised("openengine.load"):
        watch = ctx.observability.WatchLoad(load_pb2.WatchLoadRequest(heartbeat_ms=0),
                                            timeout=ctx.options.case_timeout)
        await watch.read()
    # A request that cannot end early on an EOS token, so that it can be running at the change.
    tokens = min(40, ctx.long_generation_tokens())
    running = ctx.inference.Generate(ctx.generate_request(max_tokens=tokens, min_tokens=tokens, ignore_eos=True))
    await running.read()
    try:
        if events:
            await asyncio.sleep(0.05)  # let the subscription register before the change
        resp = await admin.UpdateConfig(admin_pb2.UpdateConfigRequest(updates=[change]))
        expect(resp.previous_revision == before,
               f"UpdateConfig previous_revision {resp.previous_revision}, ServerInfo said {before}")
        expect(resp.revision > before, f"revision {resp.revision} after changing {ref}, was {before}")
        info = await ctx.control.GetServerInfo()
        expect(info.capability_revision == resp.revision,
               f"ServerInfo.capability_revision {info.capability_revision} != {resp.revision}")
        caps = await ctx.discovery_rpc.GetCapabilities()
        expect(caps.revision == resp.revision, f"Capabilities.revision {caps.revision} != {resp.revision}")
        if events:
            ev = await events.until(lambda m: m.event.WhichOneof("kind") == "capability_revision_changed",
                                    ctx.options.rpc_timeout, "CapabilityRevisionChanged event")
            seen = await ctx.discovery_rpc.GetCapabilities()
            crc = ev.event.capability_revision_changed
            expect((crc.previous_revision, crc.revision) == (before, resp.revision),
                   f"CapabilityRevisionChanged {crc.previous_revision} -> {crc.revision}, "
                   f"expected {before} -> {resp.revision}")
            expect(seen.revision >= crc.revision, "right after CapabilityRevisionChanged, "
                   f"GetCapabilities still answers revision {seen.revision}")
        if watch is not None:
            problem = await _watchload_ending(watch, grpc.StatusCode.ABORTED, 2.0,
                                              "after the revision changed")
            expect(problem is None, problem or "")
            reopened = ctx.observability.WatchLoad(load_pb2.WatchLoadRequest(heartbeat_ms=0))
            try:
                first = await asyncio.wait_for(reopened.read(), ctx.options.rpc_timeout)
            finally:
                reopened.cancel()
            expect(first is not grpc.aio.EOF and first.settings.capability_revision == resp.revision,
                   "a WatchLoad stream opened after the change does not report the new revision")
        try:
            rest = await read_rest(running)
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, "a request running across the revision change") from None

        last = rest[-1] if rest else None
        expect(last is not None and (last.HasField("finished") or (
            last.HasField("error") and last.error.code == error_pb2.ERROR_CODE_CANCELLED
            and last.error.retryable)),
            "a request running across the revision change neither completed nor ended with a "
            "retryable ERROR_CODE_CANCELLED")
    finally:
        running.cancel()
        if events:
            events.cancel()
        if watch is not None:
            watch.cancel()
        with contextlib.suppress(Exception):
            await admin.UpdateConfig(admin_pb2.UpdateConfigRequest(updates=[undo]))
        await ctx.discover()
    return f"changed {ref}, revision {before} -> {resp.revision}"


@case("admin.drain", profile=ADMIN, requires=("REQ-CORE-002", "REQ-HEALTH-007", "REQ-HEALTH-008",
                                              "REQ-HEALTH-009"),
      title="Drain reports progress until done; then Inference is NOT_SERVING and refuses work, "
            "discovery still answers", disruptive=True)
async def admin_drain(ctx: Context):
    admin = ctx.admin()
    if not (ctx.options.destructive or ctx.options.shutdown_command):
        raise Unchecked("Drain leaves the engine unable to serve: it runs only with --destructive "
                        "or --shutdown-command")
    call = admin.Drain(admin_pb2.DrainRequest(deadline_ms=1000), timeout=ctx.options.case_timeout)
    last = None
    try:
        async for msg in call:
            last = msg
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, "Drain") from None
    expect(last is not None and last.done, "the Drain stream ended without a message with done set")
    expect(await ctx.wait_health(INFERENCE, S.NOT_SERVING), "Inference is SERVING after a drain")
    expect(await ctx.check_health("openengine.v1.Discovery") == S.SERVING,
           "Discovery is not SERVING after a drain")
    await ctx.control.GetServerInfo()
    await expect_refused(ctx.generate(ctx.generate_request(max_tokens=1)), (grpc.StatusCode.UNAVAILABLE,),
                         "Generate after a drain")


# graceful shutdown
@case("core.shutdown.graceful", profile=CORE, requires=("REQ-HEALTH-010", "REQ-LOAD-019", "REQ-SVC-002"),
      title="on graceful shutdown health turns NOT_SERVING on open Watch streams before they end, "
            "WatchLoad streams end UNAVAILABLE, and a running Generate stream (and a KV "
            "subscription) ends with an EngineError then OK, never a failed status",
      disruptive=True)
async def shutdown(ctx: Context):
    command = ctx.options.shutdown_command
    if not command:
        raise Unchecked("the runner cannot stop this engine (give --shutdown-command)")

    watches = {name: ctx.health.Watch(health_pb2.HealthCheckRequest(service=name),
                                      timeout=ctx.options.case_timeout) for name in ("", INFERENCE)}
    first = {name: await call.read() for name, call in watches.items()}
    load = None
    if ctx.advertised("openengine.load"):
        load = ctx.observability.WatchLoad(load_pb2.WatchLoadRequest(heartbeat_ms=0),
                                           timeout=ctx.options.case_timeout)
        await load.read()
    # Accepted streams the shutdown must fail as REQ-SVC-002 says: a request still generating,
    # and a KV subscription (open for a moment without a status, so accepted).
    accepted: list[tuple[str, str, Reader, bool]] = []
    endings = []
    if not ctx.prefill:
        request = ctx.long_request(prompt="conformance runs into the shutdown")
        reader = Reader(ctx.inference.Generate(request, timeout=ctx.options.case_timeout))
        try:
            first_message = await reader.read(ctx.options.rpc_timeout)
        except grpc.aio.AioRpcError as err:
            # A drain run before this case leaves Inference refusing work: nothing to fail then.
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise rpc_error(err, "a long Generate request") from None
            endings.append("Generate: refused UNAVAILABLE before the shutdown (not taking work), "
                           "so no running request was there to fail")
        else:
            if first_message is None:
                raise Failed(f"a long Generate request sent nothing for {ctx.options.rpc_timeout:g} s "
                             "on an idle engine")
            expect_running(first_message, request)
            accepted.append(("Generate", "a Generate stream running when the shutdown began", reader, True))
    if ctx.advertised("openengine.kv"):
        reader = Reader(ctx.control.SubscribeKvEvents(timeout=ctx.options.case_timeout), "SubscribeKvEvents")
        early = await reader.next(STREAM_OPEN_SECONDS)
        if early is not None and early.HasField("error"):
            raise Failed(f"SubscribeKvEvents ended with an EngineError before any shutdown: "
                         f"{early.error.message!r}")
        accepted.append(("SubscribeKvEvents", "a SubscribeKvEvents stream open when the shutdown began",
                         reader, False))
    proc = await asyncio.create_subprocess_shell(command)
    await asyncio.wait_for(proc.wait(), ctx.options.rpc_timeout)
    problems = []
    for name, call in watches.items():
        statuses = [first[name].status] if first[name] is not grpc.aio.EOF else []
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.TimeoutError):
            async def read_all():
                while (msg := await call.read()) is not grpc.aio.EOF:
                    statuses.append(msg.status)
            await asyncio.wait_for(read_all(), ctx.options.rpc_timeout)
        call.cancel()
        if S.NOT_SERVING not in statuses:
            problems.append(f"Watch({name!r}) ended without NOT_SERVING (got "
                            f"{[S.ServingStatus.Name(s) for s in statuses]})")
        elif S.SERVING in statuses[statuses.index(S.NOT_SERVING):]:
            problems.append(f"Watch({name!r}) reported SERVING after NOT_SERVING")
    if load is not None:
        problems.append(await _watchload_ending(load, grpc.StatusCode.UNAVAILABLE, ctx.options.rpc_timeout,
                                                "after the shutdown began"))
    for label, what, reader, may_finish in accepted:
        try:
            problem, ending = await accepted_ending(reader, what, ctx.options.rpc_timeout,
                                                    may_finish=may_finish)
        finally:
            reader.cancel()
        problems.append(problem)
        endings.append(f"{label}: {ending}")
    expect_no(problems)
    return "; ".join(endings) or None


@case("admin.own-address-health", profile=ADMIN, requires=("REQ-ADMIN-001",),
      title="an admin address of its own serves health for Admin, and \"\" with Admin's status")
async def admin_own_address(ctx: Context):
    if not ctx.options.admin_elsewhere:
        if ctx.admin_on_main:
            raise Skipped("Admin is served on the main address (give --admin-target when it also "
                          "has an address of its own)")
        raise Unchecked("Admin answers UNIMPLEMENTED on the main address, so it has an address of "
                        "its own: give it with --admin-target HOST:PORT")
    target = ctx.options.admin_target
    ch = ctx.new_channel(admin=True)
    try:
        stub = health_pb2_grpc.HealthStub(ch)
        admin = await stub.Check(health_pb2.HealthCheckRequest(service="openengine.v1.Admin"),
                                 timeout=ctx.options.rpc_timeout)
        overall = await stub.Check(health_pb2.HealthCheckRequest(service=""),
                                   timeout=ctx.options.rpc_timeout)
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, f"Health/Check on the admin address {target}") from None
    finally:
        await ch.close()
    expect(overall.status == admin.status,
           f'on the admin address Check("") is {S.ServingStatus.Name(overall.status)}, Admin is '
           f"{S.ServingStatus.Name(admin.status)}")


@case("admin.permission-denied", profile=ADMIN, requires=("REQ-ADMIN-003",),
      title="valid credentials without the permission get PERMISSION_DENIED and change nothing")
async def admin_permission(ctx: Context):
    ctx.admin()
    token = ctx.options.admin_limited_token
    if not token:
        raise Unchecked("no token without admin permissions given (--admin-limited-token)")
    md = (("authorization", f"Bearer {token}"),)
    await expect_refused(ctx.admin_anonymous.PauseGeneration(metadata=md),
                         (grpc.StatusCode.PERMISSION_DENIED,),
                         "PauseGeneration with a token lacking the permission")
    expect(await ctx.check_health(INFERENCE) == S.SERVING, "Inference stopped serving")


@case("admin.guard-isolated", profile=ADMIN, requires=("REQ-ADMIN-004",),
      title="without admin credentials (or with a wrong one) discovery, inference and health answer")
async def admin_guard_isolated(ctx: Context):
    for label, md in (("no credentials", None),
                      ("a wrong admin token", (("authorization", "Bearer conformance-wrong"),))):
        try:
            await ctx.control.GetServerInfo(metadata=md)
            await ctx.health.Check(health_pb2.HealthCheckRequest(service=""), metadata=md)
            call = ctx.inference.Generate(ctx.generate_request(max_tokens=1), metadata=md)
            got = [m async for m in call]
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, f"a call with {label}") from None
        expect(got and got[-1].HasField("finished"), f"Generate with {label} did not finish")
