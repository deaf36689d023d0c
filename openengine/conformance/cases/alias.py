"""Cases of the compatibility aliases (REQ-ALIAS-001..003).

An alias is detected by calling it: its `Health` method maps to the core, so a served alias
answers it and an unserved one is UNIMPLEMENTED. Health entries are then checked against that,
never trusted to say what is served. Each behaviour check drives a request through one side and
observes it through the other (alias and v1 share requests, load and cancellation), and compares
answers of both sides for the same inputs. The earlier messages come from the alias protos
(proto/openengine/legacy/), so the runner is a client of both layouts.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2

from openengine.aliases import ALIASES, HEALTH_CHECK, AliasService
from openengine.conformance.cases.base import Failed, Skipped, Unchecked, case, expect
from openengine.conformance.context import Context, Deadlined, read_rest, rpc_error, status_name
from openengine.conformance.contract import CORE

S = health_pb2.HealthCheckResponse
LOAD, ADMIN = "openengine.load", "openengine.admin"


def _stub(ctx: Context, alias: AliasService) -> Deadlined:
    import importlib

    grpc_module = importlib.import_module(alias.module + "_grpc")
    cls = getattr(grpc_module, alias.service.rsplit(".", 1)[1] + "Stub")
    return Deadlined(cls(ctx.channel), ctx.options.rpc_timeout)


def _messages(alias: AliasService):
    """The earlier revision's message module of an alias."""
    from openengine.legacy.rev2.v1 import openengine_pb2
    from openengine.legacy.rev3.v1 import control_pb2

    return {"openengine": openengine_pb2, "control": control_pb2}[alias.name]


async def served_aliases(ctx: Context) -> dict[str, AliasService]:
    """Aliases the server answers, found by calling each one's Health (cached for the run)."""
    cached = getattr(ctx, "_served_aliases", None)
    if cached is not None:
        return cached
    found = {}
    for alias in ALIASES.values():
        try:
            await _stub(ctx, alias).Health(_messages(alias).HealthRequest())
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                continue
            raise rpc_error(err, f"{alias.service}/Health") from None
        found[alias.service] = alias
    ctx._served_aliases = found
    return found


async def _require_served(ctx: Context) -> dict[str, AliasService]:
    served = await served_aliases(ctx)
    if not served:
        raise Skipped("the server serves no compatibility alias (its Health answers UNIMPLEMENTED)")
    return served


@case("alias.health", profile=CORE, requires=("REQ-ALIAS-003",),
      title="a served alias is in standard health with its mapped service's status, an unserved one is "
            "NOT_FOUND, and neither is listed as a profile")
async def alias_health(ctx: Context):
    served = await served_aliases(ctx)
    names = {p.name for p in ctx.capabilities.profiles}
    listed = sorted(names & {a.service for a in ALIASES.values()})
    expect(not listed, f"Capabilities.profiles lists the alias {', '.join(listed)}")
    for alias in ALIASES.values():
        try:
            status = await ctx.check_health(alias.service)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.NOT_FOUND:
                raise rpc_error(err, f"Health/Check({alias.service!r})") from None
            expect(alias.service not in served,
                   f"{alias.service} answers its methods but health answers NOT_FOUND for it")
            continue
        expect(alias.service in served,
               f"health reports {alias.service} ({S.ServingStatus.Name(status)}) but its Health method "
               f"answers UNIMPLEMENTED")
        want = await ctx.check_health(alias.health_as)
        expect(status == want, f"{alias.service} is {S.ServingStatus.Name(status)} in health, "
                               f"{alias.health_as} is {S.ServingStatus.Name(want)}")
    return f"aliases served: {', '.join(sorted(served)) or 'none'}"


@case("alias.unadvertised-unimplemented", profile=CORE, requires=("REQ-ALIAS-001",),
      title="alias methods whose v1 RPC's profile is not advertised answer UNIMPLEMENTED")
async def alias_unimplemented(ctx: Context):
    served = await _require_served(ctx)
    checked, problems = [], []
    for alias in served.values():
        stub, pb = _stub(ctx, alias), _messages(alias)
        for method in alias.descriptor.methods:
            mapped = alias.methods[method.name]
            rpc = None if mapped.v1 == HEALTH_CHECK else _v1_rpc(ctx, mapped.v1)
            if rpc is None or ctx.advertised(rpc.profile):
                continue
            checked.append(f"{alias.service}/{method.name}")
            request = getattr(pb, method.input_type.name)()
            call = getattr(stub, method.name)(request, metadata=_admin_metadata(ctx, rpc))
            try:
                if method.server_streaming:
                    await call.read()
                    call.cancel()
                else:
                    await call
                problems.append(f"{alias.service}/{method.name} answered although {rpc.profile} "
                                f"is not advertised")
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                    problems.append(f"{alias.service}/{method.name}: {status_name(err.code())}, "
                                    f"not UNIMPLEMENTED ({rpc.profile} is not advertised)")
    if not checked:
        raise Unchecked("every profile the served aliases map to is advertised, so no alias method must be refused")
    expect(not problems, "; ".join(problems))
    return f"{len(checked)} alias methods of unadvertised profiles"


def _v1_rpc(ctx: Context, name: str):
    """The v1 RPC an alias method maps to, with its profile."""
    return next((r for p in ctx.contract.profiles.values() for r in p.rpcs if r.name == name), None)


def _admin_metadata(ctx: Context, rpc):
    """Credentials for an alias method that maps to Admin, so only the missing profile can refuse it."""
    if rpc.service.endswith(".Admin") and ctx.options.admin_token:
        return (("authorization", f"Bearer {ctx.options.admin_token}"),)
    return None


async def _running_load(ctx: Context) -> int:
    from openengine.v1 import load_pb2

    return (await ctx.observability.GetLoad(load_pb2.GetLoadRequest())).running_requests


async def _wait_running(ctx: Context, at_least: int, within: float = 2.0) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while loop.time() < end:
        if await _running_load(ctx) >= at_least:
            return True
        await asyncio.sleep(0.02)
    return False


@case("alias.shared-requests", profile=CORE, requires=("REQ-ALIAS-002",),
      title="a request started through the alias is counted in v1 load and cancelled by v1 Abort, and a "
            "v1 request is cancelled by the alias Abort")
async def alias_shared_requests(ctx: Context):
    from openengine.v1 import common_pb2, lifecycle_pb2

    served = await _require_served(ctx)
    notes = []
    long = ctx.long_generation_tokens()
    combined = next((a for a in served.values() if "Generate" in a.methods), None)
    if combined is not None:
        pb = _messages(combined)
        rid = ctx.request_id("alias-gen")
        use_load = ctx.advertised(LOAD)
        baseline = await _running_load(ctx) if use_load else 0
        call = _stub(ctx, combined).Generate(pb.GenerateRequest(
            request_id=rid, model=ctx.model, prompt="conformance through the alias",
            sampling=pb.SamplingParams(max_tokens=long, ignore_eos=True)), timeout=ctx.options.case_timeout)
        try:
            first = await call.read()
            expect(first is not grpc.aio.EOF, f"{combined.service}/Generate ended before its first message")
            if use_load:
                expect(await _wait_running(ctx, baseline + 1),
                       f"v1 GetLoad does not count the request started through {combined.service}/Generate")
                notes.append("counted in v1 load")
            aborted = await ctx.lifecycle.Abort(lifecycle_pb2.AbortRequest(
                request_ids=common_pb2.StringList(values=[rid])))
            # Messages still arriving say nothing: an engine may have produced them all before
            # Abort came. The alias's own Abort, asked at once, tells whether it was still running.
            found_by_alias = (aborted.aborted == 0 and (await _stub(ctx, combined).Abort(
                pb.AbortRequest(request_id=rid))).status == pb.ABORT_STATUS_ABORTED)
            rest = await read_rest(call)
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, f"{combined.service}/Generate") from None
        finally:
            call.cancel()
        last = rest[-1] if rest else first
        if aborted.aborted == 0 and not found_by_alias:
            raise Unchecked("the alias request finished before v1 Abort reached it: the alias Abort "
                            "asked next did not find it either")
        expect(aborted.aborted == 1, f"v1 Lifecycle/Abort found {aborted.aborted} requests for the id "
                                     f"started through {combined.service}/Generate, which "
                                     f"{combined.service}/Abort then found running")
        cancelled = last.WhichOneof("event") == "error" or (
            last.WhichOneof("event") == "finished" and last.finished.reason == pb.FINISH_REASON_CANCELLED)
        expect(cancelled, f"after v1 Abort the alias stream ended with {last.WhichOneof('event')}, "
                          f"not a cancellation")
        notes.append("v1 Abort cancels it")
    for alias in served.values():
        pb = _messages(alias)
        req = ctx.long_request()
        call = ctx.inference.Generate(req, timeout=ctx.options.case_timeout)
        try:
            first = await call.read()
            expect(first is not grpc.aio.EOF, "v1 Generate ended before its first message")
            answer = await _stub(ctx, alias).Abort(pb.AbortRequest(request_id=req.request_id))
            # As above: v1 Abort, asked at once, tells whether the request was still running.
            found_by_v1 = answer.status != pb.ABORT_STATUS_ABORTED and (await ctx.lifecycle.Abort(
                lifecycle_pb2.AbortRequest(request_ids=common_pb2.StringList(values=[req.request_id])))).aborted > 0
            rest = await read_rest(call)
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, f"{alias.service}/Abort of a v1 request") from None
        finally:
            call.cancel()
        last = rest[-1] if rest else first
        if answer.status != pb.ABORT_STATUS_ABORTED and not found_by_v1:
            raise Unchecked("the v1 request finished before the alias Abort reached it: v1 Abort "
                            "asked next did not find it either")
        expect(answer.status == pb.ABORT_STATUS_ABORTED,
               f"{alias.service}/Abort answered {pb.AbortStatus.Name(answer.status)} for a v1 request "
               f"that v1 Lifecycle/Abort then found running")
        expect(last.HasField("error") and last.error.code == common_pb2.ERROR_CODE_ABORTED,
               f"after {alias.service}/Abort the v1 stream ended with {last.WhichOneof('kind')}, "
               f"not an ERROR_CODE_ABORTED EngineError")
        notes.append(f"{alias.service}/Abort cancels v1 requests")
    return "; ".join(notes)


@case("alias.admin-guard", profile=CORE, requires=("REQ-ALIAS-002",),
      title="an alias Drain requires admin credentials exactly when Admin does")
async def alias_admin_guard(ctx: Context):
    from openengine.v1 import admin_pb2

    served = await _require_served(ctx)
    drains = [a for a in served.values() if "Drain" in a.methods]
    if not drains:
        raise Unchecked("no served alias has a Drain method")
    if not ctx.advertised(ADMIN):
        raise Unchecked("openengine.admin is not advertised (alias.unadvertised-unimplemented "
                        "checks that the alias Drain is refused)")
    # What Admin itself answers on this address without credentials (ResumeGeneration changes
    # nothing on a serving engine): the guard's status, or UNIMPLEMENTED when Admin lives on an
    # address of its own (REQ-ADMIN-001). The alias Drain here must answer the same.
    try:
        await ctx.stub("admin", ctx.channel).ResumeGeneration(admin_pb2.ResumeGenerationRequest())
        raise Unchecked("Admin answers without credentials here, so there is no guard to compare")
    except grpc.aio.AioRpcError as err:
        if err.code() not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
                              grpc.StatusCode.UNIMPLEMENTED):
            raise rpc_error(err, "Admin/ResumeGeneration without credentials") from None
        guard = err.code()
    for alias in drains:
        pb = _messages(alias)
        call = _stub(ctx, alias).Drain(pb.DrainRequest(stop_accepting_new_requests=True))
        try:
            first = await call.read()
            call.cancel()
        except grpc.aio.AioRpcError as err:
            expect(err.code() == guard, f"{alias.service}/Drain without credentials answered "
                                        f"{status_name(err.code())}; Admin answers {status_name(guard)} "
                                        f"on this address")
            continue
        await _undo_drain(ctx)
        raise Failed(f"{alias.service}/Drain without credentials started draining ({first!r:.60}); "
                     f"Admin answers {status_name(guard)} on this address")
    return f"alias Drain refused with {status_name(guard)} like Admin"


async def _undo_drain(ctx: Context) -> None:
    """Put the engine back to serving after an unguarded drain, when the runner can."""
    from openengine.v1 import admin_pb2

    try:
        await ctx.admin().ResumeGeneration(admin_pb2.ResumeGenerationRequest())
    except (Skipped, Unchecked, grpc.aio.AioRpcError):
        pass


@case("alias.same-answers", profile=CORE, requires=("REQ-ALIAS-002",),
      title="alias and v1 give the same answers for the same inputs (identity, model limits, health, "
            "tokens, refusals)")
async def alias_same_answers(ctx: Context):
    from openengine.v1 import common_pb2, discovery_pb2

    served = await _require_served(ctx)
    info = ctx.engine_info
    model = await ctx.discovery_rpc.GetModelInfo(discovery_pb2.GetModelInfoRequest(model=ctx.model))
    compared = []
    for alias in served.values():
        pb, stub = _messages(alias), _stub(ctx, alias)
        try:
            if "GetEngineInfo" in alias.methods:
                earlier = await stub.GetEngineInfo(pb.GetEngineInfoRequest())
                models = list(earlier.supported_models)
            else:
                earlier = await stub.GetServerInfo(pb.GetServerInfoRequest())
                models = list(earlier.supported_models)
                expect(earlier.schema_revision == info.schema_revision,
                       f"{alias.service} reports schema_revision {earlier.schema_revision}, v1 "
                       f"{info.schema_revision}")
            role = earlier.role if "GetEngineInfo" in alias.methods else earlier.engine_role
            v1_role = common_pb2.Role.Name(info.role)[len("ROLE_"):]
            earlier_role = pb.EngineRole.Name(role)[len("ENGINE_ROLE_"):]
            expect(earlier_role == v1_role or (v1_role == "ENCODER" and earlier_role == "UNSPECIFIED"),
                   f"{alias.service} reports role {earlier_role}, v1 {v1_role}")
            expect(earlier.instance_id == info.instance_id and models == list(info.served_models),
                   f"{alias.service} reports instance {earlier.instance_id!r} serving {models}; v1 reports "
                   f"{info.instance_id!r} serving {list(info.served_models)}")
            request = pb.GetModelInfoRequest(model=ctx.model) if "model" in \
                pb.GetModelInfoRequest.DESCRIPTOR.fields_by_name else pb.GetModelInfoRequest()
            earlier_model = await stub.GetModelInfo(request)
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, f"{alias.service} discovery") from None
        if earlier_model.served_model_name == model.model:
            got = (earlier_model.max_context_length, earlier_model.max_output_tokens)
            want = (model.max_context_tokens, model.max_output_tokens)
            expect(got == want, f"{alias.service}/GetModelInfo reports context/output limits {got}, "
                                f"v1 GetModelInfo {want}")
        compared.append(alias.service)
        await _same_health(ctx, alias, pb, stub)
        if "Generate" in alias.methods:
            await _same_tokens(ctx, alias, pb, stub)
            await _same_refusal(ctx, alias, pb, stub, model)
    return f"compared {', '.join(compared)} with v1"


async def _same_health(ctx: Context, alias: AliasService, pb, stub) -> None:
    """The alias Health is ready (or degraded) exactly when openengine.v1.Inference is SERVING."""
    try:
        state = (await stub.Health(pb.HealthRequest())).state
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, f"{alias.service}/Health") from None
    serving = await ctx.check_health("openengine.v1.Inference") == S.SERVING
    ready = state in (pb.HEALTH_STATE_READY, pb.HEALTH_STATE_DEGRADED)
    expect(ready == serving, f"{alias.service}/Health reports {pb.HealthState.Name(state)} while "
                             f"openengine.v1.Inference is {'SERVING' if serving else 'not SERVING'}")


async def _same_refusal(ctx: Context, alias: AliasService, pb, stub, model) -> None:
    """A request beyond an advertised limit is refused the same way through both."""
    too_many = model.max_output_tokens + 1

    async def status_of(call) -> grpc.StatusCode:
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as err:
            return err.code()
        return grpc.StatusCode.OK

    v1 = await status_of(ctx.inference.Generate(ctx.generate_request(max_tokens=too_many)))
    earlier = await status_of(stub.Generate(pb.GenerateRequest(
        model=ctx.model, prompt="over the limit", sampling=pb.SamplingParams(max_tokens=too_many))))
    expect(v1 == earlier, f"max_tokens {too_many} (above max_output_tokens): v1 Generate answers "
                          f"{status_name(v1)}, {alias.service}/Generate {status_name(earlier)}")


async def _same_tokens(ctx: Context, alias: AliasService, pb, stub) -> None:
    prompt, seed, n = "the same input twice", 11, 6
    v1 = await ctx.generate(ctx.generate_request(max_tokens=n, prompt=prompt, seed=seed))
    v1_tokens = [t for m in v1 for t in (m.chunk.token_ids if m.HasField("chunk") else
                                         m.final.token_ids if m.HasField("final") else [])]
    try:
        call = stub.Generate(pb.GenerateRequest(model=ctx.model, prompt=prompt,
                                                sampling=pb.SamplingParams(max_tokens=n, seed=seed)))
        earlier = [m async for m in call]
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, f"{alias.service}/Generate") from None
    tokens = [t for m in earlier if m.HasField("token") for t in m.token.token_ids]
    expect(tokens == v1_tokens, f"{alias.service}/Generate produced tokens {tokens[:8]}, v1 Generate "
                                f"{v1_tokens[:8]} for the same prompt and seed")
