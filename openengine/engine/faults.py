"""Faults the reference engine can be told to commit, each one wrong behaviour.

A conformance runner is only trustworthy if it fails engines that break the rules. Each fault
makes the engine misbehave in exactly one way a client can observe over the wire, and lists
every requirement that behaviour violates (a missing `openengine.core` entry, for instance,
also leaves every prerequisite unmet), so the runner's own tests can start the engine with
`--fault NAME` and expect the cases for those requirements to fail. This table is the one place
faults are defined: the engine installs the configured ones, `oespec engine --list-faults` prints
it, and tests read it to make sure each one is observable.

Neither the SDK nor the backend knows about faults. A fault is a *layer* (`openengine.serve.Layer`):
run once on the assembled server before it starts, it wraps one of the server's parts, declared
here beside the fault: a service implementation (a method's answers, or the messages of its
stream), the gate every call passes, the health the server wants, the interceptors, the admission
of Generate, or the backend. Without faults nothing is wrapped.

Adding a fault is one `Fault(...)` entry: a name, what it does, the requirements it breaks, what
it wraps (`part`) and the layer, usually made by one of the helpers below.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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
from openengine.serve.runstate import STOPPING
from openengine.v1 import common_pb2, lifecycle_pb2, load_pb2

DISCOVERY = "openengine.v1.Discovery"
INFERENCE = "openengine.v1.Inference"
LIFECYCLE = "openengine.v1.Lifecycle"
OBSERVABILITY = "openengine.v1.Observability"
SESSIONS = "openengine.v1.Sessions"
HEALTH = "grpc.health.v1.Health"
LOAD = "openengine.load"


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    requirements: tuple[str, ...]
    part: str          # what the layer wraps: `Service/Method`, `gate`, `health`, `backend`, ...
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


# -- wrapping a server's parts ------------------------------------------------------------------


class Wrapped:
    """An implementation with some methods replaced; everything else is the inner one's."""

    def __init__(self, inner: object, **methods: Callable):
        self._inner = inner
        self.__dict__.update(methods)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _method(server, service: str, name: str) -> Callable:
    return server.implementation_of(server.catalogue.rpc(service, name))


def wrap_method(service: str, name: str, make: Callable[[Callable, Any], Callable]) -> Layer:
    """A layer replacing one RPC's implementation by `make(inner, server)`."""
    def layer(server) -> None:
        inner = _method(server, service, name)
        server.implementations[service] = Wrapped(server.implementations[service], **{name: make(inner, server)})
    return layer


def change_answer(service: str, name: str, change: Callable[[Any, Any, Any], Any]) -> Layer:
    """A unary RPC whose answer passes `change(answer, request, server)`."""
    def make(inner, server):
        async def answer(request, context):
            return change(await inner(request, context), request, server)
        return answer
    return wrap_method(service, name, make)


def change_stream(service: str, name: str, decode: Callable[[Any], Any],
                  transform: Callable[[AsyncIterator, Any, Any], AsyncIterator]) -> Layer:
    """A streaming RPC whose messages (decoded by `decode`) pass `transform(messages, request,
    server)`, an async generator yielding what the client gets."""
    def make(inner, server):
        async def stream(request, context):
            async def messages():
                async with contextlib.aclosing(inner(request, context)) as sent:
                    async for message in sent:
                        yield decode(message)
            async with contextlib.aclosing(messages()) as source:
                async with contextlib.aclosing(transform(source, request, server)) as changed:
                    async for message in changed:
                        yield message
        return stream
    return wrap_method(service, name, make)


def _watch_message(wire) -> load_pb2.WatchLoadResponse:
    """WatchLoad's messages go out as bytes the SDK composed; a fault reads them as messages."""
    return load_pb2.WatchLoadResponse.FromString(wire) if type(wire) is bytes else wire


def change_watch(transform) -> Layer:
    return change_stream(OBSERVABILITY, "WatchLoad", _watch_message, transform)


def with_load_limits(**values: Any) -> Layer:
    """Observability served over a view of the state in which these openengine.load limits hold,
    so WatchLoad uses (and reports) them instead of the advertised ones."""
    def layer(server) -> None:
        impl = server.implementations[OBSERVABILITY]
        server.implementations[OBSERVABILITY] = type(impl)(_LoadLimitsView(server.state, values))
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


def change_health(change: Callable[[dict[str, int], Any], dict[str, int]]) -> Layer:
    """The statuses the server sets on its main address pass `change(statuses, server)`."""
    def layer(server) -> None:
        desired = server.desired_health
        server.desired_health = lambda: change(desired(), server)
    return layer


def replace_gate(make: Callable[[Gate], Gate], *, aliases_only: bool = False) -> Layer:
    """The gate calls pass (or the one alias calls pass) becomes `make(gate)`."""
    def layer(server) -> None:
        if not aliases_only:
            server.gate = make(server.gate)
        for alias in server.aliases:
            server.implementations[alias.service].gate = make(server.gate)
    return layer


def gate_like(gate: Gate, cls: type[Gate]) -> Gate:
    return cls(gate.state, gate.admin, gate.token)


def replace_admission(violations: Callable[[list], list] | None) -> Layer:
    """Generate admitted with the shared preflight's violations filtered (None: none found)."""
    class Filtered(Admission):
        def violations(self, routed, tokenizer):
            return violations(super().violations(routed, tokenizer)) if violations else []

    def layer(server) -> None:
        server.implementations[INFERENCE].admission = Filtered(server.state)
    return layer


# -- what the faults do -------------------------------------------------------------------------


def _caps_missing_core(caps, request, server):
    kept = [p for p in caps.profiles if p.name != server.catalogue.core]
    del caps.profiles[:]
    caps.profiles.extend(kept)
    return caps


def _caps_duplicate_profile(caps, request, server):
    if caps.profiles:
        caps.profiles.append(caps.profiles[-1])
    return caps


def _caps_unadvertised_submessage(caps, request, server):
    missing = next((p for p in server.catalogue.profiles if p.capability_field and not server.state.has(p.name)), None)
    if missing is not None:
        getattr(caps, missing.capability_field).SetInParent()
    return caps


def _caps_limit_out_of_range(caps, request, server):
    caps.generation.max_sequences = 0
    return caps


def _caps_revision_mismatch(caps, request, server):
    caps.revision += 1
    return caps


def _role_mismatch(info, request, server):
    roles = role_numbers()
    role_scoped = [p for p in server.state.advertised if p.scope == "role"]
    allowed = set(role_scoped[0].roles) if role_scoped else {server.description.role}
    info.role = roles[next(r for r in roles if r not in allowed)]
    return info


def _drop_switch_violations(violations):
    """Keep the numeric limits, forget the sampling switches and guided modes advertised off."""
    return [v for v in violations if not (v.rule_id == "OEV402" and v.path.startswith("sampling."))
            and not (v.rule_id == "OEV404" and v.path.startswith("sampling.guided"))]


def _drop_number_violations(violations):
    return [v for v in violations if v.rule_id not in ("OEV407", "OEV408")]


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
        sent = dict(context.invocation_metadata() or ()).get("authorization", "")
        if refusal is None and self.token and not sent.startswith("Bearer "):
            return Refusal(RefusalCode.UNAUTHENTICATED, "Admin needs 'authorization: Bearer <token>' metadata")
        return refusal


async def _repeat_every_third(messages, request, server):
    async for message in messages:
        message.sequence -= message.sequence // 3      # 0, 1, 2, 2, 3, 4, 4, ...
        yield message


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


async def _every_second_a_second_early(messages, request, server):
    async for message in messages:
        if message.sequence % 2 == 1:
            message.timestamp.FromNanoseconds(message.timestamp.ToNanoseconds() - 1_000_000_000)
        yield message


async def _without_initial_snapshot(messages, request, server):
    dropped = 0
    async for message in messages:
        if message.sequence == 1 and message.HasField("snapshot") and not dropped:
            dropped = 1
            continue
        message.sequence -= dropped
        yield message


async def _without_heartbeats(messages, request, server):
    sequence = 0
    async for message in messages:
        if message.HasField("heartbeat"):
            continue
        message.sequence = sequence
        sequence += 1
        yield message


async def _foreign_instance(messages, request, server):
    async for message in messages:
        if message.HasField("settings"):
            message.settings.instance_id = "not-" + message.settings.instance_id
        elif message.HasField("snapshot"):
            message.snapshot.load.instance_id = "not-" + message.snapshot.load.instance_id
        yield message


async def _uncounted_gaps(messages, request, server):
    async for message in messages:
        if message.HasField("snapshot"):
            message.snapshot.coalesced = 0
        yield message


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
    """Heartbeats every heartbeat_ms since the previous heartbeat, whatever came between."""
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
                        message = _watch_message(wire)
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
            for flight in list(server.state.in_flight.values()):
                server.state.abort(flight, AbortReason.ABORT_RPC)
            raise
    return stream


async def _no_aborted_terminal(messages, request, server):
    async for message in messages:
        if message.HasField("error") and message.error.code == common_pb2.ERROR_CODE_ABORTED:
            return
        yield message


def _abort_counts_only(inner, server):
    async def abort(request: lifecycle_pb2.AbortRequest, context):
        target = request.WhichOneof("target")
        if target is None:
            return await inner(request, context)
        flights = [f for f in server.state.in_flight.values() if f.aborted is None]
        if target == "request_ids":
            hits = [f for f in flights if f.request.request_id in set(request.request_ids.values)]
        elif target == "kv_session_id":
            hits = [f for f in flights if f.kv_session == request.kv_session_id]
        else:
            hits = flights
        return lifecycle_pb2.AbortResponse(aborted=len(hits))
    return abort


def _run_on_after_cancel(server) -> None:
    """The backend ignores a client's cancellation: the request keeps its place and runs to its
    natural end, counted in the load, before it is freed. Its outputs are produced by a task of
    their own, so the cancelled call's task never reaches the backend's generator."""
    backend = server.backend
    generate, abort = backend.generate, backend.abort

    async def abort_unless_cancelled(request_id, reason):
        if reason is not AbortReason.CLIENT_CANCELLED:
            await abort(request_id, reason)

    async def produce(request, outputs: asyncio.Queue):
        try:
            async for output in generate(request):
                outputs.put_nowait(output)
        except Exception as err:   # a refusal or failure reaches the call as the backend raised it
            outputs.put_nowait(err)
        outputs.put_nowait(None)

    async def generate_regardless(request):
        outputs: asyncio.Queue = asyncio.Queue()
        backend.keep(asyncio.ensure_future(produce(request, outputs)))
        while (output := await outputs.get()) is not None:
            if isinstance(output, Exception):
                raise output
            yield output

    backend.generate = generate_regardless
    backend.abort = abort_unless_cancelled


def _foreign_getload(info, request, server):
    info.instance_id = "not-" + info.instance_id
    return info


def _ranks_without_cache(info, request, server):
    cached, size = len(server.backend.prefix_cache), len(info.ranks)
    for rank in info.ranks:
        share = cached // size + (1 if rank.data_parallel_rank < cached % size else 0)
        rank.used_kv_blocks = max(0, rank.used_kv_blocks - share)
    return info


async def _events_from_zero(messages, request, server):
    async for message in messages:
        message.sequence -= 1
        yield message


def _unclamped_ttl(session, request, server):
    if request.HasField("ttl_ms") and request.ttl_ms > session.session.ttl_ms:
        held = server.backend.sessions[session.session.session_id]
        held.ttl_ms = request.ttl_ms
        held.expires_ns = server.backend.now_ns() + request.ttl_ms * 1_000_000
        session.session.ttl_ms = request.ttl_ms
        session.session.expires_at.CopyFrom(server.backend.timestamp(held.expires_ns))
    return session


def _health_part(name: str, make: Callable[[Any], Callable]) -> Layer:
    def layer(server) -> None:
        servicer = server.implementations[HEALTH]
        server.implementations[HEALTH] = Wrapped(servicer, **{name: make(servicer)})
    return layer


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


def _list_unimplemented(servicer):
    async def refuse(request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
    return refuse


def _serving_unless_stopping(statuses, server):
    if server.state.run.phase != STOPPING:
        serving = health_pb2.HealthCheckResponse.SERVING
        statuses = {name: serving if name in WORK_SERVICES or name == "" else status
                    for name, status in statuses.items()}
    return statuses


def _alias_methods(name: str, make: Callable[[Callable, Any], Callable]) -> Layer:
    """Every served alias's method `name` replaced by `make(inner, alias_service)`."""
    def layer(server) -> None:
        for alias in server.aliases:
            impl = server.implementations[alias.service]
            if hasattr(impl, name):
                server.implementations[alias.service] = Wrapped(impl, **{name: make(getattr(impl, name), alias)})
    return layer


def _abort_nothing(inner, alias):
    async def abort(request, context):
        if alias.name == "openengine":
            return rev2.AbortResponse(status=rev2.ABORT_STATUS_NOT_FOUND, message="nothing to abort")
        return rev3.AbortResponse(status=rev3.ABORT_STATUS_ALREADY_FINISHED, message="nothing to abort")
    return abort


def _longer_context(inner, alias):
    async def model_info(request, context):
        info = await inner(request, context)
        info.max_context_length += 1
        return info
    return model_info


def _without_aliases(statuses, server):
    return {name: status for name, status in statuses.items() if name not in {a.service for a in server.aliases}}


def _same(message):
    return message


# Every fault by name, in the order `--list-faults` prints them.
FAULTS: RuleCatalogue[Fault] = RuleCatalogue("fault")
for _fault in (
    # -- compatibility aliases -----------------------------------------------------------------
    Fault("alias-unadvertised-served",
          "alias methods answer even when the profile of the v1 RPC they map to is not advertised",
          ("REQ-ALIAS-001",), "alias gate",
          replace_gate(lambda gate: gate_like(gate, _ProfileBlindGate), aliases_only=True)),
    Fault("alias-abort-separate",
          "an alias Abort answers without cancelling anything, so alias and v1 do not share requests",
          ("REQ-ALIAS-002",), "alias Abort", _alias_methods("Abort", _abort_nothing)),
    Fault("alias-drain-unguarded",
          "the alias Drain runs without the admin credentials Admin/Drain requires",
          ("REQ-ALIAS-002",), "alias gate",
          replace_gate(lambda gate: gate_like(gate, _DrainOpenGate), aliases_only=True)),
    Fault("alias-answers-differ",
          "the alias GetModelInfo reports a context length one larger than v1's",
          ("REQ-ALIAS-002",), "alias GetModelInfo", _alias_methods("GetModelInfo", _longer_context)),
    Fault("alias-not-in-health",
          "a served alias is missing from the standard health service",
          ("REQ-ALIAS-003",), "health statuses", change_health(_without_aliases)),
    # -- WatchLoad -----------------------------------------------------------------------------
    Fault("watch-sequence-not-increasing",
          "WatchLoad repeats the previous sequence number on every third message",
          ("REQ-LOAD-014",), f"{OBSERVABILITY}/WatchLoad", change_watch(_repeat_every_third)),
    Fault("watch-settings-not-first",
          "WatchLoad sends the initial snapshot before the settings",
          ("REQ-LOAD-004", "REQ-LOAD-009"), f"{OBSERVABILITY}/WatchLoad", change_watch(_snapshot_before_settings)),
    Fault("watch-timestamp-backwards",
          "WatchLoad stamps every second message one second earlier than the previous one",
          ("REQ-LOAD-014",), f"{OBSERVABILITY}/WatchLoad", change_watch(_every_second_a_second_early)),
    Fault("watch-no-initial-snapshot",
          "WatchLoad omits the initial snapshot even when the request asks for it",
          ("REQ-LOAD-009",), f"{OBSERVABILITY}/WatchLoad", change_watch(_without_initial_snapshot)),
    Fault("watch-missing-heartbeat",
          "WatchLoad never sends heartbeats, however long the stream is quiet",
          ("REQ-LOAD-013",), f"{OBSERVABILITY}/WatchLoad", change_watch(_without_heartbeats)),
    Fault("watch-interval-not-clamped",
          "WatchLoad uses and reports the requested interval and heartbeat without clamping them",
          ("REQ-LOAD-006", "REQ-LOAD-008"), f"{OBSERVABILITY} state",
          with_load_limits(min_watch_interval_ms=1, max_watch_interval_ms=2**32 - 1)),
    Fault("watch-instance-id-mismatch",
          "WatchLoad settings and snapshots carry an instance id other than EngineInfo's",
          ("REQ-LOAD-002", "REQ-LOAD-005"), f"{OBSERVABILITY}/WatchLoad", change_watch(_foreign_instance)),
    Fault("watch-silent-gap",
          "WatchLoad coalesces updates of a slow watcher without counting them in coalesced",
          ("REQ-LOAD-016",), f"{OBSERVABILITY}/WatchLoad", change_watch(_uncounted_gaps)),
    Fault("watch-cancel-aborts-requests",
          "cancelling a WatchLoad stream aborts every running request",
          ("REQ-LOAD-018",), f"{OBSERVABILITY}/WatchLoad",
          wrap_method(OBSERVABILITY, "WatchLoad", _cancel_aborts_everything)),
    Fault("watch-ends-ok",
          "WatchLoad ends the stream with status OK after the initial snapshot",
          ("REQ-LOAD-019",), f"{OBSERVABILITY}/WatchLoad", change_watch(_end_after_opening)),
    Fault("watch-max-watchers-ignored",
          "WatchLoad accepts more concurrent streams than max_watchers",
          ("REQ-LOAD-011",), f"{OBSERVABILITY} state", with_load_limits(max_watchers=float("inf"))),
    Fault("watch-heartbeat-not-reset",
          "WatchLoad's heartbeat timer runs from the previous heartbeat, not the previous message, "
          "so a heartbeat can follow a snapshot sooner than heartbeat_ms",
          ("REQ-LOAD-013",), f"{OBSERVABILITY}/WatchLoad", change_watch(_heartbeat_from_heartbeat)),
    Fault("watch-revision-stream-kept",
          "WatchLoad streams stay open across a capability revision change",
          ("REQ-REV-006",), f"{OBSERVABILITY}/WatchLoad",
          wrap_method(OBSERVABILITY, "WatchLoad", _kept_across_revisions)),
    # -- Capabilities and discovery ------------------------------------------------------------
    Fault("capabilities-unadvertised-submessage",
          "Capabilities sets the capability message of a profile it does not advertise",
          ("REQ-CAP-006",), f"{DISCOVERY}/GetCapabilities",
          change_answer(DISCOVERY, "GetCapabilities", _caps_unadvertised_submessage)),
    Fault("capabilities-missing-core",
          "Capabilities.profiles leaves out openengine.core",
          ("REQ-CORE-001", "REQ-CAP-006", "REQ-CAP-010"), f"{DISCOVERY}/GetCapabilities",
          change_answer(DISCOVERY, "GetCapabilities", _caps_missing_core)),
    Fault("capabilities-duplicate-profile",
          "Capabilities.profiles lists the last advertised profile twice",
          ("REQ-CAP-003",), f"{DISCOVERY}/GetCapabilities",
          change_answer(DISCOVERY, "GetCapabilities", _caps_duplicate_profile)),
    Fault("capabilities-limit-out-of-range",
          "Capabilities reports openengine.core max_sequences as 0, below its minimum",
          ("REQ-CAP-008",), f"{DISCOVERY}/GetCapabilities",
          change_answer(DISCOVERY, "GetCapabilities", _caps_limit_out_of_range)),
    Fault("capabilities-revision-mismatch",
          "Capabilities.revision differs from EngineInfo.capability_revision",
          ("REQ-REV-001",), f"{DISCOVERY}/GetCapabilities",
          change_answer(DISCOVERY, "GetCapabilities", _caps_revision_mismatch)),
    Fault("capabilities-role-mismatch",
          "EngineInfo reports a role the advertised role-scoped profiles do not allow",
          ("REQ-CAP-011",), f"{DISCOVERY}/GetEngineInfo", change_answer(DISCOVERY, "GetEngineInfo", _role_mismatch)),
    Fault("limits-not-enforced",
          "Generate accepts requests beyond the advertised limits instead of INVALID_ARGUMENT",
          ("REQ-CAP-009", "REQ-SVC-003"), "admission", replace_admission(None)),
    Fault("features-off-accepted",
          "Generate accepts min_p, logit_bias, prompt_logprobs and guided decoding modes that the "
          "capabilities advertise as off (numeric limits are still enforced)",
          ("REQ-CAP-009",), "admission", replace_admission(_drop_switch_violations)),
    Fault("unadvertised-rpc-implemented",
          "RPCs of profiles that are not advertised answer instead of failing with UNIMPLEMENTED",
          ("REQ-CORE-003",), "gate", replace_gate(lambda gate: gate_like(gate, _ProfileBlindGate))),
    # -- Health ---------------------------------------------------------------------------------
    Fault("health-not-per-service",
          "the health service reports only the whole server (\"\"), no advertised service by name",
          ("REQ-HEALTH-002", "REQ-HEALTH-007", "REQ-HEALTH-009"), "health statuses",
          change_health(lambda statuses, server: {"": statuses[""]})),
    Fault("health-unknown-not-found",
          "health Check answers SERVING for unknown service names instead of NOT_FOUND",
          ("REQ-HEALTH-003",), f"{HEALTH}/Check", _health_part("Check", _unknown_serving)),
    Fault("health-watch-no-initial",
          "health Watch waits for a change instead of sending the current status first",
          ("REQ-HEALTH-005", "REQ-HEALTH-006"), f"{HEALTH}/Watch", _health_part("Watch", _watch_without_initial)),
    Fault("health-pause-not-reflected",
          "pausing or draining leaves openengine.v1.Inference SERVING",
          ("REQ-HEALTH-007", "REQ-HEALTH-011"), "health statuses", change_health(_serving_unless_stopping)),
    # -- Generation and cancellation ------------------------------------------------------------
    Fault("generate-no-terminal",
          "an aborted Generate stream ends with status OK but without its terminal EngineError",
          ("REQ-SVC-002", "REQ-CORE-009", "REQ-CORE-010"), f"{INFERENCE}/Generate",
          change_stream(INFERENCE, "Generate", _same, _no_aborted_terminal)),
    Fault("client-cancel-ignored",
          "a Generate the client cancels keeps running (and counted in load) until its natural end",
          ("REQ-CORE-011",), "backend", _run_on_after_cancel),
    Fault("abort-ignored",
          "Abort reports the requests it found but leaves them running",
          ("REQ-CORE-010",), f"{LIFECYCLE}/Abort", wrap_method(LIFECYCLE, "Abort", _abort_counts_only)),
    # -- Load -----------------------------------------------------------------------------------
    Fault("getload-instance-mismatch",
          "GetLoad reports an instance id other than EngineInfo's",
          ("REQ-LOAD-002",), f"{OBSERVABILITY}/GetLoad", change_answer(OBSERVABILITY, "GetLoad", _foreign_getload)),
    Fault("load-ranks-not-summed",
          "per-rank used_kv_blocks leave out the prefix cache that the total counts",
          ("REQ-LOAD-023",), f"{OBSERVABILITY}/GetLoad",
          change_answer(OBSERVABILITY, "GetLoad", _ranks_without_cache)),
    # -- Runtime events, sessions, admin --------------------------------------------------------
    Fault("events-sequence-from-zero",
          "SubscribeRuntimeEvents numbers its messages from 0 instead of 1",
          ("REQ-EVENTS-001",), f"{OBSERVABILITY}/SubscribeRuntimeEvents",
          change_stream(OBSERVABILITY, "SubscribeRuntimeEvents", _same, _events_from_zero)),
    Fault("session-ttl-not-clamped",
          "OpenSession grants a time to live longer than max_session_ttl_ms",
          ("REQ-SESS-001",), f"{SESSIONS}/OpenSession", change_answer(SESSIONS, "OpenSession", _unclamped_ttl)),
    Fault("admin-no-auth",
          "Admin performs calls without checking credentials",
          ("REQ-ADMIN-002",), "gate", replace_gate(lambda gate: gate_like(gate, _OpenAdminGate))),
    Fault("bearer-scheme-case-sensitive",
          "the admin guard accepts the bearer scheme only when spelled exactly `Bearer`",
          ("REQ-ADMIN-006",), "gate", replace_gate(lambda gate: gate_like(gate, _ExactBearerGate))),
    # -- Hostile input ----------------------------------------------------------------------------
    Fault("numbers-not-checked",
          "Generate accepts NaN, infinite and out-of-domain numbers",
          ("REQ-SVC-005",), "admission", replace_admission(_drop_number_violations)),
    Fault("wire-policy-off",
          "undecodable requests fail with gRPC's default UNKNOWN status naming the Python exception",
          ("REQ-SVC-006",), "interceptors", lambda server: server.interceptors.clear()),
    Fault("health-list-unimplemented",
          "health List answers UNIMPLEMENTED",
          ("REQ-HEALTH-013",), f"{HEALTH}/List", _health_part("List", _list_unimplemented)),
):
    FAULTS.register(_fault.spec, _fault)


def fault(name: str) -> Fault:
    """The fault called `name`; ValueError naming the known ones otherwise."""
    try:
        return FAULTS[name]
    except KeyError:
        raise ValueError(f"unknown fault {name!r}; `oespec engine --list-faults` lists them") from None
