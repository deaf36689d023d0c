"""Hostile input at the wire: numbers no engine can act on (REQ-SVC-005), request bytes that do
not parse (REQ-SVC-006), the bearer scheme's spelling (REQ-ADMIN-006), and health List
(REQ-HEALTH-013)."""

from __future__ import annotations

import re

import grpc

from openengine.conformance.cases.base import Failed, Skipped, Unchecked, case, expect, expect_no
from openengine.conformance.cases.health import require_health
from openengine.conformance.context import Context, read_rest, refusal, status_name
from openengine.contract import CORE, HEALTH_SERVICE, catalogue, number_domains
from openengine.v1 import admin_pb2, load_pb2, server_pb2
from openengine.validate import check_load

ADMIN = "openengine.admin"
INF, NAN = float("inf"), float("nan")

# Payloads that parse as no protobuf message: a truncated varint, a length-delimited field longer
# than the bytes that follow, an end-group tag without its group.
UNDECODABLE = (b"\x08", b"\x0a\x05ab", b"\x0c")
# What betrays a server's implementation in a status message: an exception class name
# (`DecodeError`, `NullPointerException`), a Python class repr, a stack trace or a source path.
# gRPC's own stock words ("Exception deserializing request!") name no class and pass.
INTERNALS = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception)\b|<class '|Traceback \(most recent|"
                       r"File \"[^\"]+\", line|\.(?:py|go|java|rs|cc):[0-9]+|goroutine [0-9]+|panic: ")


async def _refuse_numbers(ctx: Context, fields: tuple[str, ...]) -> None:
    """NaN, both infinities and the nearest values outside each field's declared domain: each
    request must fail INVALID_ARGUMENT before any message."""
    problems = []
    for field in fields:
        domain = number_domains()[f"openengine.v1.SamplingParams.{field}"]
        for value in (NAN, INF, -INF) + domain.outside():
            req = ctx.generate_request(max_tokens=1)
            setattr(req.sampling, field, value)
            problems.append(await refusal(ctx.generate(req), (grpc.StatusCode.INVALID_ARGUMENT,),
                                          f"sampling.{field} = {value}"))
    expect_no(problems)


@case("core.numbers.sampling", profile=CORE, requires=("REQ-SVC-005",),
      title="temperature, top_p and min_p that are NaN, infinite or out of domain fail INVALID_ARGUMENT")
async def numbers_sampling(ctx: Context):
    await _refuse_numbers(ctx, ("temperature", "top_p", "min_p"))


@case("core.numbers.penalties", profile=CORE, requires=("REQ-SVC-005",),
      title="presence, frequency and repetition penalties that are NaN, infinite or out of domain fail")
async def numbers_penalties(ctx: Context):
    await _refuse_numbers(ctx, ("presence_penalty", "frequency_penalty", "repetition_penalty"))


# Request metadata upstream defines: a key sent twice, or a number that does not parse.
BAD_METADATA = (
    ("openengine-priority sent twice", (("openengine-priority", "1"), ("openengine-priority", "2"))),
    ("openengine-priority \"high\"", (("openengine-priority", "high"),)),
    ("openengine-target-dp-rank \"-1\"", (("openengine-target-dp-rank", "-1"),)),
    ("openengine-routing-key sent twice", (("openengine-routing-key", "a"), ("openengine-routing-key", "b"))),
)


@case("core.generate.metadata", profile=CORE, requires=("REQ-SVC-007",),
      title="Generate refuses a repeated openengine- metadata key or a malformed priority or "
            "target rank with INVALID_ARGUMENT before any message, and accepts well-formed ones")
async def generate_metadata(ctx: Context):
    problems = []
    for label, metadata in BAD_METADATA:
        call = ctx.inference.Generate(ctx.generate_request(max_tokens=1), metadata=metadata)
        problems.append(await refusal(read_rest(call), (grpc.StatusCode.INVALID_ARGUMENT,), label))
    good = (("openengine-priority", "5"), ("openengine-routing-key", "conformance"))
    try:
        [m async for m in ctx.inference.Generate(ctx.generate_request(max_tokens=1), metadata=good)]
    except grpc.aio.AioRpcError as err:
        problems.append(f"a well-formed priority and routing key failed with {status_name(err.code())}")
    expect_no(problems)
    return f"{len(BAD_METADATA)} malformed, 1 well-formed"


@case("admin.numbers.update-config", profile=ADMIN, requires=("REQ-SVC-005",),
      title="UpdateConfig with a NaN or infinite double_value fails INVALID_ARGUMENT and changes nothing")
async def numbers_update_config(ctx: Context):
    admin = ctx.admin()
    # Only a double-typed limit makes double_value a valid choice; for any other limit the update
    # is refused for its type, and the refusal would say nothing about REQ-SVC-005.
    updatable = [name for name in ctx.limit(ADMIN, "updatable_limits")
                 if getattr(catalogue().limit(name), "kind", None) == "double"]
    if not updatable:
        raise Unchecked("no double-typed limit is in openengine.admin.updatable_limits: "
                        "a non-finite double_value cannot be told apart from a type error")
    before = ctx.capabilities.revision
    problems = []
    for value in (NAN, INF, -INF):
        request = admin_pb2.UpdateConfigRequest(validate_only=True, updates=[
            admin_pb2.LimitUpdate(limit=updatable[0], double_value=value)])
        problems.append(await refusal(admin.UpdateConfig(request), (grpc.StatusCode.INVALID_ARGUMENT,),
                                      f"double_value {value}"))
    await ctx.discover()
    expect(ctx.capabilities is not None and ctx.capabilities.revision == before,
           "the capability revision changed")
    expect_no(problems)


@case("core.wire.undecodable", profile=CORE, requires=("REQ-SVC-006",),
      title="request bytes that do not parse fail INTERNAL on every served RPC, with no server internals")
async def wire_undecodable(ctx: Context):
    problems, checked = [], 0
    # Only RPCs served on this address (the core's include the standard health RPCs): Admin may
    # have an address of its own (REQ-ADMIN-001).
    paths = [(r.path, r.server_streaming) for p in ctx.contract.values()
             if p.name == CORE or ctx.advertised(p.name)
             for r in p.rpcs if r.service in ctx.main_services or r.service == HEALTH_SERVICE]
    for path, streaming in paths:
        factory = ctx.channel.unary_stream if streaming else ctx.channel.unary_unary
        for payload in UNDECODABLE:
            call = factory(path, request_serializer=None, response_deserializer=None)(
                payload, timeout=ctx.options.rpc_timeout)
            try:
                if streaming:
                    async for _ in call:
                        pass
                else:
                    await call
                problems.append(f"{path}: undecodable bytes {payload!r} were answered OK")
                continue
            except grpc.aio.AioRpcError as err:
                code, details = err.code(), err.details() or ""
            if code == grpc.StatusCode.UNIMPLEMENTED:
                break   # an RPC the engine lacks: the served-RPC cases report it
            checked += 1
            if code != grpc.StatusCode.INTERNAL:
                problems.append(f"{path}: {status_name(code)}, not INTERNAL")
            if INTERNALS.search(details):
                problems.append(f"{path}: the status message shows server internals ({details[:120]!r})")
    expect(not problems, "; ".join(sorted(set(problems))[:8]))
    return f"{checked} calls on {len(paths)} RPCs"


@case("admin.bearer-scheme-case", profile=ADMIN, requires=("REQ-ADMIN-006",),
      title="the admin token is accepted with the scheme spelled bearer or BEARER")
async def admin_bearer_case(ctx: Context):
    admin = ctx.admin()   # skips without credentials; carries the client certificate under mTLS
    token = ctx.options.admin_token
    if not token:
        raise Skipped("Admin is guarded by client certificates only: no bearer token to spell")
    problems = []
    for scheme in ("bearer", "BEARER"):
        md = (("authorization", f"{scheme} {token}"),)
        try:
            await admin.UpdateConfig(admin_pb2.UpdateConfigRequest(validate_only=True), metadata=md)
        except grpc.aio.AioRpcError as err:
            problems.append(f"scheme {scheme!r}: {status_name(err.code())}")
    expect_no(problems, "a valid token was refused: ")


@case("health.list", profile=CORE, requires=("REQ-HEALTH-013",),
      title="Health/List reports exactly the names Check answers, with the same statuses")
async def health_list(ctx: Context):
    await require_health(ctx)
    try:
        listed = (await ctx.health.List()).statuses
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and len(ctx.main_services) + 1 > 100:
            return "more than 100 names: RESOURCE_EXHAUSTED is allowed"
        raise Failed(f"Health/List failed with {status_name(err.code())}") from None
    missing = sorted((set(ctx.main_services) | {""}) - set(listed))
    expect(not missing, f"List lacks {missing}")
    differ = []
    for name, status in listed.items():
        try:
            now = await ctx.check_health(name)
        except grpc.aio.AioRpcError as err:
            differ.append(f"{name!r} is listed but Check fails with {status_name(err.code())}")
            continue
        if now != status.status:
            differ.append(f"{name or '(server)'}: List {status.status}, Check {now}")
    expect(not differ, "List and Check disagree: " + "; ".join(differ))
    return f"{len(listed)} names"


@case("load.ranks.sum", profile="openengine.load", requires=("REQ-LOAD-023",),
      title="with per_rank, GetLoad and WatchLoad totals are the sums of their ranks")
async def load_ranks_sum(ctx: Context):
    if not ctx.limit("openengine.load", "per_rank"):
        raise Skipped("ObservabilityCapabilities.per_rank is false: no per-rank figures to add up")
    # A finished request leaves blocks behind (a prefix cache) where an engine keeps any.
    await ctx.generate(ctx.generate_request(max_tokens=2, prompt="conformance fills a few cache blocks " * 4))
    found = check_load(await ctx.control.GetLoad(server_pb2.GetLoadRequest(include_per_rank=True)),
                       "GetLoad")
    call = ctx.observability.WatchLoad(load_pb2.WatchLoadRequest(per_rank=True, initial_snapshot=True))
    try:
        async for msg in call:
            if msg.WhichOneof("kind") == "snapshot":
                found += check_load(msg.snapshot.load, "WatchLoad snapshot")
                break
    finally:
        call.cancel()
    expect(not found, "; ".join(v.message for v in found))
