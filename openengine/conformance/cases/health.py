"""Standard health (`grpc.health.v1.Health`): names, Check, Watch, and the statuses that follow
the engine's run state (observed by pausing through Admin when the runner may)."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2

from openengine.conformance.cases.base import Failed, case, expect, expect_no
from openengine.conformance.context import INFERENCE, Context, Reader, services_of, status_name
from openengine.contract import CORE, HEALTH_SERVICE, WORK_SERVICES
from openengine.v1 import lifecycle_pb2

S = health_pb2.HealthCheckResponse
# Where silence proves nothing (a served Watch may stay quiet) a probe waits this long; where
# a message must come at once it waits the RPC deadline, since a loaded machine can hold a
# conforming engine back for longer than it takes.
FIRST_MESSAGE_SECONDS = 1.0


def _name(status: int) -> str:
    return S.ServingStatus.Name(status)


async def require_health(ctx: Context) -> None:
    """Fail at once, saying what to add, when the engine serves no standard health at all: each
    health requirement is then broken for that one reason."""
    try:
        await ctx.health.Check(health_pb2.HealthCheckRequest(service=""))
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.UNIMPLEMENTED:
            raise Failed("Health/Check(\"\") failed with UNIMPLEMENTED: add the standard "
                         "grpc.health.v1.Health service, with a status for \"\" and for each service "
                         "it serves (openengine.v1.Inference, openengine.v1.Control, ...) "
                         "(REQ-HEALTH-001)") from None


@case("health.served", profile=CORE, requires=("REQ-HEALTH-001",),
      title="grpc.health.v1.Health Check and Watch are served")
async def served(ctx: Context):
    await require_health(ctx)
    await ctx.health.Check(health_pb2.HealthCheckRequest(service=""))   # any failure fails the case
    call = ctx.health.Watch(health_pb2.HealthCheckRequest(service=""))
    try:
        # Served means "not refused"; what Watch sends first is REQ-HEALTH-005's case.
        first = await asyncio.wait_for(call.read(), FIRST_MESSAGE_SECONDS)
    except grpc.aio.AioRpcError as err:
        raise Failed(f"Health/Watch(\"\") failed with {status_name(err.code())}") from None
    except asyncio.TimeoutError:
        return
    finally:
        call.cancel()
    expect(first is not grpc.aio.EOF, f"Health/Watch(\"\") ended with {status_name(await call.code())}")


@case("health.check.advertised-services", profile=CORE, requires=("REQ-HEALTH-002",),
      title="Check answers SERVING or NOT_SERVING for every advertised service served on the address")
async def check_advertised(ctx: Context):
    await require_health(ctx)
    problems = []
    for service in ctx.main_services:
        try:
            status = await ctx.check_health(service)
        except grpc.aio.AioRpcError as err:
            problems.append(f"{service}: {status_name(err.code())}")
            continue
        if status not in (S.SERVING, S.NOT_SERVING):
            problems.append(f"{service}: {_name(status)}")
    expect_no(problems, "Check for advertised services: ")
    return f"{len(ctx.main_services)} services"


@case("health.check.unknown-not-found", profile=CORE, requires=("REQ-HEALTH-003",),
      title="Check for an unknown, short, mis-cased or unadvertised service name fails NOT_FOUND")
async def check_unknown(ctx: Context):
    await require_health(ctx)
    names = ["conformance.no.such.Service", "Inference", INFERENCE.lower(), INFERENCE.upper()]
    # Unadvertised services, and Admin when it is served only on an address of its own.
    unserved = set(services_of(ctx.contract, ctx.contract)) - {*ctx.main_services, HEALTH_SERVICE}
    names += sorted(unserved)
    problems = []
    for name in names:
        try:
            status = await ctx.check_health(name)
            problems.append(f"{name!r} answered {_name(status)}")
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.NOT_FOUND:
                problems.append(f"{name!r} failed with {status_name(err.code())}")
    expect_no(problems, "expected NOT_FOUND: ")
    return f"{len(names)} names"


@case("health.check.overall", profile=CORE, requires=("REQ-HEALTH-004",),
      title='Check("") is SERVING exactly when openengine.v1.Inference is')
async def check_overall(ctx: Context):
    await require_health(ctx)
    overall, inference = await ctx.check_health(""), await ctx.check_health(INFERENCE)
    expect((overall == S.SERVING) == (inference == S.SERVING),
           f'Check("") is {_name(overall)} while {INFERENCE} is {_name(inference)}')
    if ctx.can_admin():
        async with ctx.paused():
            await ctx.wait_health(INFERENCE, S.NOT_SERVING)
            overall = await ctx.check_health("")
            expect(overall == S.NOT_SERVING, f'while paused Check("") is {_name(overall)}')
        return "checked serving and paused"
    return "checked while serving (pausing needs Admin and its credentials)"


async def _first(reader: Reader, wait: float):
    msg = await reader.next(wait)      # the stream's end or a failed call fails the case
    expect(msg is not None, f"{reader.rpc} sent nothing within {wait:g} s: the current status is due at once")
    return msg


@case("health.watch.first-message", profile=CORE, requires=("REQ-HEALTH-005",),
      title="Watch sends the current status at once, for every advertised service")
async def watch_first(ctx: Context):
    await require_health(ctx)
    for service in [""] + ctx.main_services:
        current = await ctx.check_health(service)
        reader = Reader(ctx.health.Watch(health_pb2.HealthCheckRequest(service=service),
                                         timeout=ctx.options.case_timeout), f"Watch({service!r})")
        try:
            msg = await _first(reader, ctx.options.rpc_timeout)
        finally:
            reader.cancel()
        expect(msg.status == current,
               f"Watch({service!r}) first sent {_name(msg.status)}, Check says {_name(current)}")


@case("health.watch.change", profile=CORE, requires=("REQ-HEALTH-005", "REQ-HEALTH-007"),
      title="Watch delivers NOT_SERVING when generation is paused and SERVING after resume")
async def watch_change(ctx: Context):
    ctx.admin()
    reader = Reader(ctx.health.Watch(health_pb2.HealthCheckRequest(service=INFERENCE),
                                     timeout=ctx.options.case_timeout), f"Health/Watch({INFERENCE!r})")
    wait = ctx.options.rpc_timeout
    try:
        # The first message is REQ-HEALTH-005's first-message case; here only changes count.
        await reader.next(wait)
        async with ctx.paused():
            await reader.until(lambda m: m.status == S.NOT_SERVING, wait, "NOT_SERVING after the pause")
        await reader.until(lambda m: m.status == S.SERVING, wait, "SERVING after the resume")
    finally:
        reader.cancel()


@case("health.watch.unknown-service", profile=CORE, requires=("REQ-HEALTH-006",),
      title="Watch for an unknown service sends SERVICE_UNKNOWN and keeps the stream open")
async def watch_unknown(ctx: Context):
    await require_health(ctx)
    reader = Reader(ctx.health.Watch(health_pb2.HealthCheckRequest(service="conformance.no.such.Service"),
                                     timeout=ctx.options.case_timeout), "Watch(unknown)")
    try:
        msg = await _first(reader, ctx.options.rpc_timeout)
        expect(msg.status == S.SERVICE_UNKNOWN, f"Watch(unknown) sent {_name(msg.status)}")
        await reader.next(0.3, lambda code: f"the stream ended with {status_name(code)} after "
                                            "SERVICE_UNKNOWN")
    finally:
        reader.cancel()


@case("health.pause.work-not-serving", profile=CORE, requires=("REQ-HEALTH-007", "REQ-HEALTH-014"),
      title="while paused every advertised work service is NOT_SERVING and Control/Health "
            "NOT_READY; after resume SERVING")
async def pause_work(ctx: Context):
    ctx.admin()
    work = [s for s in WORK_SERVICES if s in ctx.advertised_services]
    async with ctx.paused():
        for service in work:
            if not await ctx.wait_health(service, S.NOT_SERVING):
                raise Failed(f"{service} is {_name(await ctx.check_health(service))} while paused")
        state = (await ctx.control.Health()).state
        expect(state == lifecycle_pb2.HEALTH_STATE_NOT_READY,
               f"Control/Health answered {lifecycle_pb2.HealthState.Name(state)} while paused, not "
               "HEALTH_STATE_NOT_READY")
    for service in work:
        if not await ctx.wait_health(service, S.SERVING):
            raise Failed(f"{service} is {_name(await ctx.check_health(service))} after resume")


@case("health.pause.work-unavailable", profile=CORE, requires=("REQ-HEALTH-008",),
      title="Generate while paused fails UNAVAILABLE before any message")
async def pause_unavailable(ctx: Context):
    ctx.admin()
    async with ctx.paused():
        await ctx.wait_health(INFERENCE, S.NOT_SERVING)
        call = ctx.inference.Generate(ctx.generate_request(max_tokens=2))
        got = []
        try:
            async for msg in call:
                got.append(msg)
        except grpc.aio.AioRpcError as err:
            expect(err.code() == grpc.StatusCode.UNAVAILABLE,
                   f"Generate while paused failed with {status_name(err.code())}, not UNAVAILABLE")
            expect(not got, f"{len(got)} messages were sent before the UNAVAILABLE status")
            return
        raise Failed(f"Generate while paused was served ({len(got)} messages)")


@case("health.pause.control-serving", profile=CORE, requires=("REQ-HEALTH-009",),
      title="while paused the control services stay SERVING and discovery answers")
async def pause_control(ctx: Context):
    ctx.admin()
    control = [s for s in ctx.main_services if s not in WORK_SERVICES]
    async with ctx.paused():
        await ctx.wait_health(INFERENCE, S.NOT_SERVING)
        bad = []
        for service in control:
            status = await ctx.check_health(service)
            if status != S.SERVING:
                bad.append(f"{service} is {_name(status)}")
        expect(not bad, "while paused: " + "; ".join(bad))
        await ctx.control.GetServerInfo()
    return f"{len(control)} control services"
