"""Faults the reference engine can be told to commit, each one wrong behaviour.

A conformance runner is only trustworthy if it fails engines that break the rules. Each fault
makes the engine misbehave in exactly one way a client can observe over the wire, and lists
every requirement that behaviour violates (a missing `openengine.core` entry, for instance,
also leaves every prerequisite unmet), so the runner's own tests can start the engine with
`--fault NAME` and expect the cases for those requirements to fail. This table is the one place
faults are defined: the engine reads it to know what to break, `oespec engine --list-faults`
prints it, and tests read it to make sure each one is observable.

The engine's correct code never asks which fault is on. It passes a value through a named hook
point (`rt.hooks.at("sessions.ttl", clamped, requested=...)`: the value the correct code would
use, plus what a fault may need to compute its own); each fault declares the hook point(s) it
acts at and what it does there. With no fault on, every hook returns its value unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from openengine.contractkit.rules import RuleCatalogue, RuleSpec, Severity

# Every hook point of the engine: name -> the value that passes through it. A test checks that
# each is called by the engine and that every fault acts only at these.
HOOK_POINTS: dict[str, str] = {
    "alias.gate-skips": "checks an alias call skips before running its v1 RPC (a tuple of 'profile', 'auth')",
    "alias.abort-shared": "whether an alias Abort cancels through v1 Abort (True)",
    "alias.context-length": "the context length an alias ModelInfo reports",
    "health.aliases": "health statuses of the served aliases",
    "health.per-service": "health statuses of the advertised services, by name (not the server's \"\")",
    "health.work-serving": "whether the services that take work are SERVING in the current state",
    "health.unknown-service": "the status Check answers for an unknown name (None: NOT_FOUND)",
    "health.watch": "the Watch implementation of the health servicer",
    "health.list-served": "whether health List answers (True)",
    "watch.opening": "what a WatchLoad stream opens with, in order ('settings', 'snapshot')",
    "watch.keep-open": "whether a WatchLoad stream stays open after its opening (True)",
    "watch.next-sequence": "the sequence number of the next WatchLoad message",
    "watch.timestamp-ns": "the timestamp of a WatchLoad message, in nanoseconds",
    "watch.heartbeats": "whether a WatchLoad stream sends heartbeats when quiet",
    "watch.snapshot-restarts-heartbeat": "whether a snapshot restarts the heartbeat timer (True)",
    "watch.clamped": "a requested WatchLoad interval or heartbeat after clamping",
    "watch.instance-id": "the instance id a WatchLoad stream reports",
    "watch.count-coalesced": "whether coalesced snapshots are counted (True)",
    "watch.cancelled": "a WatchLoad stream was cancelled by its client (None)",
    "watch.max-watchers": "how many WatchLoad streams may be open at once",
    "revision.ends-watch-streams": "whether a capability revision change ends open WatchLoad streams (True)",
    "discovery.capabilities": "the Capabilities message GetCapabilities answers",
    "discovery.engine-info": "the EngineInfo message GetEngineInfo answers",
    "generate.admission": "the function that admits a GenerateRequest (request -> plan)",
    "generate.client-cancelled": "what frees a Generate request its client cancelled (request -> None)",
    "generate.terminal": "the terminal EngineError of an aborted Generate stream (None: none sent)",
    "admission.violations": "the preflight violations a request is refused for",
    "rpc.refuse-unadvertised": "whether an RPC of a profile that is not advertised is refused (True)",
    "admin.check-credentials": "whether Admin calls need credentials (True)",
    "admin.bearer-scheme-exact": "whether the bearer scheme must be spelled exactly 'Bearer' (False)",
    "server.interceptors": "the server interceptors (the wire policy)",
    "lifecycle.abort": "the function Abort cancels matching requests with (match, reason, retryable) -> count",
    "load.get": "the LoadInfo GetLoad answers",
    "load.rank-cached-blocks": "a rank's share of the prefix cache in its used KV blocks",
    "load.total-used-blocks": "the used KV blocks of a load snapshot",
    "events.first-sequence": "the sequence number of the first runtime event message",
    "sessions.ttl": "the time to live OpenSession grants, after clamping",
}

Act = Callable[..., Any]


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    requirements: tuple[str, ...]
    # Hook point -> what the fault does there: (the correct value, **context) -> the value used.
    at: Mapping[str, Act] = field(default_factory=dict)

    @property
    def spec(self) -> RuleSpec:
        """The fault as a catalogue entry: the requirements an engine with it breaks on purpose."""
        points = sorted({point.split(".", 1)[0] for point in self.at}) or ["engine"]
        return RuleSpec(self.name, self.name, "fault", ",".join(points), self.description, Severity.ERROR,
                        requirements=self.requirements)


class Hooks:
    """The hook points of one engine, with the acts of its active faults."""

    def __init__(self, names: Iterable[str] = ()):
        self.active = frozenset(names)
        self._acts: dict[str, list[Act]] = {}
        for name in sorted(self.active):
            for point, act in FAULTS[name].at.items():
                self._acts.setdefault(point, []).append(act)

    def at(self, point: str, value: Any, **context: Any) -> Any:
        """`value` as the engine uses it at `point`: unchanged unless an active fault acts there."""
        for act in self._acts.get(point, ()):
            value = act(value, **context)
        return value


def _constant(replacement: Any) -> Act:
    return lambda value, **context: replacement


# -- what the faults do at their hook points ----------------------------------------------------

def _caps_missing_core(caps, rt, **_):
    kept = [p for p in caps.profiles if p.name != rt.catalogue.core]
    del caps.profiles[:]
    caps.profiles.extend(kept)
    return caps


def _caps_duplicate_profile(caps, **_):
    if caps.profiles:
        last = type(caps.profiles[-1])()
        last.CopyFrom(caps.profiles[-1])
        caps.profiles.append(last)
    return caps


def _caps_unadvertised_submessage(caps, rt, **_):
    missing = next((p for p in rt.catalogue.profiles if p.capability_field and not rt.has(p.name)), None)
    if missing is not None:
        getattr(caps, missing.capability_field).SetInParent()
    return caps


def _caps_limit_out_of_range(caps, **_):
    caps.generation.max_sequences = 0
    return caps


def _caps_revision_mismatch(caps, **_):
    caps.revision += 1
    return caps


def _role_mismatch(info, rt, **_):
    from openengine.engine.contract import ROLE_NAMES

    role_scoped = [p for p in rt.advertised if p.scope == "role"]
    allowed = set(role_scoped[0].roles) if role_scoped else {rt.config.role}
    info.role = ROLE_NAMES[next(r for r in ROLE_NAMES if r not in allowed)]
    return info


def _admit_loosely(admit, rt, **_):
    """Only what the stand-in model needs to run: no limit, number or profile is checked."""
    from openengine.engine import model as lm

    def loose(request) -> dict:
        prompt = (list(request.token_ids.ids) if request.WhichOneof("prompt") == "token_ids"
                  else lm.tokenize(request.text))
        s = request.sampling
        return dict(prompt=prompt or [0], n=max(1, min(s.n if s.HasField("n") else 1, 64)),
                    max_tokens=max(1, min(s.max_tokens if s.HasField("max_tokens") else 16, 4096)),
                    guided=None, kv=request.kv_transfer if request.HasField("kv_transfer") else None,
                    extra_tokens=0, model=rt.model_name)
    return loose


def _abort_counts_only(abort, rt, **_):
    return lambda match, reason, *, retryable: sum(1 for r in rt.scheduler.in_flight() if match(r))


def _abort_everything(value, rt, **_):
    rt.scheduler.abort(lambda r: True, "load watcher cancelled", retryable=True)
    return value


def _getload_instance_mismatch(info, **_):
    info.instance_id = "not-" + info.instance_id
    return info


def _serving_unless_stopping(value, state, **_):
    from openengine.v1 import events_pb2

    return state != events_pb2.ENGINE_STATE_STOPPING


def _unknown_serving(value, **_):
    from grpc_health.v1 import health_pb2

    return health_pb2.HealthCheckResponse.SERVING


def _watch_without_initial(watch, **_):
    async def watch_changes_only(servicer, request, context):
        from grpc_health.v1 import health_pb2

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


def _drop_switch_violations(violations, **_):
    """Keep the numeric limits, forget the sampling switches and guided modes advertised off."""
    return [v for v in violations if not (v.rule_id == "OEV402" and v.path.startswith("sampling."))
            and not (v.rule_id == "OEV404" and v.path.startswith("sampling.guided"))]


def _run_on_after_cancel(release, rt, max_tokens, **_):
    """The cancelled request keeps its place and runs to its natural end before it is freed."""
    import asyncio

    async def run_on(req):
        try:
            while req.generated < max_tokens and req.aborted is None:
                await asyncio.sleep(max(rt.config.token_delay_ms / 1000.0, 0.001))
                req.generated += 1
        finally:
            release(req)

    return lambda req: rt.keep(asyncio.ensure_future(run_on(req)))


def _drop_number_violations(violations, **_):
    return [v for v in violations if v.rule_id not in ("OEV407", "OEV408")]


def _skip_on_drain(skips, v1, **_):
    return skips + ("auth",) if v1.endswith("/Drain") else skips


# Every fault by name, in the order `--list-faults` prints them.
FAULTS: RuleCatalogue[Fault] = RuleCatalogue("fault")
for _fault in (
    # -- compatibility aliases -----------------------------------------------------------------
    Fault("alias-unadvertised-served",
          "alias methods answer even when the profile of the v1 RPC they map to is not advertised",
          ("REQ-ALIAS-001",),
          at={"alias.gate-skips": lambda skips, **_: skips + ("profile",)}),
    Fault("alias-abort-separate",
          "an alias Abort answers without cancelling anything, so alias and v1 do not share requests",
          ("REQ-ALIAS-002",),
          at={"alias.abort-shared": _constant(False)}),
    Fault("alias-drain-unguarded",
          "the alias Drain runs without the admin credentials Admin/Drain requires",
          ("REQ-ALIAS-002",),
          at={"alias.gate-skips": _skip_on_drain}),
    Fault("alias-answers-differ",
          "the alias GetModelInfo reports a context length one larger than v1's",
          ("REQ-ALIAS-002",),
          at={"alias.context-length": lambda length, **_: length + 1}),
    Fault("alias-not-in-health",
          "a served alias is missing from the standard health service",
          ("REQ-ALIAS-003",),
          at={"health.aliases": _constant({})}),
    # -- WatchLoad -----------------------------------------------------------------------------
    Fault("watch-sequence-not-increasing",
          "WatchLoad repeats the previous sequence number on every third message",
          ("REQ-LOAD-014",),
          at={"watch.next-sequence": lambda following, sequence, **_:
              sequence if sequence > 0 and sequence % 3 == 2 else following}),
    Fault("watch-settings-not-first",
          "WatchLoad sends the initial snapshot before the settings",
          ("REQ-LOAD-004", "REQ-LOAD-009"),
          at={"watch.opening": _constant(("snapshot", "settings"))}),
    Fault("watch-timestamp-backwards",
          "WatchLoad stamps every second message one second earlier than the previous one",
          ("REQ-LOAD-014",),
          at={"watch.timestamp-ns": lambda ns, sequence, **_: ns - 1_000_000_000 if sequence % 2 == 1 else ns}),
    Fault("watch-no-initial-snapshot",
          "WatchLoad omits the initial snapshot even when the request asks for it",
          ("REQ-LOAD-009",),
          at={"watch.opening": lambda opening, **_: tuple(step for step in opening if step != "snapshot")}),
    Fault("watch-missing-heartbeat",
          "WatchLoad never sends heartbeats, however long the stream is quiet",
          ("REQ-LOAD-013",),
          at={"watch.heartbeats": _constant(False)}),
    Fault("watch-interval-not-clamped",
          "WatchLoad uses and reports the requested interval and heartbeat without clamping them",
          ("REQ-LOAD-006", "REQ-LOAD-008"),
          at={"watch.clamped": lambda clamped, requested, **_: requested}),
    Fault("watch-instance-id-mismatch",
          "WatchLoad settings and snapshots carry an instance id other than EngineInfo's",
          ("REQ-LOAD-002", "REQ-LOAD-005"),
          at={"watch.instance-id": lambda instance_id, **_: "not-" + instance_id}),
    Fault("watch-silent-gap",
          "WatchLoad coalesces updates of a slow watcher without counting them in coalesced",
          ("REQ-LOAD-016",),
          at={"watch.count-coalesced": _constant(False)}),
    Fault("watch-cancel-aborts-requests",
          "cancelling a WatchLoad stream aborts every running request",
          ("REQ-LOAD-018",),
          at={"watch.cancelled": _abort_everything}),
    Fault("watch-ends-ok",
          "WatchLoad ends the stream with status OK after the initial snapshot",
          ("REQ-LOAD-019",),
          at={"watch.keep-open": _constant(False)}),
    Fault("watch-max-watchers-ignored",
          "WatchLoad accepts more concurrent streams than max_watchers",
          ("REQ-LOAD-011",),
          at={"watch.max-watchers": _constant(float("inf"))}),
    Fault("watch-heartbeat-not-reset",
          "WatchLoad's heartbeat timer runs from the previous heartbeat, not the previous message, "
          "so a heartbeat can follow a snapshot sooner than heartbeat_ms",
          ("REQ-LOAD-013",),
          at={"watch.snapshot-restarts-heartbeat": _constant(False)}),
    Fault("watch-revision-stream-kept",
          "WatchLoad streams stay open across a capability revision change",
          ("REQ-REV-006",),
          at={"revision.ends-watch-streams": _constant(False)}),
    # -- Capabilities and discovery ------------------------------------------------------------
    Fault("capabilities-unadvertised-submessage",
          "Capabilities sets the capability message of a profile it does not advertise",
          ("REQ-CAP-006",),
          at={"discovery.capabilities": _caps_unadvertised_submessage}),
    Fault("capabilities-missing-core",
          "Capabilities.profiles leaves out openengine.core",
          ("REQ-CORE-001", "REQ-CAP-006", "REQ-CAP-010"),
          at={"discovery.capabilities": _caps_missing_core}),
    Fault("capabilities-duplicate-profile",
          "Capabilities.profiles lists the last advertised profile twice",
          ("REQ-CAP-003",),
          at={"discovery.capabilities": _caps_duplicate_profile}),
    Fault("capabilities-limit-out-of-range",
          "Capabilities reports openengine.core max_sequences as 0, below its minimum",
          ("REQ-CAP-008",),
          at={"discovery.capabilities": _caps_limit_out_of_range}),
    Fault("capabilities-revision-mismatch",
          "Capabilities.revision differs from EngineInfo.capability_revision",
          ("REQ-REV-001",),
          at={"discovery.capabilities": _caps_revision_mismatch}),
    Fault("capabilities-role-mismatch",
          "EngineInfo reports a role the advertised role-scoped profiles do not allow",
          ("REQ-CAP-011",),
          at={"discovery.engine-info": _role_mismatch}),
    Fault("limits-not-enforced",
          "Generate accepts requests beyond the advertised limits instead of INVALID_ARGUMENT",
          ("REQ-CAP-009", "REQ-SVC-003"),
          at={"generate.admission": _admit_loosely}),
    Fault("features-off-accepted",
          "Generate accepts min_p, logit_bias, prompt_logprobs and guided decoding modes that the "
          "capabilities advertise as off (numeric limits are still enforced)",
          ("REQ-CAP-009",),
          at={"admission.violations": _drop_switch_violations}),
    Fault("unadvertised-rpc-implemented",
          "RPCs of profiles that are not advertised answer instead of failing with UNIMPLEMENTED",
          ("REQ-CORE-003",),
          at={"rpc.refuse-unadvertised": _constant(False)}),
    # -- Health ---------------------------------------------------------------------------------
    Fault("health-not-per-service",
          "the health service reports only the whole server (\"\"), no advertised service by name",
          ("REQ-HEALTH-002", "REQ-HEALTH-007", "REQ-HEALTH-009"),
          at={"health.per-service": _constant({})}),
    Fault("health-unknown-not-found",
          "health Check answers SERVING for unknown service names instead of NOT_FOUND",
          ("REQ-HEALTH-003",),
          at={"health.unknown-service": _unknown_serving}),
    Fault("health-watch-no-initial",
          "health Watch waits for a change instead of sending the current status first",
          ("REQ-HEALTH-005", "REQ-HEALTH-006"),
          at={"health.watch": _watch_without_initial}),
    Fault("health-pause-not-reflected",
          "pausing or draining leaves openengine.v1.Inference SERVING",
          ("REQ-HEALTH-007", "REQ-HEALTH-011"),
          at={"health.work-serving": _serving_unless_stopping}),
    # -- Generation and cancellation ------------------------------------------------------------
    Fault("generate-no-terminal",
          "an aborted Generate stream ends with status OK but without its terminal EngineError",
          ("REQ-SVC-002", "REQ-CORE-009", "REQ-CORE-010"),
          at={"generate.terminal": _constant(None)}),
    Fault("client-cancel-ignored",
          "a Generate the client cancels keeps running (and counted in load) until its natural end",
          ("REQ-CORE-011",),
          at={"generate.client-cancelled": _run_on_after_cancel}),
    Fault("abort-ignored",
          "Abort reports the requests it found but leaves them running",
          ("REQ-CORE-010",),
          at={"lifecycle.abort": _abort_counts_only}),
    # -- Load -----------------------------------------------------------------------------------
    Fault("getload-instance-mismatch",
          "GetLoad reports an instance id other than EngineInfo's",
          ("REQ-LOAD-002",),
          at={"load.get": _getload_instance_mismatch}),
    Fault("load-ranks-not-summed",
          "per-rank used_kv_blocks leave out the prefix cache that the total counts",
          ("REQ-LOAD-023",),
          at={"load.rank-cached-blocks": _constant(0),
              "load.total-used-blocks": lambda used, rt, **_: min(rt.total_kv_blocks, used + len(rt.prefix_cache))}),
    # -- Runtime events, sessions, admin --------------------------------------------------------
    Fault("events-sequence-from-zero",
          "SubscribeRuntimeEvents numbers its messages from 0 instead of 1",
          ("REQ-EVENTS-001",),
          at={"events.first-sequence": _constant(0)}),
    Fault("session-ttl-not-clamped",
          "OpenSession grants a time to live longer than max_session_ttl_ms",
          ("REQ-SESS-001",),
          at={"sessions.ttl": lambda clamped, requested, **_: requested}),
    Fault("admin-no-auth",
          "Admin performs calls without checking credentials",
          ("REQ-ADMIN-002",),
          at={"admin.check-credentials": _constant(False)}),
    Fault("bearer-scheme-case-sensitive",
          "the admin guard accepts the bearer scheme only when spelled exactly `Bearer`",
          ("REQ-ADMIN-006",),
          at={"admin.bearer-scheme-exact": _constant(True)}),
    # -- Hostile input ----------------------------------------------------------------------------
    Fault("numbers-not-checked",
          "Generate and UpdateConfig accept NaN, infinite and out-of-domain numbers",
          ("REQ-SVC-005",),
          at={"admission.violations": _drop_number_violations}),
    Fault("wire-policy-off",
          "undecodable requests fail with gRPC's default UNKNOWN status naming the Python exception",
          ("REQ-SVC-006",),
          at={"server.interceptors": _constant([])}),
    Fault("health-list-unimplemented",
          "health List answers UNIMPLEMENTED",
          ("REQ-HEALTH-013",),
          at={"health.list-served": _constant(False)}),
):
    FAULTS.register(_fault.spec, _fault)


def fault(name: str) -> Fault:
    """The fault called `name`; ValueError naming the known ones otherwise."""
    try:
        return FAULTS[name]
    except KeyError:
        raise ValueError(f"unknown fault {name!r}; `oespec engine --list-faults` lists them") from None
