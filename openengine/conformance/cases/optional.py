"""Cases of the optional work and state profiles: kv, tasks, encoder, sessions, adapters."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile

import grpc

from openengine.conformance.cases.base import Failed, Skipped, Unchecked, case, expect, expect_no
from openengine.conformance.context import Context, Reader, expect_refused, rpc_error, status_name
from openengine.conformance.stream import Stream
from openengine.v1 import encoder_pb2, lora_pb2, server_pb2, sessions_pb2, tasks_pb2

KV, TASKS, ENCODER = "openengine.kv", "openengine.tasks", "openengine.encoder"
SESSIONS, ADAPTERS = "openengine.sessions", "openengine.adapters"
MAX_BATCH_PROBE = 4096


# kv
@case("kv.event-sources", profile=KV, requires=("REQ-CORE-002",),
      title="Control/GetKvEventSources answers with sources that each name a transport")
async def kv_sources(ctx: Context):
    resp = await ctx.control.GetKvEventSources()
    bad = [i for i, s in enumerate(resp.sources) if not s.transport]
    expect(not bad, f"sources {bad} name no transport")
    return f"{len(resp.sources)} sources"


@case("kv.events.stream", profile=KV, requires=("REQ-CORE-002",),
      title="Control/SubscribeKvEvents stays open; batches have increasing sequence numbers and "
            "monotonic timestamps")
async def kv_events(ctx: Context):
    reader = Reader(ctx.control.SubscribeKvEvents(timeout=ctx.options.case_timeout), "SubscribeKvEvents")
    try:
        await ctx.generate(ctx.generate_request(max_tokens=4, prompt="kv events " * 8))
        loop = asyncio.get_running_loop()
        end = loop.time() + 0.5
        while (left := end - loop.time()) > 0 and \
                (msg := await reader.next(left)) is not None:
            if msg.HasField("error"):
                raise Failed(f"SubscribeKvEvents ended with an EngineError: {msg.error.message!r}")
    finally:
        reader.cancel()
    batches = [m.batch for m in reader.received]
    for a, b in zip(batches, batches[1:]):
        expect(b.sequence_number > a.sequence_number,
               f"KV event sequence went {a.sequence_number} -> {b.sequence_number}")
        expect(b.timestamp_unix_nanos >= a.timestamp_unix_nanos, "KV event timestamps went backwards")
    return f"{len(batches)} batches after one request"


@case("kv.transfer.producer", profile=KV, requires=("REQ-CORE-009.1", "REQ-CORE-017.1", "REQ-CORE-006"),
      title="a prefill engine ends a request with one prefill_ready event naming the KV session, "
            "carrying the usage")
async def kv_producer(ctx: Context):
    if ctx.server_info.engine_role != server_pb2.ENGINE_ROLE_PREFILL:
        raise Skipped("the engine's role is not prefill")
    req = ctx.generate_request(max_tokens=1)
    stream = Stream(await ctx.generate(req), req)
    expect(stream.error is None, stream.failure() or "")
    expect(stream.prefill is not None, "a prefill request ended without a prefill_ready event")
    expect(stream.kinds[-1] == "prefill_ready", f"the last event is {stream.kinds[-1]}, not "
                                                 "prefill_ready")
    expect(bool(stream.prefill.kv_session.session_id), "prefill_ready names no KV session id")
    expect(stream.usage is not None, "prefill_ready carries no usage")


@case("kv.transfer.unknown-backend", profile=KV, requires=("REQ-CAP-009",),
      title="a KV session with a backend not in kv_transfer_backends fails INVALID_ARGUMENT")
async def kv_unknown_backend(ctx: Context):
    backends = list(ctx.limit(KV, "kv_transfer_backends"))
    if not backends:
        raise Skipped("kv_transfer_backends is empty (no backend list to check against)")
    req = ctx.generate_request(max_tokens=1)
    req.kv.session.session_id = ctx.request_id("kv")
    req.kv.session.transfer_backend = "conformance-no-such-backend"
    await expect_refused(ctx.generate(req), (grpc.StatusCode.INVALID_ARGUMENT,),
                         "Generate with an unknown KV backend")


# tasks
def _model_with(ctx: Context, profile: str) -> str:
    """The first served model whose entry in Capabilities.models lists a model-scoped profile."""
    caps = ctx.discovery.capabilities
    models = [m.model for m in caps.models if any(p.name == profile for p in m.profiles)] if caps else []
    if not models:
        raise Failed(f"{profile} is advertised but no entry of Capabilities.models lists it")
    return models[0]


# Each task family: its RPC and the answer's list of results.
TASK_RPCS = {"embed": ("Embed", "embeddings"), "classify": ("Classify", "classifications"),
             "score": ("Score", "scores")}


def _task_call(ctx: Context, family: str, model: str, inputs: list):
    """The RPC of a task family (embed, classify, score) on `inputs` (Score: the first is the query)."""
    fields = {"query": inputs[0], "documents": inputs} if family == "score" else {"inputs": inputs}
    name = TASK_RPCS[family][0]
    return getattr(ctx.tasks, name)(getattr(tasks_pb2, f"{name}Request")(
        request_id=ctx.request_id(family), model=model, **fields))


@case("tasks.families", profile=TASKS, requires=("REQ-CORE-002", "REQ-TASKS-001"),
      title="Embed, Classify and Score answer for supported families, INVALID_ARGUMENT for others")
async def tasks_families(ctx: Context):
    model = _model_with(ctx, TASKS)
    families = set(ctx.limit(TASKS, "supported_tasks", model=model))   # embed, classify, score
    inputs = [tasks_pb2.TaskInput(text="first"), tasks_pb2.TaskInput(text="second")]
    size = int(ctx.limit(TASKS, "embedding_size", model=model))
    for family, (name, results) in TASK_RPCS.items():
        if family not in families:
            await expect_refused(_task_call(ctx, family, model, inputs), (grpc.StatusCode.INVALID_ARGUMENT,),
                                 f"{name} (not in supported_tasks)")
            continue
        try:
            resp = await _task_call(ctx, family, model, inputs)
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, f"{name} (in supported_tasks)") from None
        items = getattr(resp, results)
        expect(len(items) == 2, f"{name} of 2 inputs returned {len(items)} results")
        if name == "Embed" and size:
            expect(all(len(e.values) == size for e in items),
                   f"embeddings are not of the advertised embedding_size {size}")
    return f"model {model!r}, {len(families)} families"


@case("tasks.max-inputs", profile=TASKS, requires=("REQ-CAP-009",),
      title="a task request with more than max_inputs_per_request inputs fails INVALID_ARGUMENT")
async def tasks_max_inputs(ctx: Context):
    model = _model_with(ctx, TASKS)
    limit = int(ctx.limit(TASKS, "max_inputs_per_request", model=model))
    if limit >= MAX_BATCH_PROBE:
        raise Unchecked(f"max_inputs_per_request is {limit}; the case sends at most "
                        f"{MAX_BATCH_PROBE} inputs")
    families = set(ctx.limit(TASKS, "supported_tasks", model=model))
    family = next((f for f in TASK_RPCS if f in families), None)
    if family is None:
        raise Skipped("the model supports no task family")
    inputs = [tasks_pb2.TaskInput(text=f"x{i}") for i in range(limit + 1)]
    await expect_refused(_task_call(ctx, family, model, inputs), (grpc.StatusCode.INVALID_ARGUMENT,),
                         f"{limit + 1} task inputs")


# encoder
def _item(i: int):
    return encoder_pb2.MultimodalItem(item_id=f"item-{i}", image=encoder_pb2.MediaSource(
        data=bytes(range(32)), mime_type="image/png"))


@case("encoder.encode", profile=ENCODER, requires=("REQ-CORE-002",),
      title="Encode returns one handle per item, naming this encoder and echoing the item id")
async def encode(ctx: Context):
    resp = await ctx.encoder.Encode(encoder_pb2.EncodeRequest(
        request_id=ctx.request_id("enc"), model=ctx.model, items=[_item(0), _item(1)]))
    expect(len(resp.handles) == 2, f"2 items gave {len(resp.handles)} handles")
    for i, h in enumerate(resp.handles):
        expect(bool(h.handle), f"handle {i} is empty")
        expect(h.item_id == f"item-{i}", f"handle {i} echoes item id {h.item_id!r}")
        expect(h.encoder_instance_id == ctx.server_info.instance_id,
               f"handle {i} names encoder {h.encoder_instance_id!r}, not this instance")


@case("encoder.max-items", profile=ENCODER, requires=("REQ-CAP-009",),
      title="more than max_items_per_request items fail INVALID_ARGUMENT")
async def encode_max(ctx: Context):
    limit = int(ctx.limit(ENCODER, "max_items_per_request"))
    if limit >= MAX_BATCH_PROBE:
        raise Unchecked(f"max_items_per_request is {limit}; the case sends at most "
                        f"{MAX_BATCH_PROBE} items")
    req = encoder_pb2.EncodeRequest(model=ctx.model, items=[_item(i) for i in range(limit + 1)])
    await expect_refused(ctx.encoder.Encode(req), (grpc.StatusCode.INVALID_ARGUMENT,),
                         f"Encode of {limit + 1} items")


# sessions
@case("sessions.lifecycle", profile=SESSIONS, requires=("REQ-CORE-002",),
      title="OpenSession, ListSessions, Generate in the session and CloseSession work together")
async def sessions_lifecycle(ctx: Context):
    sid = ctx.request_id("session")
    opened = await ctx.sessions.OpenSession(sessions_pb2.OpenSessionRequest(session_id=sid, model=ctx.model))
    try:
        expect(opened.session.session_id == sid, f"OpenSession answered id {opened.session.session_id!r}")
        listed = await ctx.sessions.ListSessions()
        expect(sid in [s.session_id for s in listed.sessions], "ListSessions does not list it")
        req = ctx.generate_request(max_tokens=2)
        req.session_id = sid
        responses = await ctx.generate(req)
        expect(responses and responses[-1].HasField("finished"), "Generate in the session did not finish")
    finally:
        closed = await ctx.sessions.CloseSession(sessions_pb2.CloseSessionRequest(session_id=sid))
    expect(closed.closed, "CloseSession answered closed=false for an open session")
    listed = await ctx.sessions.ListSessions()
    expect(sid not in [s.session_id for s in listed.sessions], "a closed session is still listed")


@case("sessions.ttl-clamped", profile=SESSIONS, requires=("REQ-SESS-001",),
      title="a session's ttl is clamped to max_session_ttl_ms; absent gets default_session_ttl_ms")
async def sessions_ttl(ctx: Context):
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
    expect_no(problems)


@case("sessions.unknown", profile=SESSIONS, requires=("REQ-CORE-002",),
      title="CloseSession of an unknown session answers closed=false or NOT_FOUND")
async def sessions_unknown(ctx: Context):
    try:
        resp = await ctx.sessions.CloseSession(
            sessions_pb2.CloseSessionRequest(session_id="conformance-no-such-session"))
    except grpc.aio.AioRpcError as err:
        expect(err.code() == grpc.StatusCode.NOT_FOUND,
               f"CloseSession(unknown) failed with {status_name(err.code())}")
        return
    expect(not resp.closed, "CloseSession(unknown) answered closed=true")


# adapters (Control's LoRA RPCs)
def _adapter(lora_id: int, name: str):
    """A LoraAdapter whose source is a directory the runner made: visible to an engine on the
    same machine, which is where the runner is pointed at."""

    path = tempfile.mkdtemp(prefix=f"conformance-{name}-")
    return lora_pb2.LoraAdapter(lora_id=lora_id, lora_name=name, source_path=path)


def _lora_id(ctx: Context) -> int:
    return 1_000_000 + int(ctx.request_id("lora").rsplit("-", 1)[1])


@case("adapters.lifecycle", profile=ADAPTERS, requires=("REQ-CORE-002", "REQ-ADAPT-001"),
      title="LoadLora (idempotent, ALREADY_EXISTS on a conflict), ListLoras, Generate with "
            "lora_name and UnloadLora (NOT_FOUND when unknown) work together")
async def adapters_lifecycle(ctx: Context):
    model = _model_with(ctx, ADAPTERS)
    name = ctx.request_id("lora")
    adapter = _adapter(_lora_id(ctx), name)
    loaded = await ctx.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=adapter))
    try:
        expect(loaded.adapter.lora_name == name, f"LoadLora answered name {loaded.adapter.lora_name!r}")
        again = await ctx.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=adapter))
        expect(again.already_loaded, "loading the same adapter twice did not answer already_loaded")
        conflict = lora_pb2.LoraAdapter(lora_id=adapter.lora_id, lora_name=name + "-other",
                                        source_path=adapter.source_path)
        await expect_refused(ctx.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=conflict)),
                             (grpc.StatusCode.ALREADY_EXISTS,), "LoadLora with a loaded adapter's id")
        listed = await ctx.control.ListLoras()
        expect(name in [a.lora_name for a in listed.adapters], "ListLoras does not list it")
        req = ctx.generate_request(max_tokens=2)
        req.model, req.lora_name = model, name
        responses = await ctx.generate(req)
        expect(responses and responses[-1].HasField("finished"), "Generate with the adapter did not finish")
    finally:
        unloaded = await ctx.control.UnloadLora(lora_pb2.UnloadLoraRequest(lora_name=name))
    expect(unloaded.adapter.lora_name == name, "UnloadLora did not answer the unloaded adapter")
    listed = await ctx.control.ListLoras()
    expect(name not in [a.lora_name for a in listed.adapters], "an unloaded adapter is still listed")
    await expect_refused(ctx.control.UnloadLora(lora_pb2.UnloadLoraRequest(lora_name=name)),
                         (grpc.StatusCode.NOT_FOUND,), "UnloadLora of an adapter no longer loaded")


@case("adapters.invalid", profile=ADAPTERS, requires=("REQ-ADAPT-001",),
      title="LoadLora refuses a non-positive id, an empty name and a relative path with "
            "INVALID_ARGUMENT; Generate with an unknown lora_name fails NOT_FOUND")
async def adapters_invalid(ctx: Context):
    good = _adapter(_lora_id(ctx), ctx.request_id("lora"))
    bad = {"lora_id 0": lora_pb2.LoraAdapter(lora_id=0, lora_name=good.lora_name, source_path=good.source_path),
           "an empty name": lora_pb2.LoraAdapter(lora_id=good.lora_id, source_path=good.source_path),
           "a relative path": lora_pb2.LoraAdapter(lora_id=good.lora_id, lora_name=good.lora_name,
                                                   source_path="conformance/relative")}
    for what, adapter in bad.items():
        await expect_refused(ctx.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=adapter)),
                             (grpc.StatusCode.INVALID_ARGUMENT,), f"LoadLora with {what}")
    req = ctx.generate_request(max_tokens=1)
    req.lora_name = "conformance-no-such-adapter"
    await expect_refused(ctx.generate(req), (grpc.StatusCode.NOT_FOUND,),
                         "Generate with an unknown lora_name")
    return f"{len(bad)} malformed adapters refused"


@case("adapters.limits", profile=ADAPTERS, requires=("REQ-CAP-009",),
      title="adapters beyond max_loras and max_cpu_loras are refused")
async def adapters_limits(ctx: Context):
    model = _model_with(ctx, ADAPTERS)
    capacity = max(int(ctx.limit(ADAPTERS, "max_loras", model=model)),
                   int(ctx.limit(ADAPTERS, "max_cpu_loras", model=model)))
    if capacity > 64:
        raise Unchecked(f"adapter capacity {capacity}: the case loads at most 64 adapters")
    before = await ctx.control.ListLoras()
    names = []
    try:
        for _ in range(capacity - len(before.adapters)):
            name = ctx.request_id("lora")
            await ctx.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=_adapter(_lora_id(ctx), name)))
            names.append(name)
        names.append(ctx.request_id("lora"))
        await expect_refused(
            ctx.control.LoadLora(lora_pb2.LoadLoraRequest(adapter=_adapter(_lora_id(ctx), names[-1]))),
            (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT,
             grpc.StatusCode.FAILED_PRECONDITION),
            f"LoadLora of adapter {capacity + 1} (capacity {capacity})")
    finally:
        for name in names:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await ctx.control.UnloadLora(lora_pb2.UnloadLoraRequest(lora_name=name))
    return f"capacity {capacity}"


@case("sessions.max-sessions", profile=SESSIONS, requires=("REQ-SESS-001", "REQ-SVC-004"),
      title="opening a session beyond max_sessions fails RESOURCE_EXHAUSTED")
async def sessions_max(ctx: Context):
    limit = int(ctx.limit(SESSIONS, "max_sessions"))
    if limit > 256:
        raise Unchecked(f"max_sessions is {limit}; the case opens at most 256 sessions")
    existing = len((await ctx.sessions.ListSessions()).sessions)
    opened = []
    try:
        for _ in range(limit - existing):
            sid = ctx.request_id("session")
            await ctx.sessions.OpenSession(sessions_pb2.OpenSessionRequest(session_id=sid, model=ctx.model))
            opened.append(sid)
        opened.append(ctx.request_id("session"))
        extra = sessions_pb2.OpenSessionRequest(session_id=opened[-1], model=ctx.model)
        await expect_refused(ctx.sessions.OpenSession(extra), (grpc.StatusCode.RESOURCE_EXHAUSTED,),
                             f"OpenSession {limit + 1} (max_sessions {limit})")
    finally:
        for sid in opened:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await ctx.sessions.CloseSession(sessions_pb2.CloseSessionRequest(session_id=sid))
