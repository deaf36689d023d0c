"""Faults the reference engine can be told to commit, each one wrong behaviour.

Each fault makes the engine misbehave in exactly one way a client can observe over the wire and
lists every requirement, or clause of one (`REQ-CORE-010.7`), that behaviour violates, so the
conformance runner's own tests can start the engine with `--fault NAME` and expect the cases
citing them to fail. This table is the one place faults are defined: the engine installs the
configured ones, `oespec engine --list-faults` prints it, and tests read it.

Neither the SDK nor the backend knows about faults. A fault is a layer (`openengine.serve.Layer`)
run on the assembled server before it starts, wrapping the one part named beside it; most layers
are one of the constructors below given a small change.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import grpc
from grpc_health.v1 import health_pb2

from openengine.contract import WORK_SERVICES, role_numbers
from openengine.contractkit.rules import RuleCatalogue, RuleSpec, Severity
from openengine.legacy.rev2.v1 import openengine_pb2 as rev2
from openengine.legacy.rev3.v1 import control_pb2 as rev3
from openengine.serve import AbortReason, Gate, Layer, Refusal, RefusalCode
from openengine.serve.admission import Admission
from openengine.serve.protocol import abort_targets
from openengine.serve.runstate import STOPPING
from openengine.serve.server import INFERENCE, authorization, bearer_matches
from openengine.v1 import common_pb2, events_pb2, generation_pb2, lifecycle_pb2, load_pb2

DISCOVERY = "openengine.v1.Discovery"
OBSERVABILITY = "openengine.v1.Observability"
TASKS = "openengine.v1.Tasks"
HEALTH = "grpc.health.v1.Health"
LOAD = "openengine.load"
CORE = "openengine.core"

# The RPCs faults wrap, as `Service/Method`: the part a fault names and where its layer applies.
GET_CAPABILITIES = f"{DISCOVERY}/GetCapabilities"
GET_ENGINE_INFO = f"{DISCOVERY}/GetEngineInfo"
GET_MODEL_INFO = f"{DISCOVERY}/GetModelInfo"
GENERATE = f"{INFERENCE}/Generate"
ABORT = "openengine.v1.Lifecycle/Abort"
GET_LOAD = f"{OBSERVABILITY}/GetLoad"
WATCH_LOAD = f"{OBSERVABILITY}/WatchLoad"
RUNTIME_EVENTS = f"{OBSERVABILITY}/SubscribeRuntimeEvents"
OPEN_SESSION = "openengine.v1.Sessions/OpenSession"
PAUSE_GENERATION = "openengine.v1.Admin/PauseGeneration"


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    requirements: tuple[str, ...]
    part: str          # what the layer wraps: `Service/Method`, `gate`, `health statuses`, `backend`, ...
    layer: Layer

    @property
    def spec(self) -> RuleSpec:
        """The fault as a catalogue entry: the requirements an engine with it breaks on purpose."""
        area = self.part.split("/", 1)[0].rsplit(".", 1)[-1].lower()
        return RuleSpec(self.name, self.name, "fault", area, self.description, Severity.ERROR,
                        requirements=self.requirements)


def layers(names) -> list[Layer]:
    """The layers of the faults called `names`, in the table's order."""
    chosen = set(names)
    return [f.layer for f in FAULTS.values() if f.name in chosen]


# -- layer constructors: each wraps one part, given the change a fault makes to it -------------


class Wrapped:
    """An implementation with some methods replaced; everything else is the inner one's."""

    def __init__(self, inner: object, **methods: Callable):
        self._inner = inner
        self.__dict__.update(methods)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def wrap_method(rpc: str, make: Callable[[Callable, Any], Callable]) -> Layer:
    """The implementation of `rpc` (`Service/Method`) replaced by `make(inner, server)`."""
    service, name = rpc.split("/")

    def layer(server) -> None:
        inner = server.implementation_of(server.catalogue.rpc(service, name))
        server.implementations[service] = Wrapped(server.implementations[service], **{name: make(inner, server)})
    return layer


def _answers_changed(change: Callable[[Any, Any, Any], None]) -> Callable[[Callable, Any], Callable]:
    """A method's answers pass `change(answer, request, owner)`: owner is the server or the alias."""
    def make(inner, owner):
        async def answer(request, context):
            message = await inner(request, context)
            change(message, request, owner)
            return message
        return answer
    return make


def change_answer(rpc: str, change: Callable[[Any, Any, Any], None]) -> Layer:
    """A unary RPC whose answer `change(answer, request, server)` alters in place (or refuses)."""
    return wrap_method(rpc, _answers_changed(change))


def _as_message(wire):
    """WatchLoad's messages go out as bytes the SDK composed; a fault reads them as messages."""
    return load_pb2.WatchLoadResponse.FromString(wire) if type(wire) is bytes else wire


def change_stream(rpc: str, transform: Callable[[AsyncIterator, Any, Any], AsyncIterator]) -> Layer:
    """A streaming RPC whose messages pass `transform(messages, request, server)`, an async
    generator yielding what the client gets."""
    def make(inner, server):
        async def stream(request, context):
            async with contextlib.aclosing(inner(request, context)) as sent:
                messages = (_as_message(wire) async for wire in sent)
                async with contextlib.aclosing(transform(messages, request, server)) as changed:
                    async for message in changed:
                        yield message
        return stream
    return wrap_method(rpc, make)


def change_messages(rpc: str, change: Callable[[Any, Any, Any], None]) -> Layer:
    """A streaming RPC each of whose messages `change(message, request, server)` alters in place."""
    async def transform(messages, request, server):
        async for message in messages:
            change(message, request, server)
            yield message
    return change_stream(rpc, transform)


def drop_messages(rpc: str, drop: Callable[[Any, int], bool]) -> Layer:
    """A stream without the messages `drop(message, dropped so far)` picks, the rest renumbered
    so the sequence stays gapless."""
    async def transform(messages, request, server):
        dropped = 0
        async for message in messages:
            if drop(message, dropped):
                dropped += 1
                continue
            message.sequence -= dropped
            yield message
    return change_stream(rpc, transform)


async def _read_ahead(items: AsyncIterator, keep: Callable[[asyncio.Future], None] | None = None):
    """What `items` yields, read by a task of its own as soon as it comes and queued. Given to
    `keep`, the task outlives the reader; otherwise it stops when the reader does."""
    queue: asyncio.Queue = asyncio.Queue()

    async def read():
        try:
            async for item in items:
                queue.put_nowait(item)
        except Exception as error:   # a refusal or failure reaches the reader as raised
            queue.put_nowait(error)
        queue.put_nowait(None)

    task = asyncio.ensure_future(read())
    if keep is not None:
        keep(task)
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        if keep is None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def recode_refusals(rpc: str, code: RefusalCode, new_code: RefusalCode) -> Layer:
    """The RPC's refusals with `code` end the call with `new_code` instead, not retryable."""
    def make(inner, server):
        async def stream(request, context):
            try:
                async for message in inner(request, context):
                    yield message
            except Refusal as refusal:
                if refusal.code is not code:
                    raise
                raise Refusal(new_code, refusal.message) from None
        return stream
    return wrap_method(rpc, make)


def unimplemented(rpc: str) -> Layer:
    """The RPC refuses every call with UNIMPLEMENTED, whatever its profile says."""
    refusal = f"{rpc.split('/')[1]} is not implemented"

    def make(inner, server):
        async def answer(request, context):
            raise Refusal(RefusalCode.UNIMPLEMENTED, refusal)

        async def stream(request, context):
            raise Refusal(RefusalCode.UNIMPLEMENTED, refusal)
            yield   # unreachable: makes this an async generator, as the method it replaces is
        return stream if inspect.isasyncgenfunction(inner) else answer
    return wrap_method(rpc, make)


def alias_methods(name: str, make: Callable[[Callable, Any], Callable]) -> Layer:
    """Every served alias's method `name` replaced by `make(inner, alias)`."""
    def layer(server) -> None:
        for alias in server.aliases:
            served = server.implementations[alias.service]
            if hasattr(served, name):
                server.implementations[alias.service] = Wrapped(served, **{name: make(getattr(served, name), alias)})
    return layer


def health_methods(make: Callable[[Any], Callable], *names: str) -> Layer:
    """The health servicer's methods `names` each replaced by `make(servicer)`."""
    def layer(server) -> None:
        servicer = server.implementations[HEALTH]
        server.implementations[HEALTH] = Wrapped(servicer, **{name: make(servicer) for name in names})
    return layer


def change_health(change: Callable[[dict[str, int], Any], dict[str, int]]) -> Layer:
    """The statuses the server sets on its main address pass `change(statuses, server)`."""
    def layer(server) -> None:
        desired = server.desired_health
        server.desired_health = lambda: change(desired(), server)
    return layer


def replace_gate(gate_type: type[Gate], *, aliases_only: bool = False) -> Layer:
    """Calls (or only the alias calls) pass a gate of `gate_type` with the same state and token."""
    def layer(server) -> None:
        state, admin, token = server.gate.state, server.gate.admin, server.gate.token
        if not aliases_only:
            server.gate = gate_type(state, admin, token)
        for alias in server.aliases:
            server.implementations[alias.service].gate = gate_type(state, admin, token)
    return layer


def admit_despite(ignored: Callable[[Any], bool]) -> Layer:
    """Generate admitted although the shared preflight found the violations `ignored` picks."""
    class Lenient(Admission):
        def violations(self, routed, tokenizer):
            return [violation for violation in super().violations(routed, tokenizer) if not ignored(violation)]

    def layer(server) -> None:
        server.implementations[INFERENCE].admission = Lenient(server.state)
    return layer


def change_sampling(change: Callable[[Any], None]) -> Layer:
    """The backend runs each admitted request with its sampling altered by `change(sampling)`."""
    def layer(server) -> None:
        backend = server.backend
        generate = backend.generate

        def changed(request):
            message = type(request.message)()
            message.CopyFrom(request.message)
            change(message.sampling)
            return dataclasses.replace(request, message=message)

        backend.generate = lambda request: generate(changed(request))
    return layer


def with_load_limits(**values: Any) -> Layer:
    """Observability served over a view of the state in which these openengine.load limits hold,
    so WatchLoad uses (and reports) them instead of the advertised ones."""
    def layer(server) -> None:
        served = server.implementations[OBSERVABILITY]
        server.implementations[OBSERVABILITY] = type(served)(_LoadLimitsView(server.state, values))
    return layer


class _LoadLimitsView:
    def __init__(self, state, values: dict[str, Any]):
        self._state = state
        self._values = values

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)

    @property
    def selection(self):
        selection = self._state.selection
        load = {**selection.limits[LOAD], **self._values}
        return dataclasses.replace(selection, limits={**selection.limits, LOAD: load})


def with_field(path: str, value_of: Callable[[Any], Any]) -> Callable[[Any, Any, Any], None]:
    """A change to a message giving the field at the dotted `path` the value `value_of(its value)`."""
    *outer, name = path.split(".")

    def change(message, request, owner):
        for field in outer:
            message = getattr(message, field)
        setattr(message, name, value_of(getattr(message, name)))
    return change


def extra_profile(name: str, major: int) -> Layer:
    """Capabilities.profiles also lists the profile `name` at major version `major`."""
    return change_answer(GET_CAPABILITIES, lambda caps, request, server: caps.profiles.add(name=name, major=major))


# -- what the faults do: aliases and gates ------------------------------------------------------


def _abort_nothing(inner, alias):
    async def abort(request, context):
        if alias.name == "openengine":
            return rev2.AbortResponse(status=rev2.ABORT_STATUS_NOT_FOUND, message="nothing to abort")
        return rev3.AbortResponse(status=rev3.ABORT_STATUS_ALREADY_FINISHED, message="nothing to abort")
    return abort


def _without_aliases(statuses, server):
    return {name: status for name, status in statuses.items() if name not in {a.service for a in server.aliases}}


class _ProfileBlindGate(Gate):
    def unadvertised(self, rpc):
        return None


class _OpenAdminGate(Gate):
    def credentials(self, context):
        return None


class _DrainOpenGate(Gate):
    def refusal(self, rpc, context):
        return self.unadvertised(rpc) if rpc.method.name == "Drain" else super().refusal(rpc, context)


class _ExactBearerGate(Gate):
    def credentials(self, context):
        refusal = super().credentials(context)
        if refusal is None and self.token and not authorization(context).startswith("Bearer "):
            return Refusal(RefusalCode.UNAUTHENTICATED, "Admin needs 'authorization: Bearer <token>' metadata")
        return refusal


class _GuardInferenceGate(Gate):
    def refusal(self, rpc, context):
        return super().refusal(rpc, context) or (self.credentials(context) if rpc.service == INFERENCE else None)


LIMITED_PREFIX = "limited-"


class _LimitedTokenAllowedGate(Gate):
    def credentials(self, context):
        refusal = super().credentials(context)
        if refusal is not None and self.token and bearer_matches(authorization(context), LIMITED_PREFIX + self.token):
            return None
        return refusal


# -- WatchLoad ----------------------------------------------------------------------------------


async def _snapshot_before_settings(messages, request, server):
    settings = await anext(messages, None)
    if settings is None:
        return
    if settings.settings.initial_snapshot:
        first = await anext(messages, None)
        if first is not None:
            # The numbers and times keep their order; only the kinds change places.
            first.sequence, settings.sequence = settings.sequence, first.sequence
            stamp = load_pb2.WatchLoadResponse(timestamp=first.timestamp).timestamp
            first.timestamp.CopyFrom(settings.timestamp)
            settings.timestamp.CopyFrom(stamp)
            yield first
    yield settings
    async for message in messages:
        yield message


def _first_initial_snapshot(message, dropped: int) -> bool:
    return not dropped and message.sequence == 1 and message.HasField("snapshot")


def _every_second_a_second_early(message, request, server):
    if message.sequence % 2 == 1:
        message.timestamp.FromNanoseconds(message.timestamp.ToNanoseconds() - 1_000_000_000)


def _foreign_instance(message, request, server):
    if message.HasField("settings"):
        message.settings.instance_id = "not-" + message.settings.instance_id
    elif message.HasField("snapshot"):
        message.snapshot.load.instance_id = "not-" + message.snapshot.load.instance_id


def _uncounted_gaps(message, request, server):
    if message.HasField("snapshot"):
        message.snapshot.coalesced = 0


def _per_rank_as_asked(message, request, server):
    if message.HasField("settings"):
        message.settings.per_rank = request.per_rank


async def _end_after_opening(messages, request, server):
    settings = await anext(messages, None)
    if settings is None:
        return
    yield settings
    if settings.settings.initial_snapshot:
        first = await anext(messages, None)
        if first is not None:
            yield first


async def _heartbeat_from_heartbeat(messages, request, server):
    settings = await anext(messages, None)
    if settings is None:
        return
    yield settings
    beat = settings.settings.heartbeat_ms / 1000.0
    sequence = settings.sequence + 1
    loop = asyncio.get_running_loop()
    due = loop.time() + beat
    pending = asyncio.ensure_future(anext(messages, None))
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=max(0.0, due - loop.time()) if beat else None)
            if pending in done:
                message = pending.result()
                if message is None:
                    return
                pending = asyncio.ensure_future(anext(messages, None))
                if message.HasField("heartbeat"):
                    continue
            else:
                message = load_pb2.WatchLoadResponse(heartbeat=load_pb2.Heartbeat())
                message.timestamp.FromNanoseconds(server.state.clock.now_ns())
                due = loop.time() + beat
            message.sequence = sequence
            sequence += 1
            yield message
    finally:
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await pending


def _kept_across_revisions(inner, server):
    """A stream the revision change ends is opened again behind the client's back."""
    async def stream(request, context):
        sequence, reopened = 0, False
        while True:
            try:
                async with contextlib.aclosing(inner(request, context)) as sent:
                    async for wire in sent:
                        message = _as_message(wire)
                        if reopened and message.HasField("settings"):
                            continue
                        message.sequence = sequence
                        sequence += 1
                        yield message
                return
            except Refusal as refusal:
                if refusal.code is not RefusalCode.ABORTED:
                    raise
                reopened = True
    return stream


def _cancel_aborts_everything(inner, server):
    async def stream(request, context):
        try:
            async with contextlib.aclosing(inner(request, context)) as sent:
                async for message in sent:
                    yield message
        except (asyncio.CancelledError, GeneratorExit):
            server.state.abort_all(AbortReason.ABORT_RPC)
            raise
    return stream


async def _snapshot_deltas(messages, request, server):
    previous = None
    async for message in messages:
        if message.HasField("snapshot"):
            load = message.snapshot.load
            current = load_pb2.LoadInfo()
            current.CopyFrom(load)
            if previous is not None:
                for field, value in list(load.ListFields()):
                    if field.name != "timestamp" and getattr(previous, field.name) == value:
                        load.ClearField(field.name)
            previous = current
        yield message


async def _every_second_snapshot(messages, request, server):
    dropped, periodic = 0, 0
    async for message in messages:
        if message.HasField("snapshot") and message.sequence > 1:
            periodic += 1
            if periodic % 2 == 0:
                dropped += 1
                continue
        message.sequence -= dropped
        yield message


async def _empty_after_settings(messages, request, server):
    added = 0
    async for message in messages:
        message.sequence += added
        yield message
        if message.HasField("settings"):
            empty = load_pb2.WatchLoadResponse(sequence=message.sequence + 1)
            empty.timestamp.CopyFrom(message.timestamp)
            added = 1
            yield empty


def _snapshot_backlog(inner, server):
    async def stream(request, context):
        async with contextlib.aclosing(_read_ahead(inner(request, context))) as backlog:
            async for message in backlog:
                yield message
    return stream


def _one_sender(inner, server):
    sending = asyncio.Lock()

    async def stream(request, context):
        async with contextlib.aclosing(inner(request, context)) as sent:
            async for message in sent:
                async with sending:
                    yield message
    return stream


# -- discovery ----------------------------------------------------------------------------------


def _keep_profiles(caps, keep: Callable[[Any], bool]) -> None:
    kept = [profile for profile in caps.profiles if keep(profile)]
    del caps.profiles[:]
    caps.profiles.extend(kept)


def _without_core(caps, request, server):
    _keep_profiles(caps, lambda profile: profile.name != server.catalogue.core)


def _core_only_when_busy(caps, request, server):
    if server.state.in_flight:
        _keep_profiles(caps, lambda profile: profile.name == server.catalogue.core)


def _last_profile_twice(caps, request, server):
    if caps.profiles:
        caps.profiles.append(caps.profiles[-1])


def _unadvertised_submessage(caps, request, server):
    missing = next((p for p in server.catalogue.profiles if p.capability_field and not server.state.has(p.name)), None)
    if missing is not None:
        getattr(caps, missing.capability_field).SetInParent()


def _role_mismatch(info, request, server):
    roles = role_numbers()
    role_scoped = [p for p in server.state.advertised if p.scope == "role"]
    allowed = set(role_scoped[0].roles) if role_scoped else {server.description.role}
    info.role = roles[next(r for r in roles if r not in allowed)]


def _model_info_alternating(inner, server):
    calls = 0

    async def model_info(request, context):
        nonlocal calls
        info = await inner(request, context)
        calls += 1
        if calls % 2 == 0:
            info.max_context_tokens -= 1
        return info
    return model_info


def _without_scoped_profile(info, request, server):
    scoped = {p.name for p in server.state.advertised if p.scope == "model"}
    listed = [p for p in info.capabilities.profiles if p.name in scoped]
    if listed:
        info.capabilities.profiles.remove(listed[0])


def _is_switch_violation(violation) -> bool:
    """A sampling switch or guided mode advertised off, not a numeric limit."""
    return (violation.rule_id == "OEV402" and violation.path.startswith("sampling.")) \
        or (violation.rule_id == "OEV404" and violation.path.startswith("sampling.guided"))


class _RenamedService(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, details):
        service, _, method = details.method.lstrip("/").partition("/")
        if service.startswith("openengine.") and service.count(".") == 1:
            # gRPC takes only its own kind of call details back: one of the same type, renamed.
            details = type(details)(f"/openengine.v1.{service.split('.', 1)[1]}/{method}",
                                    details.invocation_metadata)
        return await continuation(details)


# -- Generate, Abort and cancellation -----------------------------------------------------------


async def _no_aborted_terminal(messages, request, server):
    async for message in messages:
        if message.HasField("error") and message.error.code == common_pb2.ERROR_CODE_ABORTED:
            return
        yield message


def _final_without_usage(message, request, server):
    if message.HasField("final"):
        message.final.ClearField("usage")


async def _chunk_after_final(messages, request, server):
    ended = None
    async for message in messages:
        if ended is not None:
            yield generation_pb2.GenerateResponse(chunk=generation_pb2.GenerateChunk(index=ended))
            ended = None
        if message.HasField("final"):
            ended = message.final.index
        yield message


def _ends_internal(inner, server):
    async def stream(request, context):
        finished = False
        async with contextlib.aclosing(inner(request, context)) as sent:
            async for message in sent:
                finished = finished or message.HasField("final")
                yield message
        if finished:
            await context.abort(grpc.StatusCode.INTERNAL, "the stream ended after its final")
    return stream


async def _aborted_not_retryable_after_revision(messages, request, server):
    accepted = server.state.revision
    async for message in messages:
        if server.state.revision != accepted and not message.HasField("final"):
            yield generation_pb2.GenerateResponse(error=common_pb2.EngineError(
                code=common_pb2.ERROR_CODE_ABORTED, message="the capabilities changed", retryable=False))
            return
        yield message


async def _queued_abort_waits_for_a_slot(messages, request, server):
    scheduler = server.backend.scheduler
    ran = False
    async for message in messages:
        ran = ran or message.HasField("chunk")
        if not ran and message.HasField("error") and message.error.code == common_pb2.ERROR_CODE_ABORTED:
            most = int(server.state.limit(CORE, "max_running_requests"))
            while len(scheduler.running) >= most:   # the scheduler signals no free slot: poll
                await asyncio.sleep(0.01)
        yield message


def _abort_counts_only(form: str):
    def make(inner, server):
        async def abort(request: lifecycle_pb2.AbortRequest, context):
            if request.WhichOneof("target") != form:
                return await inner(request, context)
            found = [f for f in abort_targets(server.state, request) if f.aborted is None]
            return lifecycle_pb2.AbortResponse(aborted=len(found))
        return abort
    return make


def _kv_session_aborts_all(inner, server):
    async def abort(request: lifecycle_pb2.AbortRequest, context):
        if request.WhichOneof("target") == "kv_session_id":
            request = lifecycle_pb2.AbortRequest(all=True)
        return await inner(request, context)
    return abort


def _nothing_to_abort_not_found(answer, request, server):
    if answer.aborted == 0:
        raise Refusal(RefusalCode.NOT_FOUND, "no request to abort")


def _ignore_cancel(when_running: bool) -> Layer:
    """The backend ignores a client's cancelling a running (or, `when_running` false, queued)
    request: its outputs are read by a task of its own, which the cancelled call's task never is."""
    def layer(server) -> None:
        backend = server.backend
        generate, abort = backend.generate, backend.abort

        async def abort_unless_cancelled(request_id, reason):
            running = request_id in backend.scheduler.running
            if reason is not AbortReason.CLIENT_CANCELLED or running != when_running:
                await abort(request_id, reason)

        backend.generate = lambda request: _read_ahead(generate(request), keep=server.state.keep)
        backend.abort = abort_unless_cancelled
    return layer


def _one_token_more(sampling) -> None:
    if sampling.HasField("max_tokens"):
        sampling.max_tokens += 1


# -- health -------------------------------------------------------------------------------------


def _unknown_serving(servicer):
    async def check(request, context):
        if request.service not in servicer._server_status:
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
        return await servicer.Check(request, context)
    return check


def _watch_without_initial(servicer):
    async def watch_changes_only(request, context):
        unknown = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        condition = servicer._server_watchers[request.service]
        last = servicer._server_status.get(request.service, unknown)
        async with condition:
            while True:
                await condition.wait()
                status = servicer._server_status.get(request.service, unknown)
                if status != last:
                    await context.write(health_pb2.HealthCheckResponse(status=status))
                    last = status
    return watch_changes_only


def _health_unimplemented(servicer):
    async def refuse(request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
    return refuse


def _serving_unless_stopping(statuses, server):
    if server.state.run.phase != STOPPING:
        serving = health_pb2.HealthCheckResponse.SERVING
        statuses = {name: serving if name in WORK_SERVICES or name == "" else status
                    for name, status in statuses.items()}
    return statuses


def _overall_not_serving(statuses, server):
    return {**statuses, "": health_pb2.HealthCheckResponse.NOT_SERVING}


def _admin_health_overall_not_serving(server) -> None:
    if server.admin_health is None:
        return
    update = server.admin_health.update

    async def update_overall_not_serving(statuses, **options):
        await update(_overall_not_serving(statuses, server), **options)
    server.admin_health.update = update_overall_not_serving


def _serving_while_stopping(server) -> None:
    health = server.health

    async def keep_statuses() -> None:   # the servicer's own shutdown would set NOT_SERVING
        health.shutting_down = True
    health.shutdown = keep_statuses

    def serving(statuses, server):
        if server.state.run.phase != STOPPING:
            return statuses
        return {name: health_pb2.HealthCheckResponse.SERVING for name in statuses}
    change_health(serving)(server)


# -- load, events, sessions, revisions, tasks ---------------------------------------------------


def _ranks_without_cache(load, request, server):
    cached, size = len(server.backend.prefix_cache), len(load.ranks)
    for rank in load.ranks:
        share = cached // size + (1 if rank.data_parallel_rank < cached % size else 0)
        rank.used_kv_blocks = max(0, rank.used_kv_blocks - share)


def _getload_first_answer(inner, server):
    kept: dict[bool, Any] = {}

    async def get_load(request, context):
        if request.per_rank not in kept:
            kept[request.per_rank] = await inner(request, context)
        return kept[request.per_rank]
    return get_load


def _getload_ranks_always(inner, server):
    async def get_load(request, context):
        return server.state.build_load_info(per_rank=True)
    return get_load


async def _initial_state_paused(messages, request, server):
    first = True
    async for message in messages:
        if first and message.event.HasField("state_changed"):
            message.event.state_changed.state = events_pb2.ENGINE_STATE_PAUSED
        first = False
        yield message


def _unclamped_ttl(session, request, server):
    if request.HasField("ttl_ms") and request.ttl_ms > session.session.ttl_ms:
        held = server.backend.sessions[session.session.session_id]
        held.ttl_ms = request.ttl_ms
        held.expires_ns = server.backend.now_ns() + request.ttl_ms * 1_000_000
        session.session.ttl_ms = request.ttl_ms
        session.session.expires_at.CopyFrom(server.backend.timestamp(held.expires_ns))


def _revise_in_place(server) -> None:
    state = server.state

    def revise(selection, changed):
        state.selection = selection
        return state.revision

    state.revise = revise


def _new_revision(answer, request, server):
    server.state.revise(server.state.selection, ["paused"])


TASK_FAMILIES = {"Embed": "embed", "Classify": "classify", "Score": "score"}


def _unsupported_family_unimplemented(method: str):
    def make(inner, server):
        async def answer(request, context):
            model = request.model or server.state.default_model
            values = server.state.model_limit_values(model, "openengine.tasks") if model in server.state.models else {}
            supported = {str(v).lower() for v in values.get("supported_tasks", ())}
            if TASK_FAMILIES[method] not in supported:
                raise Refusal(RefusalCode.UNIMPLEMENTED, f"{method} is not implemented for model {model!r}")
            return await inner(request, context)
        return answer
    return make


def _unsupported_families_unimplemented(server) -> None:
    for method in TASK_FAMILIES:
        wrap_method(f"{TASKS}/{method}", _unsupported_family_unimplemented(method))(server)


# Every fault by name, in the order `--list-faults` prints them.
FAULTS: RuleCatalogue[Fault] = RuleCatalogue("fault")
for _fault in (
    # -- compatibility aliases -----------------------------------------------------------------
    Fault("alias-unadvertised-served",
          "alias methods answer even when the profile of the v1 RPC they map to is not advertised",
          ("REQ-ALIAS-001",), "alias gate", replace_gate(_ProfileBlindGate, aliases_only=True)),
    Fault("alias-abort-separate",
          "an alias Abort answers without cancelling anything, so alias and v1 do not share requests",
          ("REQ-ALIAS-002",), "alias Abort", alias_methods("Abort", _abort_nothing)),
    Fault("alias-drain-unguarded", "the alias Drain runs without the admin credentials Admin/Drain requires",
          ("REQ-ALIAS-002",), "alias gate", replace_gate(_DrainOpenGate, aliases_only=True)),
    Fault("alias-answers-differ", "the alias GetModelInfo reports a context length one larger than v1's",
          ("REQ-ALIAS-002",), "alias GetModelInfo",
          alias_methods("GetModelInfo",
                        _answers_changed(with_field("max_context_length", lambda length: length + 1)))),
    Fault("alias-not-in-health", "a served alias is missing from the standard health service",
          ("REQ-ALIAS-003",), "health statuses", change_health(_without_aliases)),
    # -- WatchLoad -----------------------------------------------------------------------------
    Fault("watch-sequence-not-increasing", "WatchLoad repeats the previous sequence number on every third message",
          ("REQ-LOAD-014.1",), WATCH_LOAD,
          change_messages(WATCH_LOAD, with_field("sequence", lambda sequence: sequence - sequence // 3))),
    Fault("watch-settings-not-first", "WatchLoad sends the initial snapshot before the settings",
          ("REQ-LOAD-004", "REQ-LOAD-009"), WATCH_LOAD, change_stream(WATCH_LOAD, _snapshot_before_settings)),
    Fault("watch-timestamp-backwards",
          "WatchLoad stamps every second message one second earlier than the previous one",
          ("REQ-LOAD-014.2",), WATCH_LOAD, change_messages(WATCH_LOAD, _every_second_a_second_early)),
    Fault("watch-no-initial-snapshot", "WatchLoad omits the initial snapshot even when the request asks for it",
          ("REQ-LOAD-009",), WATCH_LOAD, drop_messages(WATCH_LOAD, _first_initial_snapshot)),
    Fault("watch-missing-heartbeat", "WatchLoad never sends heartbeats, however long the stream is quiet",
          ("REQ-LOAD-013",), WATCH_LOAD, drop_messages(WATCH_LOAD, lambda message, _: message.HasField("heartbeat"))),
    Fault("watch-interval-not-clamped",
          "WatchLoad uses and reports the requested interval and heartbeat without clamping them",
          ("REQ-LOAD-006", "REQ-LOAD-008"), f"{OBSERVABILITY} state",
          with_load_limits(min_watch_interval_ms=1, max_watch_interval_ms=2**32 - 1)),
    Fault("watch-instance-id-mismatch",
          "WatchLoad settings and snapshots carry an instance id other than EngineInfo's",
          ("REQ-LOAD-002", "REQ-LOAD-005"), WATCH_LOAD, change_messages(WATCH_LOAD, _foreign_instance)),
    Fault("watch-silent-gap", "WatchLoad coalesces updates of a slow watcher without counting them in coalesced",
          ("REQ-LOAD-016",), WATCH_LOAD, change_messages(WATCH_LOAD, _uncounted_gaps)),
    Fault("watch-cancel-aborts-requests", "cancelling a WatchLoad stream aborts every running request",
          ("REQ-LOAD-018",), WATCH_LOAD, wrap_method(WATCH_LOAD, _cancel_aborts_everything)),
    Fault("watch-ends-ok", "WatchLoad ends the stream with status OK after the initial snapshot",
          ("REQ-LOAD-019",), WATCH_LOAD, change_stream(WATCH_LOAD, _end_after_opening)),
    Fault("watch-max-watchers-ignored", "WatchLoad accepts more concurrent streams than max_watchers",
          ("REQ-LOAD-011",), f"{OBSERVABILITY} state", with_load_limits(max_watchers=float("inf"))),
    Fault("watch-heartbeat-not-reset",
          "WatchLoad's heartbeat timer runs from the previous heartbeat, not the previous message, "
          "so a heartbeat can follow a snapshot sooner than heartbeat_ms",
          ("REQ-LOAD-013",), WATCH_LOAD, change_stream(WATCH_LOAD, _heartbeat_from_heartbeat)),
    Fault("watch-revision-stream-kept", "WatchLoad streams stay open across a capability revision change",
          ("REQ-REV-006",), WATCH_LOAD, wrap_method(WATCH_LOAD, _kept_across_revisions)),
    # -- Capabilities and discovery ------------------------------------------------------------
    Fault("capabilities-unadvertised-submessage",
          "Capabilities sets the capability message of a profile it does not advertise",
          ("REQ-CAP-006",), GET_CAPABILITIES, change_answer(GET_CAPABILITIES, _unadvertised_submessage)),
    Fault("capabilities-missing-core", "Capabilities.profiles leaves out openengine.core",
          ("REQ-CORE-001.2", "REQ-CAP-006", "REQ-CAP-010"), GET_CAPABILITIES,
          change_answer(GET_CAPABILITIES, _without_core)),
    Fault("capabilities-duplicate-profile", "Capabilities.profiles lists the last advertised profile twice",
          ("REQ-CAP-003",), GET_CAPABILITIES, change_answer(GET_CAPABILITIES, _last_profile_twice)),
    Fault("capabilities-limit-out-of-range",
          "Capabilities reports openengine.core max_sequences as 0, below its minimum",
          ("REQ-CAP-008",), GET_CAPABILITIES,
          change_answer(GET_CAPABILITIES, with_field("generation.max_sequences", lambda count: 0))),
    Fault("capabilities-revision-mismatch", "Capabilities.revision differs from EngineInfo.capability_revision",
          ("REQ-REV-001",), GET_CAPABILITIES,
          change_answer(GET_CAPABILITIES, with_field("revision", lambda revision: revision + 1))),
    Fault("capabilities-role-mismatch",
          "EngineInfo reports a role the advertised role-scoped profiles do not allow",
          ("REQ-CAP-011",), GET_ENGINE_INFO, change_answer(GET_ENGINE_INFO, _role_mismatch)),
    Fault("limits-not-enforced",
          "Generate accepts requests beyond the advertised limits instead of INVALID_ARGUMENT",
          ("REQ-CAP-009", "REQ-SVC-003"), "admission", admit_despite(lambda violation: True)),
    Fault("features-off-accepted",
          "Generate accepts min_p, logit_bias, prompt_logprobs and guided decoding modes that the "
          "capabilities advertise as off (numeric limits are still enforced)",
          ("REQ-CAP-009",), "admission", admit_despite(_is_switch_violation)),
    Fault("unadvertised-rpc-implemented",
          "RPCs of profiles that are not advertised answer instead of failing with UNIMPLEMENTED",
          ("REQ-CORE-003",), "gate", replace_gate(_ProfileBlindGate)),
    # -- Health ---------------------------------------------------------------------------------
    Fault("health-not-per-service",
          "the health service reports only the whole server (\"\"), no advertised service by name",
          ("REQ-HEALTH-002", "REQ-HEALTH-007", "REQ-HEALTH-009"), "health statuses",
          change_health(lambda statuses, server: {"": statuses[""]})),
    Fault("health-unknown-not-found",
          "health Check answers SERVING for unknown service names instead of NOT_FOUND",
          ("REQ-HEALTH-003",), f"{HEALTH}/Check", health_methods(_unknown_serving, "Check")),
    Fault("health-watch-no-initial",
          "health Watch waits for a change instead of sending the current status first",
          ("REQ-HEALTH-005", "REQ-HEALTH-006"), f"{HEALTH}/Watch", health_methods(_watch_without_initial, "Watch")),
    Fault("health-pause-not-reflected", "pausing or draining leaves openengine.v1.Inference SERVING",
          ("REQ-HEALTH-007", "REQ-HEALTH-011"), "health statuses", change_health(_serving_unless_stopping)),
    # -- Generation and cancellation ------------------------------------------------------------
    Fault("generate-no-terminal",
          "an aborted Generate stream ends with status OK but without its terminal EngineError",
          ("REQ-SVC-002", "REQ-CORE-010.4"), GENERATE, change_stream(GENERATE, _no_aborted_terminal)),
    Fault("client-cancel-ignored",
          "a running Generate the client cancels keeps running (and counted in load) until its natural end",
          ("REQ-CORE-011.1",), "backend", _ignore_cancel(when_running=True)),
    Fault("abort-ignored", "Abort(all) reports the requests it found but leaves them running",
          ("REQ-CORE-010.3",), ABORT, wrap_method(ABORT, _abort_counts_only("all"))),
    # -- Load -----------------------------------------------------------------------------------
    Fault("getload-instance-mismatch", "GetLoad reports an instance id other than EngineInfo's",
          ("REQ-LOAD-002",), GET_LOAD,
          change_answer(GET_LOAD, with_field("instance_id", lambda instance: "not-" + instance))),
    Fault("load-ranks-not-summed", "per-rank used_kv_blocks leave out the prefix cache that the total counts",
          ("REQ-LOAD-023",), GET_LOAD, change_answer(GET_LOAD, _ranks_without_cache)),
    # -- Runtime events, sessions, admin --------------------------------------------------------
    Fault("events-sequence-from-zero", "SubscribeRuntimeEvents numbers its messages from 0 instead of 1",
          ("REQ-EVENTS-001",), RUNTIME_EVENTS,
          change_messages(RUNTIME_EVENTS, with_field("sequence", lambda sequence: sequence - 1))),
    Fault("session-ttl-not-clamped", "OpenSession grants a time to live longer than max_session_ttl_ms",
          ("REQ-SESS-001",), OPEN_SESSION, change_answer(OPEN_SESSION, _unclamped_ttl)),
    Fault("admin-no-auth", "Admin performs calls without checking credentials",
          ("REQ-ADMIN-002",), "gate", replace_gate(_OpenAdminGate)),
    Fault("bearer-scheme-case-sensitive",
          "the admin guard accepts the bearer scheme only when spelled exactly `Bearer`",
          ("REQ-ADMIN-006",), "gate", replace_gate(_ExactBearerGate)),
    # -- Hostile input ----------------------------------------------------------------------------
    Fault("numbers-not-checked", "Generate accepts NaN, infinite and out-of-domain numbers",
          ("REQ-SVC-005",), "admission", admit_despite(lambda violation: violation.rule_id in ("OEV407", "OEV408"))),
    Fault("wire-policy-off",
          "undecodable requests fail with gRPC's default UNKNOWN status naming the Python exception",
          ("REQ-SVC-006",), "interceptors", lambda server: server.interceptors.clear()),
    Fault("health-list-unimplemented", "health List answers UNIMPLEMENTED",
          ("REQ-HEALTH-013",), f"{HEALTH}/List", health_methods(_health_unimplemented, "List")),
    # -- one clause each: discovery and profiles -------------------------------------------------
    Fault("abort-unimplemented", "Lifecycle/Abort answers UNIMPLEMENTED although openengine.core is advertised",
          ("REQ-CORE-001.1",), ABORT, unimplemented(ABORT)),
    Fault("watch-unimplemented", "WatchLoad answers UNIMPLEMENTED although openengine.load is advertised",
          ("REQ-CORE-002",), WATCH_LOAD, unimplemented(WATCH_LOAD)),
    Fault("profiles-shrink-when-busy", "while any request is in flight Capabilities lists openengine.core alone",
          ("REQ-CORE-005",), GET_CAPABILITIES, change_answer(GET_CAPABILITIES, _core_only_when_busy)),
    Fault("role-unspecified", "EngineInfo.role is ROLE_UNSPECIFIED",
          ("REQ-CORE-012",), GET_ENGINE_INFO,
          change_answer(GET_ENGINE_INFO, with_field("role", lambda role: common_pb2.ROLE_UNSPECIFIED))),
    Fault("vendor-name-not-canonical", "Capabilities.profiles also lists a vendor profile named `Acme.Fast_Path`",
          ("REQ-CAP-001",), GET_CAPABILITIES, extra_profile("Acme.Fast_Path", 1)),
    Fault("vendor-major-zero",
          "Capabilities.profiles also lists the vendor profile com.example.batch at major version 0",
          ("REQ-CAP-002",), GET_CAPABILITIES, extra_profile("com.example.batch", 0)),
    Fault("reserved-name-invented",
          "Capabilities.profiles also lists openengine.turbo, a name the registry does not define",
          ("REQ-CAP-004",), GET_CAPABILITIES, extra_profile("openengine.turbo", 1)),
    Fault("model-info-drifts",
          "every second GetModelInfo reports max_context_tokens one smaller, within one revision",
          ("REQ-REV-002",), GET_MODEL_INFO, wrap_method(GET_MODEL_INFO, _model_info_alternating)),
    Fault("services-unversioned-names",
          "every openengine.v1 RPC is also served under its service name without the version "
          "(`openengine.Discovery/GetEngineInfo`)",
          ("REQ-SVC-001",), "interceptors", lambda server: server.interceptors.append(_RenamedService())),
    # -- one clause each: Generate ---------------------------------------------------------------
    Fault("final-without-usage", "Generate's final messages carry no usage",
          ("REQ-CORE-009.1",), GENERATE, change_messages(GENERATE, _final_without_usage)),
    Fault("chunk-after-final",
          "Generate sends an empty chunk of a sequence after its final when more of the stream follows",
          ("REQ-CORE-009.2",), GENERATE, change_stream(GENERATE, _chunk_after_final)),
    Fault("generate-ends-internal", "a Generate stream that sent its final ends with status INTERNAL instead of OK",
          ("REQ-CORE-009.3",), GENERATE, wrap_method(GENERATE, _ends_internal)),
    Fault("max-tokens-overrun", "the backend runs each request with one token more than its max_tokens",
          ("REQ-CORE-006",), "backend", change_sampling(_one_token_more)),
    Fault("stop-token-ids-ignored", "the backend runs each request without its stop_token_ids",
          ("REQ-CORE-013.1",), "backend", change_sampling(lambda sampling: sampling.ClearField("stop_token_ids"))),
    Fault("stop-strings-ignored", "the backend runs each request without its stop strings",
          ("REQ-CORE-013.2",), "backend", change_sampling(lambda sampling: sampling.ClearField("stop"))),
    Fault("stop-string-kept",
          "the backend keeps a matched stop string in the output text even when include_stop_in_output is false",
          ("REQ-CORE-013.3",), "backend",
          change_sampling(lambda sampling: setattr(sampling, "include_stop_in_output", True))),
    Fault("full-not-retryable",
          "a Generate refused because the engine is full gets RESOURCE_EXHAUSTED without the "
          "retryable EngineError in its status details",
          ("REQ-CORE-014",), GENERATE,
          recode_refusals(GENERATE, RefusalCode.RESOURCE_EXHAUSTED, RefusalCode.RESOURCE_EXHAUSTED)),
    Fault("paused-failed-precondition",
          "a Generate while Inference is NOT_SERVING fails FAILED_PRECONDITION instead of UNAVAILABLE",
          ("REQ-HEALTH-008",), GENERATE,
          recode_refusals(GENERATE, RefusalCode.UNAVAILABLE, RefusalCode.FAILED_PRECONDITION)),
    # -- one clause each: Abort and cancellation ----------------------------------------------
    Fault("abort-by-id-ignored", "Abort by request id reports the requests it found but leaves them running",
          ("REQ-CORE-010.1",), ABORT, wrap_method(ABORT, _abort_counts_only("request_ids"))),
    Fault("kv-session-aborts-all", "Abort by kv_session_id ends every request the engine holds",
          ("REQ-CORE-010.2",), ABORT, wrap_method(ABORT, _kv_session_aborts_all)),
    Fault("abort-counts-zero", "Abort ends the requests it targets but answers aborted 0",
          ("REQ-CORE-010.5",), ABORT, change_answer(ABORT, with_field("aborted", lambda aborted: 0))),
    Fault("abort-nothing-not-found",
          "an Abort that targets no request fails NOT_FOUND instead of answering aborted 0",
          ("REQ-CORE-010.6",), ABORT, change_answer(ABORT, _nothing_to_abort_not_found)),
    Fault("abort-queued-when-slot-frees",
          "the stream of a request aborted while queued gets its terminal error only once a slot is free",
          ("REQ-CORE-010.7",), GENERATE, change_stream(GENERATE, _queued_abort_waits_for_a_slot)),
    Fault("cancel-ignored-while-queued",
          "a queued Generate the client cancels stays queued, runs when a slot frees and is counted until its end",
          ("REQ-CORE-011.2",), "backend", _ignore_cancel(when_running=False)),
    # -- one clause each: health --------------------------------------------------------------
    Fault("health-unimplemented", "health Check and Watch answer UNIMPLEMENTED",
          ("REQ-HEALTH-001",), HEALTH, health_methods(_health_unimplemented, "Check", "Watch")),
    Fault("health-overall-not-serving",
          "health reports \"\" NOT_SERVING while openengine.v1.Inference is SERVING",
          ("REQ-HEALTH-004",), "health statuses", change_health(_overall_not_serving)),
    # -- one clause each: load ------------------------------------------------------------------
    Fault("getload-no-timestamp", "GetLoad answers a LoadInfo without timestamp",
          ("REQ-LOAD-001.1",), GET_LOAD,
          change_answer(GET_LOAD, lambda load, request, server: load.ClearField("timestamp"))),
    Fault("getload-cached",
          "GetLoad answers, for each value of per_rank, the snapshot it built for the first such call",
          ("REQ-LOAD-001.2",), GET_LOAD, wrap_method(GET_LOAD, _getload_first_answer)),
    Fault("getload-ranks-unasked", "GetLoad answers per-rank entries whether or not the request sets per_rank",
          ("REQ-LOAD-001.3",), GET_LOAD, wrap_method(GET_LOAD, _getload_ranks_always)),
    Fault("watch-snapshot-deltas", "WatchLoad snapshots after the first carry only the LoadInfo fields that changed",
          ("REQ-LOAD-003",), WATCH_LOAD, change_stream(WATCH_LOAD, _snapshot_deltas)),
    Fault("watch-zero-interval-periodic",
          "WatchLoad treats a requested interval 0 as min_watch_interval_ms although change_driven is advertised",
          ("REQ-LOAD-007",), f"{OBSERVABILITY} state", with_load_limits(change_driven=False)),
    Fault("watch-settings-per-rank-echoed",
          "WatchLoad settings report per_rank as the request asked, whatever the engine supports",
          ("REQ-LOAD-010",), WATCH_LOAD, change_messages(WATCH_LOAD, _per_rank_as_asked)),
    Fault("watch-snapshots-halved", "WatchLoad drops every second periodic snapshot (numbering stays gapless)",
          ("REQ-LOAD-012",), WATCH_LOAD, change_stream(WATCH_LOAD, _every_second_snapshot)),
    Fault("watch-empty-message", "WatchLoad sends a message with no kind set right after the settings",
          ("REQ-LOAD-022",), WATCH_LOAD, change_stream(WATCH_LOAD, _empty_after_settings)),
    Fault("watch-snapshot-backlog",
          "WatchLoad queues every snapshot for a watcher that does not read, delivering the oldest first",
          ("REQ-LOAD-015",), WATCH_LOAD, wrap_method(WATCH_LOAD, _snapshot_backlog)),
    Fault("watchers-full-unavailable",
          "WatchLoad refuses a stream beyond max_watchers with UNAVAILABLE instead of RESOURCE_EXHAUSTED",
          ("REQ-SVC-004",), WATCH_LOAD,
          recode_refusals(WATCH_LOAD, RefusalCode.RESOURCE_EXHAUSTED, RefusalCode.UNAVAILABLE)),
    # -- one clause each: events, revisions, admin ---------------------------------------------
    Fault("events-initial-state-wrong",
          "SubscribeRuntimeEvents reports PAUSED as the initial state of a serving engine",
          ("REQ-EVENTS-002",), RUNTIME_EVENTS, change_stream(RUNTIME_EVENTS, _initial_state_paused)),
    Fault("config-change-same-revision",
          "UpdateConfig changes the limits without starting a new capability revision",
          ("REQ-REV-003",), "state", _revise_in_place),
    Fault("pause-changes-revision", "PauseGeneration starts a new capability revision",
          ("REQ-REV-004",), PAUSE_GENERATION, change_answer(PAUSE_GENERATION, _new_revision)),
    Fault("revision-event-missing", "SubscribeRuntimeEvents never sends CapabilityRevisionChanged",
          ("REQ-REV-005",), RUNTIME_EVENTS, drop_messages(
              RUNTIME_EVENTS, lambda message, _: message.event.HasField("capability_revision_changed"))),
    Fault("revision-aborts-not-retryable",
          "a request running when the capability revision changes ends with an ABORTED error that is not retryable",
          ("REQ-REV-007",), GENERATE, change_stream(GENERATE, _aborted_not_retryable_after_revision)),
    Fault("admin-guard-on-inference",
          "the admin credentials are required by Inference too, not by Admin alone",
          ("REQ-ADMIN-004",), "gate", replace_gate(_GuardInferenceGate)),
    Fault("model-scoped-profile-unlisted",
          "GetModelInfo leaves out the first model-scoped profile its model supports, while "
          "Capabilities still advertises it",
          ("REQ-CAP-012",), GET_MODEL_INFO, change_answer(GET_MODEL_INFO, _without_scoped_profile)),
    Fault("task-family-unimplemented",
          "a task RPC for a family the model's supported_tasks does not list fails UNIMPLEMENTED "
          "instead of INVALID_ARGUMENT",
          ("REQ-TASKS-001",), TASKS, _unsupported_families_unimplemented),
    Fault("watch-one-sender",
          "WatchLoad writes the messages of all streams one at a time, so a watcher that does not "
          "read holds up the others",
          ("REQ-LOAD-017",), WATCH_LOAD, wrap_method(WATCH_LOAD, _one_sender)),
    Fault("admin-address-overall-not-serving",
          "on an admin address of its own, health reports \"\" NOT_SERVING while openengine.v1.Admin is SERVING",
          ("REQ-ADMIN-001",), "admin health", _admin_health_overall_not_serving),
    Fault("shutdown-health-serving",
          "during a graceful shutdown health reports every name SERVING: open Watch streams end without NOT_SERVING",
          ("REQ-HEALTH-010",), "health", _serving_while_stopping),
    Fault("limited-token-allowed",
          "the admin guard also accepts `limited-<admin token>`, a credential meant to allow no "
          "Admin operation, and performs every call made with it instead of PERMISSION_DENIED",
          ("REQ-ADMIN-003",), "gate", replace_gate(_LimitedTokenAllowedGate)),
):
    FAULTS.register(_fault.spec, _fault)
