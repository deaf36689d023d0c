"""Cases of the optional work and state profiles: kv, tasks, encoder, sessions, adapters."""

from __future__ import annotations

import asyncio

import grpc

from openengine.conformance.cases.base import Failed, Skipped, Unchecked, case, expect
from openengine.conformance.context import Context, rpc_error, status_name

KV, TASKS, ENCODER = "openengine.kv", "openengine.tasks", "openengine.encoder"
SESSIONS, ADAPTERS = "openengine.sessions", "openengine.adapters"
MAX_BATCH_PROBE = 4096


async def _expect_status(awaitable, codes: tuple, what: str) -> None:
    try:
        await awaitable
    except grpc.aio.AioRpcError as err:
        expect(err.code() in codes, f"{what} failed with {status_name(err.code())}, expected "
                                    + " or ".join(c.name for c in codes))
        return
    raise Failed(f"{what} was accepted; expected " + " or ".join(c.name for c in codes))


# ------------------------------------------------------------------------------------------------
# kv

@case("kv.event-sources", profile=KV, requires=("REQ-CORE-002",),
      title="GetKvEventSources answers with well-formed sources")
async def kv_sources(ctx: Context):
    from openengine.v1 import kv_pb2

    resp = await ctx.kv.GetKvEventSources(kv_pb2.GetKvEventSourcesRequest())
    bad = [i for i, s in enumerate(resp.sources) if not (s.endpoint or s.publisher)]
    expect(not bad, f"sources {bad} name neither an endpoint nor a publisher")
    return f"{len(resp.sources)} sources"


@case("kv.events.stream", profile=KV, requires=("REQ-CORE-002",),
      title="SubscribeKvEvents stays open; batches have increasing sequence and monotonic timestamps")
async def kv_events(ctx: Context):
    from openengine.v1 import kv_pb2

    call = ctx.kv.SubscribeKvEvents(kv_pb2.SubscribeKvEventsRequest(),
                                    timeout=ctx.options.case_timeout)
    batches = []
    try:
        await ctx.generate(ctx.generate_request(max_tokens=4, prompt="kv events " * 8))
        loop = asyncio.get_running_loop()
        end = loop.time() + 0.5
        while (left := end - loop.time()) > 0:
            try:
                msg = await asyncio.wait_for(call.read(), left)
            except asyncio.TimeoutError:
                break
            if msg is grpc.aio.EOF:
                raise Failed(f"SubscribeKvEvents ended with {status_name(await call.code())}")
            batches.append(msg)
    except grpc.aio.AioRpcError as err:
        raise rpc_error(err, "SubscribeKvEvents") from None
    finally:
        call.cancel()
    for a, b in zip(batches, batches[1:]):
        expect(b.sequence > a.sequence, f"KV event sequence went {a.sequence} -> {b.sequence}")
        expect((b.timestamp.seconds, b.timestamp.nanos) >= (a.timestamp.seconds, a.timestamp.nanos),
               "KV event timestamps went backwards")
    return f"{len(batches)} batches after one request"


@case("kv.transfer.producer", profile=KV, requires=("REQ-CORE-002", "REQ-CORE-006"),
      title="a prefill engine returns KV transfer parameters in the final response")
async def kv_producer(ctx: Context):
    from openengine.v1 import common_pb2, kv_pb2

    if ctx.engine_info.role != common_pb2.ROLE_PREFILL:
        raise Skipped("the engine's role is not prefill")
    backends = list(ctx.limit(KV, "kv_transfer_backends"))
    req = ctx.generate_request(max_tokens=1)
    req.kv_transfer.CopyFrom(kv_pb2.KvTransferParams(
        role=kv_pb2.KV_TRANSFER_ROLE_PRODUCER, session_id=ctx.request_id("kv"),
        backend=backends[0] if backends else ""))
    responses = await ctx.generate(req)
    finals = [r.final for r in responses if r.HasField("final")]
    expect(finals, "no final response")
    expect(finals[-1].HasField("kv_transfer"), "the final response carries no kv_transfer")


@case("kv.transfer.unknown-backend", profile=KV, requires=("REQ-CAP-009",),
      title="a KV transfer with a backend not in kv_transfer_backends fails INVALID_ARGUMENT")
async def kv_unknown_backend(ctx: Context):
    from openengine.v1 import kv_pb2

    backends = list(ctx.limit(KV, "kv_transfer_backends"))
    if not backends:
        raise Skipped("kv_transfer_backends is empty (no backend list to check against)")
    req = ctx.generate_request(max_tokens=1)
    req.kv_transfer.CopyFrom(kv_pb2.KvTransferParams(
        role=kv_pb2.KV_TRANSFER_ROLE_PRODUCER, session_id=ctx.request_id("kv"),
        backend="conformance-no-such-backend"))
    await _expect_status(ctx.generate(req), (grpc.StatusCode.INVALID_ARGUMENT,),
                         "Generate with an unknown KV backend")


# ------------------------------------------------------------------------------------------------
# tasks

def _task_model(ctx: Context) -> str:
    models = ctx.models_with(TASKS)
    if not models:
        raise Failed("openengine.tasks is advertised but no ModelInfo lists it")
    return models[0]


def _families(ctx: Context, model: str) -> set[str]:
    """Supported task families as the registry spells them (embed, classify, score)."""
    return set(ctx.limit(TASKS, "supported_tasks", model=model))


@case("tasks.families", profile=TASKS, requires=("REQ-CORE-002", "REQ-TASKS-001"),
      title="Embed, Classify and Score answer for supported families, INVALID_ARGUMENT for others")
async def tasks_families(ctx: Context):
    from openengine.v1 import tasks_pb2

    model = _task_model(ctx)
    families = _families(ctx, model)
    inputs = [tasks_pb2.TaskInput(text="first"), tasks_pb2.TaskInput(text="second")]
    calls = {
        "embed": ("Embed", lambda: ctx.tasks.Embed(
            tasks_pb2.EmbedRequest(request_id=ctx.request_id("embed"), model=model, inputs=inputs))),
        "classify": ("Classify", lambda: ctx.tasks.Classify(
            tasks_pb2.ClassifyRequest(request_id=ctx.request_id("cls"), model=model, inputs=inputs))),
        "score": ("Score", lambda: ctx.tasks.Score(tasks_pb2.ScoreRequest(
            request_id=ctx.request_id("score"), model=model, query=inputs[0], documents=inputs))),
    }
    size = int(ctx.limit(TASKS, "embedding_size", model=model))
    for family, (name, call) in calls.items():
        if family not in families:
            await _expect_status(call(), (grpc.StatusCode.INVALID_ARGUMENT,),
                                 f"{name} (not in supported_tasks)")
            continue
        try:
            resp = await call()
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, f"{name} (in supported_tasks)") from None
        items = getattr(resp, {"Embed": "embeddings", "Classify": "classifications",
                               "Score": "scores"}[name])
        expect(len(items) == 2, f"{name} of 2 inputs returned {len(items)} results")
        if name == "Embed" and size:
            expect(all(len(e.values) == size for e in items),
                   f"embeddings are not of the advertised embedding_size {size}")
    return f"model {model!r}, {len(families)} families"


@case("tasks.max-inputs", profile=TASKS, requires=("REQ-CAP-009",),
      title="a task request with more than max_inputs_per_request inputs fails INVALID_ARGUMENT")
async def tasks_max_inputs(ctx: Context):
    from openengine.v1 import tasks_pb2

    model = _task_model(ctx)
    limit = int(ctx.limit(TASKS, "max_inputs_per_request", model=model))
    if limit >= MAX_BATCH_PROBE:
        raise Unchecked(f"max_inputs_per_request is {limit}; the case sends at most "
                        f"{MAX_BATCH_PROBE} inputs")
    families = _families(ctx, model)
    inputs = [tasks_pb2.TaskInput(text=f"x{i}") for i in range(limit + 1)]
    if "embed" in families:
        call = ctx.tasks.Embed(tasks_pb2.EmbedRequest(model=model, inputs=inputs))
    elif "classify" in families:
        call = ctx.tasks.Classify(tasks_pb2.ClassifyRequest(model=model, inputs=inputs))
    elif "score" in families:
        call = ctx.tasks.Score(tasks_pb2.ScoreRequest(model=model, query=inputs[0], documents=inputs))
    else:
        raise Skipped("the model supports no task family")
    await _expect_status(call, (grpc.StatusCode.INVALID_ARGUMENT,), f"{limit + 1} task inputs")


# ------------------------------------------------------------------------------------------------
# encoder

def _item(ctx: Context, i: int):
    from openengine.v1 import encoder_pb2

    return encoder_pb2.MultimodalItem(item_id=f"item-{i}", image=encoder_pb2.MediaSource(
        data=bytes(range(32)), mime_type="image/png"))


@case("encoder.encode", profile=ENCODER, requires=("REQ-CORE-002",),
      title="Encode returns one handle per item, naming this encoder and echoing the item id")
async def encode(ctx: Context):
    from openengine.v1 import encoder_pb2

    resp = await ctx.encoder.Encode(encoder_pb2.EncodeRequest(
        request_id=ctx.request_id("enc"), model=ctx.model, items=[_item(ctx, 0), _item(ctx, 1)]))
    expect(len(resp.handles) == 2, f"2 items gave {len(resp.handles)} handles")
    for i, h in enumerate(resp.handles):
        expect(bool(h.handle), f"handle {i} is empty")
        expect(h.item_id == f"item-{i}", f"handle {i} echoes item id {h.item_id!r}")
        expect(h.encoder_instance_id == ctx.engine_info.instance_id,
               f"handle {i} names encoder {h.encoder_instance_id!r}, not this instance")


@case("encoder.max-items", profile=ENCODER, requires=("REQ-CAP-009",),
      title="more than max_items_per_request items fail INVALID_ARGUMENT")
async def encode_max(ctx: Context):
    from openengine.v1 import encoder_pb2

    limit = int(ctx.limit(ENCODER, "max_items_per_request"))
    if limit >= MAX_BATCH_PROBE:
        raise Unchecked(f"max_items_per_request is {limit}; the case sends at most "
                        f"{MAX_BATCH_PROBE} items")
    req = encoder_pb2.EncodeRequest(model=ctx.model, items=[_item(ctx, i) for i in range(limit + 1)])
    await _expect_status(ctx.encoder.Encode(req), (grpc.StatusCode.INVALID_ARGUMENT,),
                         f"Encode of {limit + 1} items")


# ------------------------------------------------------------------------------------------------
# sessions

@case("sessions.lifecycle", profile=SESSIONS, requires=("REQ-CORE-002",),
      title="OpenSession, ListSessions, Generate in the session and CloseSession work together")
async def sessions_lifecycle(ctx: Context):
    from openengine.v1 import sessions_pb2

    sid = ctx.request_id("session")
    opened = await ctx.sessions.OpenSession(sessions_pb2.OpenSessionRequest(session_id=sid, model=ctx.model))
    try:
        expect(opened.session.session_id == sid, f"OpenSession answered id {opened.session.session_id!r}")
        listed = await ctx.sessions.ListSessions(sessions_pb2.ListSessionsRequest())
        expect(sid in [s.session_id for s in listed.sessions], "ListSessions does not list it")
        req = ctx.generate_request(max_tokens=2)
        req.session_id = sid
        responses = await ctx.generate(req)
        expect(responses and responses[-1].HasField("final"), "Generate in the session did not finish")
    finally:
        closed = await ctx.sessions.CloseSession(sessions_pb2.CloseSessionRequest(session_id=sid))
    expect(closed.closed, "CloseSession answered closed=false for an open session")
    listed = await ctx.sessions.ListSessions(sessions_pb2.ListSessionsRequest())
    expect(sid not in [s.session_id for s in listed.sessions], "a closed session is still listed")


@case("sessions.ttl-clamped", profile=SESSIONS, requires=("REQ-SESS-001",),
      title="a session's ttl is clamped to max_session_ttl_ms; absent gets default_session_ttl_ms")
async def sessions_ttl(ctx: Context):
    from openengine.v1 import sessions_pb2

    hi = int(ctx.limit(SESSIONS, "max_session_ttl_ms"))
    default = int(ctx.limit(SESSIONS, "default_session_ttl_ms"))
    problems = []
    for ttl, want in ((None, min(default, hi)), (hi + 1 if hi < 2**32 - 1 else None, hi)):
        sid = ctx.request_id("session")
        fields = {} if ttl is None else {"ttl_ms": ttl}
        opened = await ctx.sessions.OpenSession(
            sessions_pb2.OpenSessionRequest(session_id=sid, model=ctx.model, **fields))
        await ctx.sessions.CloseSession(sessions_pb2.CloseSessionRequest(session_id=sid))
        if opened.session.ttl_ms != want:
            problems.append(f"ttl {ttl if ttl is not None else 'absent'}: got "
                            f"{opened.session.ttl_ms} ms, expected {want} ms")
    expect(not problems, "; ".join(problems))


@case("sessions.unknown", profile=SESSIONS, requires=("REQ-CORE-002",),
      title="CloseSession of an unknown session answers closed=false or NOT_FOUND")
async def sessions_unknown(ctx: Context):
    from openengine.v1 import sessions_pb2

    try:
        resp = await ctx.sessions.CloseSession(
            sessions_pb2.CloseSessionRequest(session_id="conformance-no-such-session"))
    except grpc.aio.AioRpcError as err:
        expect(err.code() == grpc.StatusCode.NOT_FOUND,
               f"CloseSession(unknown) failed with {status_name(err.code())}")
        return
    expect(not resp.closed, "CloseSession(unknown) answered closed=true")


# ------------------------------------------------------------------------------------------------
# adapters

def _adapter_model(ctx: Context) -> str:
    models = ctx.models_with(ADAPTERS)
    if not models:
        raise Failed("openengine.adapters is advertised but no ModelInfo lists it")
    return models[0]


@case("adapters.lifecycle", profile=ADAPTERS, requires=("REQ-CORE-002",),
      title="LoadAdapter, ListAdapters, Generate with the adapter and UnloadAdapter work together")
async def adapters_lifecycle(ctx: Context):
    from openengine.v1 import adapters_pb2

    model = _adapter_model(ctx)
    name = ctx.request_id("lora")
    rank = min(8, int(ctx.limit(ADAPTERS, "max_lora_rank", model=model)))
    loaded = await ctx.adapters.LoadAdapter(adapters_pb2.LoadAdapterRequest(
        name=name, model=model, source=f"conformance://{name}", rank=rank))
    try:
        expect(loaded.adapter.name == name, f"LoadAdapter answered name {loaded.adapter.name!r}")
        listed = await ctx.adapters.ListAdapters(adapters_pb2.ListAdaptersRequest(model=model))
        expect(name in [a.name for a in listed.adapters], "ListAdapters does not list it")
        req = ctx.generate_request(max_tokens=2)
        req.model, req.adapter = model, name
        responses = await ctx.generate(req)
        expect(responses and responses[-1].HasField("final"), "Generate with the adapter did not finish")
    finally:
        unloaded = await ctx.adapters.UnloadAdapter(adapters_pb2.UnloadAdapterRequest(name=name, model=model))
    expect(unloaded.unloaded, "UnloadAdapter answered unloaded=false")
    listed = await ctx.adapters.ListAdapters(adapters_pb2.ListAdaptersRequest(model=model))
    expect(name not in [a.name for a in listed.adapters], "an unloaded adapter is still listed")


@case("adapters.limits", profile=ADAPTERS, requires=("REQ-CAP-009",),
      title="a rank above max_lora_rank is refused; adapters beyond max_cpu_loras are refused")
async def adapters_limits(ctx: Context):
    from openengine.v1 import adapters_pb2

    model = _adapter_model(ctx)
    max_rank = int(ctx.limit(ADAPTERS, "max_lora_rank", model=model))
    await _expect_status(
        ctx.adapters.LoadAdapter(adapters_pb2.LoadAdapterRequest(
            name=ctx.request_id("lora"), model=model, source="conformance://big", rank=max_rank + 1)),
        (grpc.StatusCode.INVALID_ARGUMENT,), f"LoadAdapter with rank {max_rank + 1}")
    capacity = max(int(ctx.limit(ADAPTERS, "max_loras", model=model)),
                   int(ctx.limit(ADAPTERS, "max_cpu_loras", model=model)))
    if capacity > 64:
        return f"adapter capacity {capacity} not exhausted"
    before = await ctx.adapters.ListAdapters(adapters_pb2.ListAdaptersRequest(model=model))
    names = []
    try:
        for _ in range(capacity - len(before.adapters)):
            name = ctx.request_id("lora")
            await ctx.adapters.LoadAdapter(adapters_pb2.LoadAdapterRequest(
                name=name, model=model, source=f"conformance://{name}", rank=1))
            names.append(name)
        extra = ctx.request_id("lora")
        try:
            await ctx.adapters.LoadAdapter(adapters_pb2.LoadAdapterRequest(
                name=extra, model=model, source=f"conformance://{extra}", rank=1))
            names.append(extra)
            raise Failed(f"adapter {capacity + 1} was loaded (capacity {capacity})")
        except grpc.aio.AioRpcError as err:
            expect(err.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.FAILED_PRECONDITION),
                   f"adapter {capacity + 1} failed with {status_name(err.code())}")
    finally:
        for name in names:
            try:
                await ctx.adapters.UnloadAdapter(adapters_pb2.UnloadAdapterRequest(name=name, model=model))
            except grpc.aio.AioRpcError:
                pass


@case("sessions.max-sessions", profile=SESSIONS, requires=("REQ-SESS-001", "REQ-SVC-004"),
      title="opening a session beyond max_sessions fails RESOURCE_EXHAUSTED")
async def sessions_max(ctx: Context):
    from openengine.v1 import sessions_pb2

    limit = int(ctx.limit(SESSIONS, "max_sessions"))
    if limit > 256:
        raise Unchecked(f"max_sessions is {limit}; the case opens at most 256 sessions")
    existing = len((await ctx.sessions.ListSessions(sessions_pb2.ListSessionsRequest())).sessions)
    opened = []
    try:
        for _ in range(limit - existing):
            sid = ctx.request_id("session")
            await ctx.sessions.OpenSession(sessions_pb2.OpenSessionRequest(session_id=sid, model=ctx.model))
            opened.append(sid)
        sid = ctx.request_id("session")
        try:
            await ctx.sessions.OpenSession(sessions_pb2.OpenSessionRequest(session_id=sid, model=ctx.model))
            opened.append(sid)
            raise Failed(f"session {limit + 1} was opened (max_sessions {limit})")
        except grpc.aio.AioRpcError as err:
            expect(err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
                   f"session {limit + 1} failed with {status_name(err.code())}, not RESOURCE_EXHAUSTED")
    finally:
        for sid in opened:
            try:
                await ctx.sessions.CloseSession(sessions_pb2.CloseSessionRequest(session_id=sid))
            except grpc.aio.AioRpcError:
                pass
