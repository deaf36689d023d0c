"""Faults the reference engine can be told to commit, each one wrong behaviour.

A conformance runner is only trustworthy if it fails engines that break the rules. Each fault
makes the engine misbehave in exactly one way a client can observe over the wire, and lists
every requirement that behaviour violates (a missing `openengine.core` entry, for instance,
also leaves every prerequisite unmet), so the runner's own tests can start the engine with
`--fault NAME` and expect the cases for those requirements to fail. This table is the one place
faults are defined: the engine reads it to know what to break, `oespec engine --list-faults`
prints it, and tests read it to make sure each one is observable.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    requirements: tuple[str, ...]


FAULTS: dict[str, Fault] = {f.name: f for f in (
    # -- WatchLoad -----------------------------------------------------------------------------
    Fault("watch-sequence-not-increasing",
          "WatchLoad repeats the previous sequence number on every third message",
          ("REQ-LOAD-014",)),
    Fault("watch-settings-not-first",
          "WatchLoad sends the initial snapshot before the settings",
          ("REQ-LOAD-004", "REQ-LOAD-009")),
    Fault("watch-timestamp-backwards",
          "WatchLoad stamps every second message one second earlier than the previous one",
          ("REQ-LOAD-014",)),
    Fault("watch-no-initial-snapshot",
          "WatchLoad omits the initial snapshot even when the request asks for it",
          ("REQ-LOAD-009",)),
    Fault("watch-missing-heartbeat",
          "WatchLoad never sends heartbeats, however long the stream is quiet",
          ("REQ-LOAD-013",)),
    Fault("watch-interval-not-clamped",
          "WatchLoad uses and reports the requested interval and heartbeat without clamping them",
          ("REQ-LOAD-006", "REQ-LOAD-008")),
    Fault("watch-instance-id-mismatch",
          "WatchLoad settings and snapshots carry an instance id other than EngineInfo's",
          ("REQ-LOAD-002", "REQ-LOAD-005")),
    Fault("watch-silent-gap",
          "WatchLoad coalesces updates of a slow watcher without counting them in coalesced",
          ("REQ-LOAD-016",)),
    Fault("watch-cancel-aborts-requests",
          "cancelling a WatchLoad stream aborts every running request",
          ("REQ-LOAD-018",)),
    Fault("watch-ends-ok",
          "WatchLoad ends the stream with status OK after the initial snapshot",
          ("REQ-LOAD-019",)),
    Fault("watch-max-watchers-ignored",
          "WatchLoad accepts more concurrent streams than max_watchers",
          ("REQ-LOAD-011",)),
    Fault("watch-heartbeat-not-reset",
          "WatchLoad's heartbeat timer runs from the previous heartbeat, not the previous message, "
          "so a heartbeat can follow a snapshot sooner than heartbeat_ms",
          ("REQ-LOAD-013",)),
    Fault("watch-revision-stream-kept",
          "WatchLoad streams stay open across a capability revision change",
          ("REQ-REV-006",)),
    # -- Capabilities and discovery ------------------------------------------------------------
    Fault("capabilities-unadvertised-submessage",
          "Capabilities sets the capability message of a profile it does not advertise",
          ("REQ-CAP-006",)),
    Fault("capabilities-missing-core",
          "Capabilities.profiles leaves out openengine.core",
          ("REQ-CORE-001", "REQ-CAP-006", "REQ-CAP-010")),
    Fault("capabilities-duplicate-profile",
          "Capabilities.profiles lists the last advertised profile twice",
          ("REQ-CAP-003",)),
    Fault("capabilities-limit-out-of-range",
          "Capabilities reports openengine.core max_sequences as 0, below its minimum",
          ("REQ-CAP-008",)),
    Fault("capabilities-revision-mismatch",
          "Capabilities.revision differs from EngineInfo.capability_revision",
          ("REQ-REV-001",)),
    Fault("capabilities-role-mismatch",
          "EngineInfo reports a role the advertised role-scoped profiles do not allow",
          ("REQ-CAP-011",)),
    Fault("limits-not-enforced",
          "Generate accepts requests beyond the advertised limits instead of INVALID_ARGUMENT",
          ("REQ-CAP-009", "REQ-SVC-003")),
    Fault("features-off-accepted",
          "Generate accepts min_p, logit_bias, prompt_logprobs and guided decoding modes that the "
          "capabilities advertise as off (numeric limits are still enforced)",
          ("REQ-CAP-009",)),
    Fault("unadvertised-rpc-implemented",
          "RPCs of profiles that are not advertised answer instead of failing with UNIMPLEMENTED",
          ("REQ-CORE-003",)),
    # -- Health ---------------------------------------------------------------------------------
    Fault("health-not-per-service",
          "the health service reports only the whole server (\"\"), no advertised service by name",
          ("REQ-HEALTH-002", "REQ-HEALTH-007", "REQ-HEALTH-009")),
    Fault("health-unknown-not-found",
          "health Check answers SERVING for unknown service names instead of NOT_FOUND",
          ("REQ-HEALTH-003",)),
    Fault("health-watch-no-initial",
          "health Watch waits for a change instead of sending the current status first",
          ("REQ-HEALTH-005", "REQ-HEALTH-006")),
    Fault("health-pause-not-reflected",
          "pausing or draining leaves openengine.v1.Inference SERVING",
          ("REQ-HEALTH-007", "REQ-HEALTH-011")),
    # -- Generation and cancellation ------------------------------------------------------------
    Fault("generate-no-terminal",
          "an aborted Generate stream ends with status OK but without its terminal EngineError",
          ("REQ-SVC-002", "REQ-CORE-009", "REQ-CORE-010")),
    Fault("client-cancel-ignored",
          "a Generate the client cancels keeps running (and counted in load) until its natural end",
          ("REQ-CORE-011",)),
    Fault("abort-ignored",
          "Abort reports the requests it found but leaves them running",
          ("REQ-CORE-010",)),
    # -- Load -----------------------------------------------------------------------------------
    Fault("getload-instance-mismatch",
          "GetLoad reports an instance id other than EngineInfo's",
          ("REQ-LOAD-002",)),
    # -- Runtime events, sessions, admin --------------------------------------------------------
    Fault("events-sequence-from-zero",
          "SubscribeRuntimeEvents numbers its messages from 0 instead of 1",
          ("REQ-EVENTS-001",)),
    Fault("session-ttl-not-clamped",
          "OpenSession grants a time to live longer than max_session_ttl_ms",
          ("REQ-SESS-001",)),
    Fault("admin-no-auth",
          "Admin performs calls without checking credentials",
          ("REQ-ADMIN-002",)),
)}


def fault(name: str) -> Fault:
    """The fault called `name`; ValueError naming the known ones otherwise."""
    try:
        return FAULTS[name]
    except KeyError:
        raise ValueError(f"unknown fault {name!r}; `oespec engine --list-faults` lists them") from None
