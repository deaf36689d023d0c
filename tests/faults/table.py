"""Every fault: its name, what it does wrong, the requirements (or clauses) that breaks, the part
it changes, and how: interceptors on the wire (`wire`), a wrapper around the backend (`engine`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import grpc
from grpc_health.v1 import health_pb2

from openengine.contract import WORK_SERVICES, catalogue, role_numbers
from openengine.serve import AbortReason, ErrorCode, Failure, Final, Refusal
from openengine.v1 import (
    events_pb2, generation_pb2, lifecycle_pb2, load_pb2, server_pb2,
)

from tests.faults.seams import (
    HEALTH, _message_classes, BackendWrapper, Call, Instead, OnMetadata, OnRpc, answer_instead, change_answer, change_messages,
    change_request, change_stream, drop_messages, read_ahead, recode, refuse, when_cancelled, with_field,
)

DISCOVERY = "openengine.v1.Discovery"
CONTROL = "openengine.v1.Control"
OBSERVABILITY = "openengine.v1.Observability"
INFERENCE = "openengine.v1.Inference"
ADMIN = "openengine.v1.Admin"
CORE = "openengine.core"

GET_CAPABILITIES = f"{DISCOVERY}/GetCapabilities"
GET_SERVER_INFO = f"{CONTROL}/GetServerInfo"
GET_MODEL_INFO = f"{CONTROL}/GetModelInfo"
GET_LOAD = f"{CONTROL}/GetLoad"
ABORT = f"{CONTROL}/Abort"
CONTROL_HEALTH = f"{CONTROL}/Health"
UNLOAD_LORA = f"{CONTROL}/UnloadLora"
SUBSCRIBE_KV_EVENTS = f"{CONTROL}/SubscribeKvEvents"
GENERATE = f"{INFERENCE}/Generate"
WATCH_LOAD = f"{OBSERVABILITY}/WatchLoad"
RUNTIME_EVENTS = f"{OBSERVABILITY}/SubscribeRuntimeEvents"
OPEN_SESSION = "openengine.v1.Sessions/OpenSession"
PAUSE_GENERATION = f"{ADMIN}/PauseGeneration"
CHECK, WATCH, LIST = f"{HEALTH}/Check", f"{HEALTH}/Watch", f"{HEALTH}/List"
H = health_pb2.HealthCheckResponse
STOPPING = events_pb2.ENGINE_STATE_STOPPING


@dataclass
class Held:
    """What the faults of one engine share: its configuration, the reference backend once the
    server made it, tasks that outlive their call, and whatever a fault counts."""

    config: Any
    reference: Any = None
    tasks: set = field(default_factory=set)
    counts: dict = field(default_factory=dict)

    def keep(self, task: asyncio.Future) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


@dataclass(frozen=True)
class Fault:
    name: str
    breaks: str                    # what the engine does wrong
    requirements: tuple[str, ...]  # what that breaks
    part: str                      # the RPC it changes on the wire, or `backend`
    wire: Callable[[Held], list] | None = None
    engine: Callable[[Any, Held], Any] | None = None


# -- WatchLoad ------------------------------------------------------------------------------------------


async def _snapshot_before_settings(messages, request):
    settings = await anext(messages, None)
    if settings is None:
        return
    if settings.settings.initial_snapshot:
        first = await anext(messages, None)
        if first is not None:
            # The numbers and times keep their order; only the kinds change places.
            first.sequence, settings.sequence = settings.sequence, first.sequence
            first.timestamp_unix_nanos, settings.timestamp_unix_nanos = \
                settings.timestamp_unix_nanos, first.timestamp_unix_nanos
            yield first
    yield settings
    async for message in messages:
        yield message


def _every_second_a_second_early(message, request):
    if message.sequence % 2 == 1:
        message.timestamp_unix_nanos = max(0, message.timestamp_unix_nanos - 1_000_000_000)


def _foreign_instance(message, request):
    if message.HasField("settings"):
        message.settings.instance_id = "not-" + message.settings.instance_id
    elif message.HasField("snapshot"):
        message.snapshot.load.instance_id = "not-" + message.snapshot.load.instance_id


def _as_asked(message, request):
    if message.HasField("settings"):
        if request.HasField("interval_ms"):
            message.settings.interval_ms = request.interval_ms
        if request.HasField("heartbeat_ms"):
            message.settings.heartbeat_ms = request.heartbeat_ms


async def _end_after_opening(messages, request):
    settings = await anext(messages, None)
    if settings is None:
        return
    yield settings
    if settings.settings.initial_snapshot:
        first = await anext(messages, None)
        if first is not None:
            yield first


async def _with_timer(messages, period_of: Callable[[Any], float | None], extra: Callable[[Any], Any | None],
                      keep: Callable[[Any], bool], timed_from_extras: bool = False):
    """The messages, renumbered, with `extra(last kept message)` added whenever `period_of(settings)`
    seconds pass without one (`timed_from_extras`: without an extra, whatever else was sent);
    messages `keep` refuses are dropped."""
    loop = asyncio.get_running_loop()
    sequence, period, last = 0, None, None
    due = None
    pending = asyncio.ensure_future(anext(messages, None))
    try:
        while True:
            timeout = None if due is None else max(0.0, due - loop.time())
            done, _ = await asyncio.wait({pending}, timeout=timeout)
            if pending in done:
                message = pending.result()
                if message is None:
                    return
                pending = asyncio.ensure_future(anext(messages, None))
                if message.HasField("settings"):
                    period = period_of(message)
                if not keep(message):
                    continue
                last, added = message, False
            else:
                message, added = extra(last), True
                if message is None:
                    due = None
                    continue
            restarts = not timed_from_extras or added or message.HasField("settings")
            if period and restarts:
                due = loop.time() + period
            message.sequence = sequence
            sequence += 1
            yield message
    finally:
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await pending


def _heartbeat_from_heartbeat(messages, request):
    """Heartbeats timed from the previous heartbeat, not from the previous message."""
    return _with_timer(
        messages, lambda settings: settings.settings.heartbeat_ms / 1000.0,
        lambda last: load_pb2.WatchLoadResponse(heartbeat=load_pb2.Heartbeat(), timestamp_unix_nanos=time.time_ns()),
        lambda message: not message.HasField("heartbeat"), timed_from_extras=True)


def _periodic_when_zero(messages, request):
    """An interval of 0 (changes only) served, and reported, as min_watch_interval_ms: periodic
    snapshots every 10 ms."""
    if not (request.HasField("interval_ms") and request.interval_ms == 0):
        return messages

    async def reported(messages):
        async for message in messages:
            if message.HasField("settings"):
                message.settings.interval_ms = 10
            yield message
    messages = reported(messages)

    def again(last):
        if last is None or not last.HasField("snapshot"):
            return None
        message = load_pb2.WatchLoadResponse()
        message.CopyFrom(last)
        message.timestamp_unix_nanos = time.time_ns()
        message.snapshot.load.timestamp_unix_nanos = message.timestamp_unix_nanos
        return message
    return _with_timer(messages, lambda settings: 0.01, again, lambda message: True)


def _kept_across_revisions(inner):
    """A stream the revision change ends is opened again behind the client's back."""
    def reopen_on_aborted(status, details, trailing):
        if status == grpc.StatusCode.ABORTED:
            raise Instead(status, details)
        return status, details, trailing

    async def stream(request, call):
        sequence, reopened = 0, False
        while True:
            try:
                async with contextlib.aclosing(inner(request, Call(call, reopen_on_aborted))) as sent:
                    async for message in sent:
                        if reopened and message.HasField("settings"):
                            continue
                        message.sequence = sequence
                        sequence += 1
                        yield message
                return
            except Instead:
                reopened = True
    return stream


async def _abort_everything(held: Held) -> None:
    """Control/Abort(all_requests) through the engine's own address, as any client would."""
    endpoint = held.reference.endpoint()
    async with grpc.aio.insecure_channel(f"{endpoint.host}:{endpoint.port}") as channel:
        abort = channel.unary_unary(f"/{ABORT}", request_serializer=lifecycle_pb2.AbortRequest.SerializeToString,
                                    response_deserializer=lifecycle_pb2.AbortResponse.FromString)
        await abort(lifecycle_pb2.AbortRequest(all_requests=lifecycle_pb2.AllRequests()), timeout=5)


def _cancel_aborts_everything(held: Held):
    return OnRpc(WATCH_LOAD, when_cancelled(lambda: held.keep(asyncio.ensure_future(_abort_everything(held)))))


async def _first_figures_kept(messages, request):
    first = None
    async for message in messages:
        if message.HasField("snapshot"):
            load = message.snapshot.load
            if first is None:
                first = server_pb2.LoadInfo()
                first.CopyFrom(load)
            else:
                stamp = load.timestamp_unix_nanos
                load.CopyFrom(first)
                load.timestamp_unix_nanos = stamp
        yield message


async def _every_second_snapshot(messages, request):
    dropped, periodic = 0, 0
    async for message in messages:
        if message.HasField("snapshot") and message.sequence > 1:
            periodic += 1
            if periodic % 2 == 0:
                dropped += 1
                continue
        message.sequence -= dropped
        yield message


async def _empty_after_settings(messages, request):
    added = 0
    async for message in messages:
        message.sequence += added
        yield message
        if message.HasField("settings"):
            added = 1
            yield load_pb2.WatchLoadResponse(sequence=message.sequence + 1,
                                             timestamp_unix_nanos=message.timestamp_unix_nanos)


def _snapshot_backlog(inner):
    async def stream(request, call):
        async with contextlib.aclosing(read_ahead(inner(request, call))) as backlog:
            async for message in backlog:
                yield message
    return stream


def _one_sender():
    sending = asyncio.Lock()

    def make(inner):
        async def stream(request, call):
            async with contextlib.aclosing(inner(request, call)) as sent:
                async for message in sent:
                    async with sending:
                        yield message
        return stream
    return make


# -- discovery ---------------------------------------------------------------------------------------


def _keep_profiles(caps, keep: Callable[[Any], bool]) -> None:
    kept = [profile for profile in caps.profiles if keep(profile)]
    del caps.profiles[:]
    caps.profiles.extend(kept)


def _unadvertised_submessage(caps, request):
    advertised = {p.name for p in caps.profiles}
    missing = next((p for p in catalogue().profiles if p.capability_field and p.name not in advertised), None)
    if missing is not None:
        getattr(caps, missing.capability_field).SetInParent()


def _role_mismatch(held: Held):
    def change(info, request):
        engine = held.reference.engine
        scoped = [p for p in catalogue().profiles if p.scope == "role" and engine.has(p.name)]
        allowed = set(scoped[0].roles) if scoped else {held.config.role}
        roles = role_numbers()
        info.engine_role = roles[next(r for r in roles if r not in allowed)]
    return change


def _model_info_drifts():
    calls = [0]

    def change(info, request):
        calls[0] += 1
        if calls[0] % 2 == 0:
            info.max_context_length -= 1
    return change


def _without_scoped_profile(caps, request):
    scoped = {p.name for p in catalogue().profiles if p.scope == "model"}
    for model in caps.models:
        listed = [p for p in model.profiles if p.name in scoped]
        if listed:
            model.profiles.remove(listed[0])


class _RenamedService(grpc.aio.ServerInterceptor):
    """`openengine.X/M` served as `openengine.v1.X/M`."""

    async def intercept_service(self, continuation, details):
        service, _, method = details.method.lstrip("/").partition("/")
        if service.startswith("openengine.") and service.count(".") == 1:
            details = type(details)(f"/openengine.v1.{service.split('.', 1)[1]}/{method}",
                                    details.invocation_metadata)
        return await continuation(details)


class _WirePolicyOff(grpc.aio.ServerInterceptor):
    """An undecodable request fails as gRPC's default would: UNKNOWN naming the Python exception."""

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        classes = _message_classes(details.method)
        if handler is None or classes is None:
            return handler

        async def parse(raw, context):
            try:
                classes[0].FromString(raw)
            except Exception as error:
                await context.abort(grpc.StatusCode.UNKNOWN, f"Unexpected {type(error)}: {error}")

        if handler.unary_stream is not None:
            behaviour = handler.unary_stream

            async def stream(raw, context):
                await parse(raw, context)
                return await behaviour(raw, context)
            return grpc.unary_stream_rpc_method_handler(stream, response_serializer=handler.response_serializer)
        behaviour = handler.unary_unary

        async def unary(raw, context):
            await parse(raw, context)
            return await behaviour(raw, context)
        return grpc.unary_unary_rpc_method_handler(unary, response_serializer=handler.response_serializer)


def _unadvertised_answered(held: Held) -> list:
    """Every RPC of an optional profile answers (an empty message, or an empty stream) where the
    engine would refuse it UNIMPLEMENTED."""
    return [answer_instead(f"{rpc.service}/{rpc.method.name}", grpc.StatusCode.UNIMPLEMENTED,
                           lambda request, response: [] if rpc.method.server_streaming else response())
            for profile in catalogue().profiles if not profile.mandatory for rpc in profile.rpcs
            if rpc.service != HEALTH]


def _revision_as_first(held: Held) -> list:
    """Every revision reported as the first one seen: changes never start a new one."""
    def first(value):
        return held.counts.setdefault("revision", value)
    return [change_answer(GET_CAPABILITIES, with_field("revision", first)),
            change_answer(GET_SERVER_INFO, with_field("capability_revision", first)),
            change_messages(WATCH_LOAD, lambda m, r: m.HasField("settings") and setattr(
                m.settings, "capability_revision", first(m.settings.capability_revision)))]


def _pause_revises(held: Held) -> list:
    """Each PauseGeneration counts as a new revision in everything that reports one."""
    def paused(answer, request):
        held.counts["pauses"] = held.counts.get("pauses", 0) + 1

    def later(value):
        return value + held.counts.get("pauses", 0)
    return [change_answer(PAUSE_GENERATION, paused),
            change_answer(GET_CAPABILITIES, with_field("revision", later)),
            change_answer(GET_SERVER_INFO, with_field("capability_revision", later)),
            change_messages(WATCH_LOAD, lambda m, r: m.HasField("settings") and setattr(
                m.settings, "capability_revision", later(m.settings.capability_revision)))]


# -- Generate: admission ----------------------------------------------------------------------------


def _admitted_despite(held: Held, forgive: Callable[[Any], Any]):
    """A Generate the engine's preflight refuses is run as `forgive(request)`, when that passes."""
    def change(request):
        engine, model = held.reference.engine, request.model or held.reference.default_model
        if model not in held.reference.models:
            return request
        try:
            engine.preflight(request, model)
            return request
        except Refusal:
            pass
        forgiven = generation_pb2.GenerateRequest()
        forgiven.CopyFrom(request)
        forgive(forgiven)
        try:
            engine.preflight(forgiven, model)
        except Refusal:
            return request
        return forgiven
    return change_request(GENERATE, change)


def _every_limit(request) -> None:
    for name in ("sampling", "response", "guided", "kv", "lora_name", "session_id", "encoder_inputs"):
        request.ClearField(name)
    if request.stopping.HasField("max_tokens"):
        request.stopping.max_tokens = min(request.stopping.max_tokens, 16)


def _switches(request) -> None:
    request.sampling.ClearField("min_p")
    request.ClearField("response")
    request.ClearField("guided")


def _numbers(request) -> None:
    for name in ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
        request.sampling.ClearField(name)


# -- Generate: the stream ---------------------------------------------------------------------------


async def _no_cancelled_finished(messages, request):
    async for message in messages:
        if message.HasField("finished") and message.finished.reason == generation_pb2.FINISH_REASON_CANCELLED:
            continue
        yield message


async def _token_after_finished(messages, request):
    ended = None
    async for message in messages:
        if ended is not None:
            yield generation_pb2.GenerateResponse(request_id=message.request_id,
                                                  token=generation_pb2.TokenOutput(output_index=ended))
            ended = None
        if message.HasField("finished"):
            ended = message.finished.output_index
        yield message


def _ends_internal(inner):
    async def stream(request, call):
        finished = False
        async with contextlib.aclosing(inner(request, call)) as sent:
            async for message in sent:
                finished = finished or message.HasField("finished")
                yield message
        if finished:
            await call.abort(grpc.StatusCode.INTERNAL, "the stream ended after its finished events")
    return stream


def _queued_abort_waits_for_a_slot(held: Held):
    async def transform(messages, request):
        ran = False
        async for message in messages:
            ran = ran or message.HasField("token")
            if not ran and message.HasField("finished") \
                    and message.finished.reason == generation_pb2.FINISH_REASON_CANCELLED:
                backend = held.reference
                most = int(backend.limit(CORE, "max_running_requests"))
                while len(backend.scheduler.running) >= most:   # nothing signals a free slot: poll
                    await asyncio.sleep(0.01)
            yield message
    return change_stream(GENERATE, transform)


def _cancelled_for_revision(backend, held: Held):
    """A request still running when the capability revision changes ends with a CANCELLED
    failure that says it may not be retried. The revision is the last one the SDK told the
    backend of (it is a StateListener)."""
    def revision_changed(previous: int, revision: int, changed: tuple[str, ...]) -> None:
        held.counts["revision-told"] = revision
        backend.revision_changed(previous, revision, changed)

    async def generate(request):
        accepted = held.counts.get("revision-told", 0)
        async for output in backend.generate(request):
            if isinstance(output, Failure) and output.code == ErrorCode.CANCELLED:
                output = dataclasses.replace(output, retryable=False)
            elif held.counts.get("revision-told", 0) != accepted and not isinstance(output, (Final, Failure)):
                output = Failure(ErrorCode.CANCELLED, "the capabilities changed", retryable=False)
            yield output
            if isinstance(output, (Final, Failure)):
                return
    return BackendWrapper(backend, generate=generate, revision_changed=revision_changed)


# -- Generate: the backend --------------------------------------------------------------------------


def _runs_changed(change: Callable[[Any], None]):
    """The backend runs each admitted request with its message altered by `change`."""
    def wrap(backend, held):
        def generate(request):
            message = generation_pb2.GenerateRequest()
            message.CopyFrom(request.message)
            change(message)
            return backend.generate(dataclasses.replace(request, message=message))
        return BackendWrapper(backend, generate=generate)
    return wrap


def _one_token_more(message) -> None:
    if message.stopping.HasField("max_tokens"):
        message.stopping.max_tokens += 1


def _without_conditions(kind: str):
    def change(message):
        kept = [c for c in message.stopping.conditions if c.WhichOneof("condition") != kind]
        del message.stopping.conditions[:]
        message.stopping.conditions.extend(kept)
    return change


def _ignore_cancel(when_running: bool):
    """A client's cancelling a running (or, `when_running` false, queued) request is ignored:
    its outputs are read by a task of its own, which the cancelled call never stops."""
    def wrap(backend, held):
        async def abort(request_id, reason):
            running = request_id in held.reference.scheduler.running
            if reason is not AbortReason.CLIENT_CANCELLED or running != when_running:
                await backend.abort(request_id, reason)

        def generate(request):
            return read_ahead(backend.generate(request), keep=held.tasks)
        return BackendWrapper(backend, generate=generate, abort=abort)
    return wrap


async def _event_less_before_finished(messages, request):
    async for message in messages:
        if message.HasField("finished"):
            yield generation_pb2.GenerateResponse(request_id=message.request_id)
        yield message


async def _request_id_on_first_only(messages, request):
    first = True
    async for message in messages:
        if not first:
            message.ClearField("request_id")
        first = False
        yield message


def _output_zero_unindexed(message, request):
    event = message.WhichOneof("event")
    if event in ("token", "finished") and getattr(message, event).output_index == 0:
        getattr(message, event).ClearField("output_index")


async def _cumulative_text(messages, request):
    texts: dict[int, str] = {}
    async for message in messages:
        if message.HasField("token"):
            index = message.token.output_index
            texts[index] = texts.get(index, "") + message.token.text
            message.token.text = texts[index]
        yield message


async def _prompt_after_first_token(messages, request):
    held = None
    async for message in messages:
        if message.HasField("prompt") and held is None:
            held = message
            continue
        yield message
        if held is not None and message.HasField("token"):
            yield held
            held = None
    if held is not None:
        yield held


def _usage(change: Callable[[Any], None]) -> Callable[[Any, Any], None]:
    def changed(message, request):
        if message.HasField("usage"):
            change(message.usage)
    return changed


def _one_completion_token_more(usage) -> None:
    usage.completion_tokens += 1
    usage.total_tokens += 1


def _failure_as_status(inner):
    """A terminal EngineError is not sent: the stream ends with status INTERNAL carrying its message."""
    async def stream(request, call):
        async with contextlib.aclosing(inner(request, call)) as sent:
            async for message in sent:
                if message.WhichOneof("event") == "error":
                    await call.abort(grpc.StatusCode.INTERNAL, message.error.message or "the request failed")
                yield message
    return stream


def _empty_model_refused(inner):
    async def answer(request, call):
        if not request.model:
            await call.abort(grpc.StatusCode.INVALID_ARGUMENT, "model is required")
        return await inner(request, call)
    return answer


def _running_over_capacity(held: Held):
    def change(load, request):
        if load.running_requests:
            load.running_requests += int(held.reference.limit(CORE, "max_running_requests"))
    return change


def _cancelled_stream_counted(held: Held) -> list:
    """The first Generate stream the client cancels is counted as running ever after."""
    def counted(load, request):
        load.running_requests += held.counts.get("phantom", 0)
    return [OnRpc(GENERATE, when_cancelled(lambda: held.counts.__setitem__("phantom", 1))),
            change_answer(GET_LOAD, counted)]


def _malformed_priority_dropped(method, metadata):
    return tuple((key, value) for key, value in metadata
                 if key != "openengine-priority" or value.lstrip("-").isdigit())


def _random_seed(message) -> None:
    if message.sampling.HasField("seed"):
        message.sampling.seed = random.getrandbits(32)


# -- Abort ----------------------------------------------------------------------------------------------


def _claims_aborted(held: Held, target: str):
    """Abort with `target` answers ABORTED for what it finds, and ends nothing."""
    def make(inner):
        async def abort(request, call):
            if request.WhichOneof("target") != target:
                return await inner(request, call)
            found = held.reference.scheduler.in_flight()
            if target == "request_id" and not any(r.request_id == request.request_id for r in found):
                return await inner(request, call)
            return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ABORTED,
                                               message=f"{len(found)} request(s) aborted")
        return abort
    return OnRpc(ABORT, make)


def _kv_session_is_all(request):
    if request.WhichOneof("target") == "kv_session":
        return lifecycle_pb2.AbortRequest(all_requests=lifecycle_pb2.AllRequests())
    return request


def _finished_as_aborted(answer, request):
    if answer.status == lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED:
        answer.status = lifecycle_pb2.ABORT_STATUS_ABORTED


def _aborted(request, response_class):
    return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ABORTED, message="aborted")


# -- health ---------------------------------------------------------------------------------------------


def _statuses(change: Callable[[str, int], int]) -> list:
    """Check, Watch and List answer `change(name, status)` for each name's status."""
    def check(answer, request):
        answer.status = change(request.service, answer.status)

    def listed(answer, request):
        for name, status in answer.statuses.items():
            status.status = change(name, status.status)
    return [change_answer(CHECK, check), change_messages(WATCH, check), change_answer(LIST, listed)]


def _not_per_service() -> list:
    def make_check(inner):
        async def check(request, call):
            if request.service:
                await call.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
            return await inner(request, call)
        return check

    def make_watch(inner):
        async def watch(request, call):
            if request.service:
                yield H(status=H.SERVICE_UNKNOWN)
                await asyncio.Event().wait()
            async with contextlib.aclosing(inner(request, call)) as sent:
                async for message in sent:
                    yield message
        return watch

    def listed(answer, request):
        for name in [n for n in answer.statuses if n]:
            del answer.statuses[name]
    return [OnRpc(CHECK, make_check), OnRpc(WATCH, make_watch), change_answer(LIST, listed)]


def _admin_address_overall_not_serving() -> list:
    """On an address that serves Admin but not Inference, "" is NOT_SERVING."""
    def make_check(inner):
        def unknown(status, details, trailing):
            if status == grpc.StatusCode.NOT_FOUND:
                raise Instead(status, details)
            return status, details, trailing

        async def check(request, call):
            answer = await inner(request, call)
            if request.service:
                return answer
            try:
                await inner(health_pb2.HealthCheckRequest(service=INFERENCE), Call(call, unknown))
            except Instead:
                answer.status = H.NOT_SERVING
            return answer
        return check

    def listed(answer, request):
        if ADMIN in answer.statuses and INFERENCE not in answer.statuses:
            answer.statuses[""].status = H.NOT_SERVING
    return [OnRpc(CHECK, make_check), change_answer(LIST, listed)]


def _serving_unless_stopping(held: Held):
    def change(name, status):
        if held.reference.phase != STOPPING and (name in WORK_SERVICES or name == ""):
            return H.SERVING
        return status
    return _statuses(change)


def _serving_while_stopping(held: Held):
    return _statuses(lambda name, status: H.SERVING if held.reference.phase == STOPPING else status)


# -- load, events, sessions, tasks, admin -------------------------------------------------------------


def _ranks_without_cache(held: Held):
    def change(load, request):
        cached, size = len(held.reference.prefix_cache), len(load.ranks)
        for rank in load.ranks:
            share = cached // size + (1 if rank.data_parallel_rank < cached % size else 0)
            rank.used_kv_blocks = max(0, rank.used_kv_blocks - share)
    return change


def _getload_first_answer():
    kept: dict[bool, Any] = {}    # one engine's answers, across its calls

    def make(inner):
        async def get_load(request, call):
            if request.include_per_rank not in kept:
                kept[request.include_per_rank] = await inner(request, call)
            return kept[request.include_per_rank]
        return get_load
    return make


def _with_ranks(request):
    request.include_per_rank = True
    return request


async def _initial_state_paused(messages, request):
    first = True
    async for message in messages:
        if first and message.event.HasField("state_changed"):
            message.event.state_changed.state = events_pb2.ENGINE_STATE_PAUSED
        first = False
        yield message


def _unclamped_ttl(held: Held):
    def change(answer, request):
        if request.HasField("ttl_ms") and request.ttl_ms > answer.session.ttl_ms:
            kept = held.reference.sessions[answer.session.session_id]
            kept.ttl_ms = request.ttl_ms
            kept.expires_ns = held.reference.clock.now_ns() + request.ttl_ms * 1_000_000
            answer.session.ttl_ms = request.ttl_ms
            answer.session.expires_at.FromNanoseconds(kept.expires_ns)
    return change


TASK_FAMILIES = {"Embed": "embed", "Classify": "classify", "Score": "score"}


def _family_unimplemented(held: Held) -> list:
    def for_method(method: str):
        def make(inner):
            async def answer(request, call):
                backend = held.reference
                model = request.model or backend.default_model
                values = backend.engine.model_limit_values(model, "openengine.tasks") if model in backend.models else {}
                if TASK_FAMILIES[method] not in {str(v).lower() for v in values.get("supported_tasks", ())}:
                    await call.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented for {model!r}")
                return await inner(request, call)
            return answer
        return OnRpc(f"openengine.v1.Tasks/{method}", make)
    return [for_method(method) for method in TASK_FAMILIES]


def _admin_calls(method: str) -> bool:
    return method.startswith(f"{ADMIN}/")


def _authorization(metadata) -> str:
    return next((value for key, value in metadata if key == "authorization"), "")


def _with_authorization(value_of: Callable[[str], str]):
    def change(method, metadata):
        value = value_of(_authorization(metadata))
        return tuple((k, v) for k, v in metadata if k != "authorization") + ((("authorization", value),) if value else ())
    return change


def _bearer(held: Held) -> str:
    return f"Bearer {held.config.admin.token}"


def _exact_scheme(method, metadata):
    if not _authorization(metadata).startswith("Bearer "):
        return grpc.StatusCode.UNAUTHENTICATED, "Admin needs 'authorization: Bearer <token>' metadata"
    return None


def _guarded_inference(held: Held):
    def refuse(method, metadata):
        scheme, _, token = _authorization(metadata).partition(" ")
        if scheme.lower() != "bearer" or token != held.config.admin.token:
            return grpc.StatusCode.UNAUTHENTICATED, "this call needs the admin bearer token"
        return None
    return refuse


def _limited_as_full(held: Held):
    def value_of(value: str) -> str:
        scheme, _, token = value.partition(" ")
        if token == f"limited-{held.config.admin.token}":
            return f"{scheme} {held.config.admin.token}"
        return value
    return value_of


# -- the table ------------------------------------------------------------------------------------------


def _w(*interceptors: Callable[[Held], Any]):
    """A wire fault from interceptor makers, each called for every engine (so state is its own)."""
    return lambda held: [i for make in interceptors for i in _listed(make(held))]


def _listed(made):
    return made if isinstance(made, list) else [made]


FAULTS: dict[str, Fault] = {f.name: f for f in (
    # -- WatchLoad --------------------------------------------------------------------------------
    Fault("watch-sequence-not-increasing", "WatchLoad repeats the previous sequence number on every third message",
          ("REQ-LOAD-014.1",), WATCH_LOAD,
          _w(lambda h: change_messages(WATCH_LOAD, with_field("sequence", lambda s: s - s // 3)))),
    Fault("watch-settings-not-first", "WatchLoad sends the initial snapshot before the settings",
          ("REQ-LOAD-004", "REQ-LOAD-009"), WATCH_LOAD,
          _w(lambda h: change_stream(WATCH_LOAD, _snapshot_before_settings))),
    Fault("watch-timestamp-backwards", "WatchLoad stamps every second message one second earlier than the one before",
          ("REQ-LOAD-014.2",), WATCH_LOAD, _w(lambda h: change_messages(WATCH_LOAD, _every_second_a_second_early))),
    Fault("watch-no-initial-snapshot", "WatchLoad omits the initial snapshot even when the request asks for it",
          ("REQ-LOAD-009",), WATCH_LOAD,
          _w(lambda h: drop_messages(WATCH_LOAD, lambda m, dropped: not dropped and m.sequence == 1
                                     and m.HasField("snapshot")))),
    Fault("watch-missing-heartbeat", "WatchLoad never sends heartbeats, however long the stream is quiet",
          ("REQ-LOAD-013",), WATCH_LOAD,
          _w(lambda h: drop_messages(WATCH_LOAD, lambda m, _: m.HasField("heartbeat")))),
    Fault("watch-interval-not-clamped",
          "WatchLoad settings report the requested interval and heartbeat, not the clamped ones it uses",
          ("REQ-LOAD-006", "REQ-LOAD-008"), WATCH_LOAD, _w(lambda h: change_messages(WATCH_LOAD, _as_asked))),
    Fault("watch-instance-id-mismatch", "WatchLoad settings and snapshots carry an instance id other than ServerInfo's",
          ("REQ-LOAD-002", "REQ-LOAD-005"), WATCH_LOAD, _w(lambda h: change_messages(WATCH_LOAD, _foreign_instance))),
    Fault("watch-silent-gap", "WatchLoad coalesces updates of a slow watcher without counting them in coalesced",
          ("REQ-LOAD-016",), WATCH_LOAD,
          _w(lambda h: change_messages(WATCH_LOAD, lambda m, r: m.HasField("snapshot")
                                       and setattr(m.snapshot, "coalesced", 0)))),
    Fault("watch-cancel-aborts-requests", "cancelling a WatchLoad stream aborts every running request",
          ("REQ-LOAD-018",), WATCH_LOAD, _w(_cancel_aborts_everything)),
    Fault("watch-ends-ok", "WatchLoad ends the stream with status OK after the initial snapshot",
          ("REQ-LOAD-019",), WATCH_LOAD, _w(lambda h: change_stream(WATCH_LOAD, _end_after_opening))),
    Fault("watch-max-watchers-ignored",
          "WatchLoad accepts more concurrent streams than the max_watchers Capabilities advertises",
          ("REQ-LOAD-011",), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, with_field("observability.max_watchers", lambda n: 1)))),
    Fault("watch-heartbeat-not-reset",
          "WatchLoad's heartbeat timer runs from the previous heartbeat, not the previous message, so a "
          "heartbeat can follow a snapshot sooner than heartbeat_ms",
          ("REQ-LOAD-013",), WATCH_LOAD, _w(lambda h: change_stream(WATCH_LOAD, _heartbeat_from_heartbeat))),
    Fault("watch-revision-stream-kept", "WatchLoad streams stay open across a capability revision change",
          ("REQ-REV-006",), WATCH_LOAD, _w(lambda h: OnRpc(WATCH_LOAD, _kept_across_revisions))),
    Fault("watch-snapshots-stale", "WatchLoad snapshots after the first repeat its figures; only their timestamps move",
          ("REQ-LOAD-003",), WATCH_LOAD, _w(lambda h: change_stream(WATCH_LOAD, _first_figures_kept))),
    Fault("watch-zero-interval-periodic",
          "WatchLoad sends periodic snapshots for a requested interval of 0 although change_driven is advertised",
          ("REQ-LOAD-007",), WATCH_LOAD, _w(lambda h: change_stream(WATCH_LOAD, _periodic_when_zero))),
    Fault("watch-settings-per-rank-echoed",
          "WatchLoad settings report per_rank as the request asked, whatever the engine supports",
          ("REQ-LOAD-010",), WATCH_LOAD,
          _w(lambda h: change_messages(WATCH_LOAD, lambda m, r: m.HasField("settings")
                                       and setattr(m.settings, "per_rank", r.per_rank)))),
    Fault("watch-snapshots-halved", "WatchLoad drops every second periodic snapshot (numbering stays gapless)",
          ("REQ-LOAD-012",), WATCH_LOAD, _w(lambda h: change_stream(WATCH_LOAD, _every_second_snapshot))),
    Fault("watch-empty-message", "WatchLoad sends a message with no kind set right after the settings",
          ("REQ-LOAD-022",), WATCH_LOAD, _w(lambda h: change_stream(WATCH_LOAD, _empty_after_settings))),
    Fault("watch-snapshot-backlog",
          "WatchLoad queues every snapshot for a watcher that does not read, delivering the oldest first",
          ("REQ-LOAD-015",), WATCH_LOAD, _w(lambda h: OnRpc(WATCH_LOAD, _snapshot_backlog))),
    Fault("watchers-full-unavailable",
          "WatchLoad refuses a stream beyond max_watchers with UNAVAILABLE instead of RESOURCE_EXHAUSTED",
          ("REQ-SVC-004",), WATCH_LOAD,
          _w(lambda h: recode(WATCH_LOAD, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE,
                              keep_details=False))),
    Fault("watch-one-sender",
          "WatchLoad writes the messages of all streams one at a time, so a watcher that does not read "
          "holds up the others",
          ("REQ-LOAD-017",), WATCH_LOAD, _w(lambda h: OnRpc(WATCH_LOAD, _one_sender()))),
    Fault("watch-unimplemented", "WatchLoad answers UNIMPLEMENTED although openengine.load is advertised",
          ("REQ-CORE-002",), WATCH_LOAD,
          _w(lambda h: refuse(WATCH_LOAD, grpc.StatusCode.UNIMPLEMENTED, "WatchLoad is not implemented"))),
    # -- Capabilities and discovery -----------------------------------------------------------------
    Fault("capabilities-unadvertised-submessage",
          "Capabilities sets the capability message of a profile it does not advertise",
          ("REQ-CAP-006",), GET_CAPABILITIES, _w(lambda h: change_answer(GET_CAPABILITIES, _unadvertised_submessage))),
    Fault("capabilities-missing-core", "Capabilities.profiles leaves out openengine.core",
          ("REQ-CORE-001.2", "REQ-CAP-006", "REQ-CAP-010"), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, lambda caps, r: _keep_profiles(caps, lambda p: p.name != CORE)))),
    Fault("capabilities-duplicate-profile", "Capabilities.profiles lists the last advertised profile twice",
          ("REQ-CAP-003",), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, lambda caps, r: caps.profiles.append(caps.profiles[-1])))),
    Fault("capabilities-limit-out-of-range", "Capabilities reports openengine.core max_sequences as 0, below its minimum",
          ("REQ-CAP-008",), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, with_field("core.max_sequences", lambda n: 0)))),
    Fault("capabilities-revision-mismatch", "Capabilities.revision differs from ServerInfo.capability_revision",
          ("REQ-REV-001",), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, with_field("revision", lambda n: n + 1)))),
    Fault("capabilities-role-mismatch", "ServerInfo reports a role the advertised role-scoped profiles do not allow",
          ("REQ-CAP-011",), GET_SERVER_INFO, _w(lambda h: change_answer(GET_SERVER_INFO, _role_mismatch(h)))),
    Fault("limits-not-enforced", "Generate accepts requests beyond the advertised limits instead of INVALID_ARGUMENT",
          ("REQ-CAP-009", "REQ-SVC-003"), GENERATE, _w(lambda h: _admitted_despite(h, _every_limit))),
    Fault("features-off-accepted",
          "Generate accepts min_p, logprobs and guided decoding that the capabilities advertise as off "
          "(numeric limits are still enforced)",
          ("REQ-CAP-009",), GENERATE, _w(lambda h: _admitted_despite(h, _switches))),
    Fault("unadvertised-rpc-implemented",
          "RPCs of profiles that are not advertised answer instead of failing with UNIMPLEMENTED",
          ("REQ-CORE-003",), "every RPC", _w(_unadvertised_answered)),
    Fault("profiles-shrink-when-busy", "while any request is in flight Capabilities lists openengine.core alone",
          ("REQ-CORE-005",), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, lambda caps, r: h.reference.scheduler.in_flight()
                                     and _keep_profiles(caps, lambda p: p.name == CORE)))),
    Fault("role-unspecified", "ServerInfo.engine_role is ENGINE_ROLE_UNSPECIFIED",
          ("REQ-CORE-012",), GET_SERVER_INFO,
          _w(lambda h: change_answer(GET_SERVER_INFO, with_field("engine_role", lambda role: 0)))),
    Fault("vendor-name-not-canonical", "Capabilities.profiles also lists a vendor profile named `Acme.Fast_Path`",
          ("REQ-CAP-001",), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, lambda caps, r: caps.profiles.add(name="Acme.Fast_Path", major=1)))),
    Fault("vendor-major-zero", "Capabilities.profiles also lists the vendor profile com.example.batch at major version 0",
          ("REQ-CAP-002",), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, lambda caps, r: caps.profiles.add(name="com.example.batch",
                                                                                          major=0)))),
    Fault("reserved-name-invented",
          "Capabilities.profiles also lists openengine.turbo, a name the registry does not define",
          ("REQ-CAP-004",), GET_CAPABILITIES,
          _w(lambda h: change_answer(GET_CAPABILITIES, lambda caps, r: caps.profiles.add(name="openengine.turbo",
                                                                                          major=1)))),
    Fault("model-info-drifts",
          "every second GetModelInfo reports max_context_length one smaller, within one revision",
          ("REQ-REV-002",), GET_MODEL_INFO, _w(lambda h: change_answer(GET_MODEL_INFO, _model_info_drifts()))),
    Fault("model-scoped-profile-unlisted",
          "Capabilities.models leaves out the first model-scoped profile each model supports, while "
          "Capabilities.profiles still advertises it",
          ("REQ-CAP-012",), GET_CAPABILITIES, _w(lambda h: change_answer(GET_CAPABILITIES, _without_scoped_profile))),
    Fault("services-unversioned-names",
          "every openengine.v1 RPC is also served under its service name without the version "
          "(`openengine.Control/GetServerInfo`)",
          ("REQ-SVC-001",), "every RPC", _w(lambda h: _RenamedService())),
    Fault("model-info-unknown-answered",
          "GetModelInfo for a model the engine does not serve answers an empty ModelInfo naming it",
          ("REQ-CORE-020.1",), GET_MODEL_INFO,
          _w(lambda h: answer_instead(GET_MODEL_INFO, grpc.StatusCode.NOT_FOUND,
                                      lambda r, cls: cls(served_model_name=r.model)))),
    Fault("model-info-empty-refused",
          "GetModelInfo with an empty model fails INVALID_ARGUMENT although the engine serves one model",
          ("REQ-CORE-020.2",), GET_MODEL_INFO, _w(lambda h: OnRpc(GET_MODEL_INFO, _empty_model_refused))),
    Fault("capacity-disagrees",
          "ServerInfo.capacity.max_running_requests is one more than the max_running_requests limit",
          ("REQ-CAP-014",), GET_SERVER_INFO,
          _w(lambda h: change_answer(GET_SERVER_INFO, with_field("capacity.max_running_requests", lambda n: n + 1)))),
    Fault("schema-release-branch", "ServerInfo.schema_release is the branch name \"main\"",
          ("REQ-REV-009",), GET_SERVER_INFO,
          _w(lambda h: change_answer(GET_SERVER_INFO, with_field("schema_release", lambda s: "main")))),
    Fault("control-health-not-ready", "Control/Health answers HEALTH_STATE_NOT_READY where it would answer READY",
          ("REQ-HEALTH-014",), CONTROL_HEALTH,
          _w(lambda h: change_answer(CONTROL_HEALTH, lambda a, r: a.state == lifecycle_pb2.HEALTH_STATE_READY
                                     and setattr(a, "state", lifecycle_pb2.HEALTH_STATE_NOT_READY)))),
    Fault("unload-unknown-ok", "UnloadLora of an adapter that is not loaded answers OK instead of NOT_FOUND",
          ("REQ-ADAPT-001",), UNLOAD_LORA,
          _w(lambda h: answer_instead(UNLOAD_LORA, grpc.StatusCode.NOT_FOUND, lambda r, cls: cls()))),
    Fault("malformed-priority-ignored",
          "Generate ignores an openengine-priority value that is not a number instead of refusing it",
          ("REQ-SVC-007",), "Inference metadata",
          _w(lambda h: OnMetadata(lambda method: method == GENERATE, change=_malformed_priority_dropped))),
    # -- Health ------------------------------------------------------------------------------------
    Fault("health-not-per-service",
          "the health service reports only the whole server (\"\"), no advertised service by name",
          ("REQ-HEALTH-002", "REQ-HEALTH-007", "REQ-HEALTH-009"), HEALTH, _w(lambda h: _not_per_service())),
    Fault("health-unknown-not-found", "health Check answers SERVING for unknown service names instead of NOT_FOUND",
          ("REQ-HEALTH-003",), CHECK,
          _w(lambda h: answer_instead(CHECK, grpc.StatusCode.NOT_FOUND, lambda r, cls: H(status=H.SERVING)))),
    Fault("health-watch-no-initial", "health Watch waits for a change instead of sending the current status first",
          ("REQ-HEALTH-005", "REQ-HEALTH-006"), WATCH,
          _w(lambda h: drop_messages(WATCH, lambda m, dropped: not dropped, renumber=False))),
    Fault("health-pause-not-reflected", "pausing or draining leaves openengine.v1.Inference SERVING",
          ("REQ-HEALTH-007", "REQ-HEALTH-011"), HEALTH, _w(_serving_unless_stopping)),
    Fault("health-list-unimplemented", "health List answers UNIMPLEMENTED",
          ("REQ-HEALTH-013",), LIST,
          _w(lambda h: refuse(LIST, grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!"))),
    Fault("health-unimplemented", "health Check and Watch answer UNIMPLEMENTED",
          ("REQ-HEALTH-001",), HEALTH,
          _w(lambda h: [refuse(CHECK, grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!"),
                        refuse(WATCH, grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")])),
    Fault("health-overall-not-serving", "health reports \"\" NOT_SERVING while openengine.v1.Inference is SERVING",
          ("REQ-HEALTH-004",), HEALTH, _w(lambda h: _statuses(lambda name, s: H.NOT_SERVING if name == "" else s))),
    Fault("admin-address-overall-not-serving",
          "on an admin address of its own, health reports \"\" NOT_SERVING while openengine.v1.Admin is SERVING",
          ("REQ-ADMIN-001",), HEALTH, _w(lambda h: _admin_address_overall_not_serving())),
    Fault("shutdown-health-serving",
          "during a graceful shutdown health reports every name SERVING: open Watch streams end without NOT_SERVING",
          ("REQ-HEALTH-010",), HEALTH, _w(_serving_while_stopping)),
    # -- Generate -----------------------------------------------------------------------------------
    Fault("generate-no-terminal",
          "an aborted Generate stream ends with status OK but without its FINISH_REASON_CANCELLED finished events",
          ("REQ-CORE-010.4",), GENERATE, _w(lambda h: change_stream(GENERATE, _no_cancelled_finished))),
    Fault("final-without-usage", "Generate's final response carries no usage",
          ("REQ-CORE-017.1",), GENERATE, _w(lambda h: change_messages(GENERATE, lambda m, r: m.ClearField("usage")))),
    Fault("chunk-after-final",
          "Generate sends an empty token event of an output after its finished when more of the stream follows",
          ("REQ-CORE-009.2",), GENERATE, _w(lambda h: change_stream(GENERATE, _token_after_finished))),
    Fault("generate-ends-internal", "a Generate stream that sent its finished events ends with INTERNAL instead of OK",
          ("REQ-CORE-009.3",), GENERATE, _w(lambda h: OnRpc(GENERATE, _ends_internal))),
    Fault("max-tokens-overrun", "the backend runs each request with one token more than its max_tokens",
          ("REQ-CORE-019.1",), "backend", engine=_runs_changed(_one_token_more)),
    Fault("stop-token-ids-ignored", "the backend runs each request without its stop_token_id conditions",
          ("REQ-CORE-013.1",), "backend", engine=_runs_changed(_without_conditions("stop_token_id"))),
    Fault("stop-strings-ignored", "the backend runs each request without its stop_text conditions",
          ("REQ-CORE-013.2",), "backend", engine=_runs_changed(_without_conditions("stop_text"))),
    Fault("stop-string-kept",
          "the backend keeps a matched stop string in the output even when include_stop_in_output is false",
          ("REQ-CORE-013.3",), "backend",
          engine=_runs_changed(lambda m: setattr(m.stopping, "include_stop_in_output", True))),
    Fault("full-not-retryable",
          "a Generate refused because the engine is full gets RESOURCE_EXHAUSTED without the retryable "
          "EngineError in its status details",
          ("REQ-CORE-014",), GENERATE,
          _w(lambda h: recode(GENERATE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.RESOURCE_EXHAUSTED,
                              keep_details=False))),
    Fault("paused-failed-precondition",
          "a Generate while Inference is NOT_SERVING fails FAILED_PRECONDITION instead of UNAVAILABLE",
          ("REQ-HEALTH-008",), GENERATE,
          _w(lambda h: recode(GENERATE, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION,
                              keep_details=False))),
    Fault("numbers-not-checked", "Generate accepts NaN, infinite and out-of-domain sampling numbers",
          ("REQ-SVC-005",), GENERATE, _w(lambda h: _admitted_despite(h, _numbers))),
    Fault("revision-aborts-not-retryable",
          "a request the engine cancels for a new capability revision ends with an EngineError that is not retryable",
          ("REQ-REV-007",), "backend", engine=_cancelled_for_revision),
    Fault("generate-event-less-response",
          "Generate sends a response that sets no event (only request_id) before each finished event",
          ("REQ-CORE-009.1",), GENERATE, _w(lambda h: change_stream(GENERATE, _event_less_before_finished))),
    Fault("request-id-first-only", "Generate leaves request_id empty on every response after the first",
          ("REQ-CORE-015",), GENERATE, _w(lambda h: change_stream(GENERATE, _request_id_on_first_only))),
    Fault("output-index-zero-unset",
          "Generate leaves output_index unset (absent, not 0) on the token and finished events of output 0",
          ("REQ-CORE-016.1",), GENERATE, _w(lambda h: change_messages(GENERATE, _output_zero_unindexed))),
    Fault("token-text-cumulative", "each token event's text repeats all the text of its output so far",
          ("REQ-CORE-016.2",), GENERATE, _w(lambda h: change_stream(GENERATE, _cumulative_text))),
    Fault("prompt-after-token", "Generate sends the prompt event after the first token event, not first",
          ("REQ-CORE-016.3",), GENERATE, _w(lambda h: change_stream(GENERATE, _prompt_after_first_token))),
    Fault("usage-total-prompt-only", "usage.total_tokens counts the prompt tokens alone",
          ("REQ-CORE-017.2",), GENERATE,
          _w(lambda h: change_messages(GENERATE, _usage(lambda u: setattr(u, "total_tokens", u.prompt_tokens))))),
    Fault("usage-completion-one-more",
          "usage.completion_tokens (and total_tokens with it) counts one token more than were generated",
          ("REQ-CORE-017.3",), GENERATE, _w(lambda h: change_messages(GENERATE, _usage(_one_completion_token_more)))),
    Fault("usage-cached-above-prompt", "usage.cached_prompt_tokens is one more than prompt_tokens",
          ("REQ-CORE-017.4",), GENERATE,
          _w(lambda h: change_messages(GENERATE, _usage(
              lambda u: setattr(u, "cached_prompt_tokens", u.prompt_tokens + 1))))),
    Fault("stop-match-omitted", "finished events leave stop_match unset, FINISH_REASON_STOP included",
          ("REQ-CORE-018",), GENERATE,
          _w(lambda h: change_messages(GENERATE, lambda m, r: m.HasField("finished")
                                       and m.finished.ClearField("stop_match")))),
    Fault("min-tokens-ignored", "the backend runs each request without its stopping.min_tokens",
          ("REQ-CORE-019.2",), "backend", engine=_runs_changed(lambda m: m.stopping.ClearField("min_tokens"))),
    Fault("ignore-eos-ignored", "the backend runs each request with stopping.ignore_eos false",
          ("REQ-CORE-019.3",), "backend",
          engine=_runs_changed(lambda m: setattr(m.stopping, "ignore_eos", False))),
    Fault("seed-ignored", "the backend runs each seeded request with a random seed in place of the one sent",
          ("REQ-CORE-006",), "backend", engine=_runs_changed(_random_seed)),
    Fault("failure-as-status",
          "an accepted Generate or SubscribeKvEvents stream that fails (a KV subscription at shutdown) ends "
          "with status INTERNAL instead of a terminal EngineError message and OK",
          ("REQ-SVC-002",), "every stream with an EngineError",
          _w(lambda h: [OnRpc(GENERATE, _failure_as_status), OnRpc(SUBSCRIBE_KV_EVENTS, _failure_as_status)])),
    # -- Abort and cancellation ---------------------------------------------------------------------
    Fault("abort-ignored", "Abort(all_requests) answers ABORTED but leaves the requests running",
          ("REQ-CORE-010.3",), ABORT, _w(lambda h: _claims_aborted(h, "all_requests"))),
    Fault("abort-by-id-ignored", "Abort by request_id answers ABORTED but leaves the request running",
          ("REQ-CORE-010.1",), ABORT, _w(lambda h: _claims_aborted(h, "request_id"))),
    Fault("kv-session-aborts-all", "Abort by kv_session ends every request the engine holds",
          ("REQ-CORE-010.2",), ABORT, _w(lambda h: change_request(ABORT, _kv_session_is_all))),
    Fault("abort-finished-aborted",
          "Abort of a request that has already finished answers ABORTED instead of ALREADY_FINISHED",
          ("REQ-CORE-010.5",), ABORT, _w(lambda h: change_answer(ABORT, _finished_as_aborted))),
    Fault("abort-unknown-aborted", "Abort of a request_id the engine never saw answers ABORTED instead of NOT_FOUND",
          ("REQ-CORE-010.6",), ABORT, _w(lambda h: answer_instead(ABORT, grpc.StatusCode.NOT_FOUND, _aborted))),
    Fault("abort-queued-when-slot-frees",
          "the stream of a request aborted while queued gets its finished events only once a slot is free",
          ("REQ-CORE-010.7",), GENERATE, _w(_queued_abort_waits_for_a_slot)),
    Fault("abort-no-target-accepted", "an AbortRequest without a target answers ABORTED instead of INVALID_ARGUMENT",
          ("REQ-CORE-010.8",), ABORT,
          _w(lambda h: answer_instead(ABORT, grpc.StatusCode.INVALID_ARGUMENT, _aborted))),
    Fault("abort-unimplemented", "Control/Abort answers UNIMPLEMENTED although openengine.core is advertised",
          ("REQ-CORE-001.1",), ABORT,
          _w(lambda h: refuse(ABORT, grpc.StatusCode.UNIMPLEMENTED, "Abort is not implemented"))),
    Fault("client-cancel-ignored",
          "a running Generate the client cancels keeps running (and counted in load) until its natural end",
          ("REQ-CORE-011.1",), "backend", engine=_ignore_cancel(when_running=True)),
    Fault("cancel-ignored-while-queued",
          "a queued Generate the client cancels stays queued, runs when a slot frees and is counted until its end",
          ("REQ-CORE-011.2",), "backend", engine=_ignore_cancel(when_running=False)),
    # -- Load ---------------------------------------------------------------------------------------
    Fault("getload-instance-mismatch", "GetLoad reports an instance id other than ServerInfo's",
          ("REQ-LOAD-002",), GET_LOAD,
          _w(lambda h: change_answer(GET_LOAD, with_field("instance_id", lambda i: "not-" + i)))),
    Fault("load-ranks-not-summed", "per-rank used_kv_blocks leave out the prefix cache that the total counts",
          ("REQ-LOAD-023",), GET_LOAD, _w(lambda h: change_answer(GET_LOAD, _ranks_without_cache(h)))),
    Fault("getload-no-timestamp", "GetLoad answers a LoadInfo without timestamp_unix_nanos",
          ("REQ-LOAD-001.1",), GET_LOAD,
          _w(lambda h: change_answer(GET_LOAD, lambda load, r: load.ClearField("timestamp_unix_nanos")))),
    Fault("getload-cached",
          "GetLoad answers, for each value of include_per_rank, the snapshot it built for the first such call",
          ("REQ-LOAD-001.2",), GET_LOAD, _w(lambda h: OnRpc(GET_LOAD, _getload_first_answer()))),
    Fault("getload-ranks-unasked", "GetLoad answers per-rank entries whether or not the request asks for them",
          ("REQ-LOAD-001.3",), GET_LOAD, _w(lambda h: change_request(GET_LOAD, _with_ranks))),
    Fault("getload-running-over-capacity",
          "GetLoad adds max_running_requests to running_requests whenever any request runs",
          ("REQ-LOAD-024.1",), GET_LOAD, _w(lambda h: change_answer(GET_LOAD, _running_over_capacity(h)))),
    Fault("getload-phantom-running",
          "GetLoad keeps counting the first Generate stream the client cancelled as running",
          ("REQ-LOAD-024.2",), GET_LOAD, _w(_cancelled_stream_counted)),
    # -- Runtime events, sessions, revisions, tasks, admin -------------------------------------------
    Fault("events-sequence-from-zero", "SubscribeRuntimeEvents numbers its messages from 0 instead of 1",
          ("REQ-EVENTS-001",), RUNTIME_EVENTS,
          _w(lambda h: change_messages(RUNTIME_EVENTS, with_field("sequence", lambda s: s - 1)))),
    Fault("events-initial-state-wrong", "SubscribeRuntimeEvents reports PAUSED as the initial state of a serving engine",
          ("REQ-EVENTS-002",), RUNTIME_EVENTS, _w(lambda h: change_stream(RUNTIME_EVENTS, _initial_state_paused))),
    Fault("revision-event-missing", "SubscribeRuntimeEvents never sends CapabilityRevisionChanged",
          ("REQ-REV-005",), RUNTIME_EVENTS,
          _w(lambda h: drop_messages(RUNTIME_EVENTS, lambda m, _: m.event.HasField("capability_revision_changed")))),
    Fault("session-ttl-not-clamped", "OpenSession grants a time to live longer than max_session_ttl_ms",
          ("REQ-SESS-001",), OPEN_SESSION, _w(lambda h: change_answer(OPEN_SESSION, _unclamped_ttl(h)))),
    Fault("config-change-same-revision", "UpdateConfig changes the limits without starting a new capability revision",
          ("REQ-REV-003",), "every revision reported", _w(_revision_as_first)),
    Fault("pause-changes-revision", "PauseGeneration starts a new capability revision",
          ("REQ-REV-004",), "every revision reported", _w(_pause_revises)),
    Fault("task-family-unimplemented",
          "a task RPC for a family the model's supported_tasks does not list fails UNIMPLEMENTED instead of "
          "INVALID_ARGUMENT",
          ("REQ-TASKS-001",), "openengine.v1.Tasks", _w(_family_unimplemented)),
    Fault("admin-no-auth", "Admin performs calls without checking credentials",
          ("REQ-ADMIN-002",), "Admin metadata",
          _w(lambda h: OnMetadata(_admin_calls, change=_with_authorization(lambda value: _bearer(h))))),
    Fault("bearer-scheme-case-sensitive", "the admin guard accepts the bearer scheme only when spelled exactly `Bearer`",
          ("REQ-ADMIN-006",), "Admin metadata", _w(lambda h: OnMetadata(_admin_calls, refuse=_exact_scheme))),
    Fault("admin-guard-on-inference", "the admin credentials are required by Inference too, not by Admin alone",
          ("REQ-ADMIN-004",), "Inference metadata",
          _w(lambda h: OnMetadata(lambda method: method.startswith(f"{INFERENCE}/"), refuse=_guarded_inference(h)))),
    Fault("limited-token-allowed",
          "the admin guard also accepts `limited-<admin token>`, a credential meant to allow no Admin "
          "operation, and performs every call made with it instead of PERMISSION_DENIED",
          ("REQ-ADMIN-003",), "Admin metadata",
          _w(lambda h: OnMetadata(_admin_calls, change=_with_authorization(_limited_as_full(h))))),
    # -- the wire -----------------------------------------------------------------------------------
    Fault("wire-policy-off",
          "undecodable requests fail with gRPC's default UNKNOWN status naming the Python exception",
          ("REQ-SVC-006",), "every RPC", _w(lambda h: _WirePolicyOff())),
)}
