"""A small OpenEngine engine written apart from the reference engine, to keep the conformance
runner honest about engines it was not written with.

It is deliberately unlike `openengine.engine`: a plain synchronous `grpc.server` on a thread
pool, handlers registered as functions (no servicer classes, no descriptor-driven routing), one
thread per request that pushes tokens into a queue, and other timing: tokens every 1 to 3 ms, an
end-of-sequence token after a few of them unless the request says `ignore_eos`/`min_tokens`, and
a 250 ms minimum WatchLoad interval. It serves `openengine.core` and `openengine.load`; as
options (see `OtherEngine`), `openengine.admin` behind a bearer token, on the main address or one
of its own, `openengine.runtime-events`, `openengine.sessions`, `openengine.tasks`,
`openengine.adapters`, a shell command that shuts it down gracefully, and `upstream_only`:
upstream's Inference and Control alone, as an engine of today's layout serves them. `Bugs`
switches on one wrong behaviour at a time, each a finding the runner must catch.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import math
import os
import queue
import random
import shutil
import tempfile
import threading
import time
import uuid
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2, timestamp_pb2
from google.rpc import status_pb2
from grpc_health.v1 import health, health_pb2
from grpc_status import rpc_status

from openengine.contract import WORK_SERVICES, catalogue, number_domains
from openengine.v1 import (
    admin_pb2, capabilities_pb2 as caps_pb, common_pb2, discovery_pb2, error_pb2, events_pb2,
    generation_pb2 as gen_pb, lifecycle_pb2, load_pb2, model_pb2, server_pb2, sessions_pb2,
    tasks_pb2,
)

MODEL = "tiny"
MAX_OUTPUT_TOKENS = 2048
MAX_CONTEXT_TOKENS = 4096
EOS = 0
VOCAB_SIZE = 256
SERVICES = ("openengine.v1.Control", "openengine.v1.Discovery", "openengine.v1.Inference",
            "openengine.v1.Observability")
ADMIN = "openengine.v1.Admin"
UPDATABLE = "openengine.core.max_logprobs"     # the one limit UpdateConfig changes
MAX_SUBSCRIBERS = 8
SESSIONS = "openengine.v1.Sessions"
MAX_SESSIONS = 4
DEFAULT_SESSION_TTL_MS, MAX_SESSION_TTL_MS = 60_000, 120_000
TASKS = "openengine.v1.Tasks"
EMBEDDING_SIZE, MAX_TASK_INPUTS = 8, 16      # the model embeds; it neither classifies nor scores
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass(frozen=True)
class Bugs:
    """Wrong behaviours, each off by default."""

    ignore_cancel: bool = False            # a cancelled request runs on (REQ-CORE-011)
    accept_off: frozenset = frozenset()    # switches accepted although off (REQ-CAP-009)
    heartbeat_from_last_heartbeat: bool = False   # timer not reset by snapshots (REQ-LOAD-013)
    load_major: int = 1                    # major version advertised for openengine.load
    health_says_yes: bool = False          # Check answers SERVING for any name (REQ-HEALTH-003)
    watch_ends_after: float = 0.0          # seconds after which WatchLoad ends with OK (REQ-LOAD-019)
    heartbeat_off_ignored: bool = False    # heartbeat_ms 0 reported, default heartbeats sent (REQ-LOAD-008)
    snapshots_at_double_interval: bool = False   # one snapshot every two intervals (REQ-LOAD-012)
    abort_skips_queued: bool = False       # Abort by id ends running requests only (REQ-CORE-010)
    abort_all_running_only: bool = False   # Abort(all) leaves queued requests alone (REQ-CORE-010)
    abort_unknown_ok: bool = False         # Abort naming an unknown id answers ALREADY_FINISHED (REQ-CORE-010.6)
    abort_no_target_ok: bool = False       # Abort without a target answers ABORTED (REQ-CORE-010.8)
    abort_finished_aborted: bool = False   # Abort naming a finished request answers ABORTED (REQ-CORE-010.5)
    no_request_id_echo: bool = False       # responses carry no request_id (REQ-CORE-015)
    output_index_unset: bool = False       # token events leave output_index unset for 0 (REQ-CORE-016.1)
    usage_on_every_message: bool = False   # every response carries the usage so far (REQ-CORE-017.1)
    usage_total_wrong: bool = False        # usage.total_tokens leaves out the prompt (REQ-CORE-017.2)
    no_stop_match: bool = False            # a STOP finished event names no stop_match (REQ-CORE-018)
    max_tokens_ignored: bool = False       # max_tokens is not honoured at all (REQ-CORE-019.1)
    phantom_running: bool = False          # load counts one running request that never ends (REQ-LOAD-024.2)
    load_always_zero: bool = False         # load counts no request, ever (REQ-LOAD-001.2)
    logprobs_not_returned: bool = False    # output logprobs advertised, never delivered (REQ-CORE-006)
    prompt_logprobs_missing: bool = False  # prompt logprobs advertised, no prompt event (REQ-CORE-006)
    error_mid_stream: bool = False         # every request fails after 3 tokens (REQ-CORE-009)
    model_info_unknown_ok: bool = False    # GetModelInfo answers for any name (REQ-CORE-020.1)
    schema_revision_wrong: bool = False    # ServerInfo says schema_revision 1 (REQ-REV-009)
    control_health_unspecified: bool = False   # Control/Health answers UNSPECIFIED (REQ-HEALTH-014)
    cumulative_text: bool = False          # each token event repeats the text so far (REQ-CORE-016.2)
    prompt_event_late: bool = False        # the prompt event comes after the first token (REQ-CORE-016.3)
    usage_counts_one_more: bool = False    # completion_tokens is one more than generated (REQ-CORE-017.3)
    cached_above_prompt: bool = False      # cached_prompt_tokens exceeds prompt_tokens (REQ-CORE-017.4)
    ignore_eos_ignored: bool = False       # EOS ends an output although ignore_eos is set (REQ-CORE-019.3)
    empty_model_not_found: bool = False    # GetModelInfo with no model answers NOT_FOUND (REQ-CORE-020.2)
    running_inflated: bool = False         # running_requests counts each request ten times (REQ-LOAD-024.1)
    lora_relative_path_ok: bool = False    # LoadLora takes a relative source path (REQ-ADAPT-001)
    min_tokens_ignored: bool = False       # stop conditions end an output before min_tokens (REQ-CORE-019.2)
    seed_ignored: bool = False             # outputs are random whatever the seed (REQ-CORE-006)
    metadata_unchecked: bool = False       # malformed or repeated openengine- metadata accepted (REQ-SVC-007)
    upstream_views_differ: bool = False    # ModelInfo says 4 sequences, Capabilities 2 (REQ-CAP-014)
    cancel_ignored_while_queued: bool = False   # a queued request the client cancels stays (REQ-CORE-011)
    ignore_stop_token_ids: bool = False    # stop_token_ids do not end a sequence (REQ-CORE-013)
    ignore_stop_strings: bool = False      # stop strings do not end a sequence (REQ-CORE-013)
    load_cached_seconds: float = 0.0       # GetLoad answers a LoadInfo up to this old (REQ-LOAD-001)
    load_dropped_when_saturated: bool = False   # openengine.load unlisted while requests queue (REQ-CORE-005)
    max_output_unchecked: bool = False     # max_tokens above max_output_tokens accepted (REQ-CAP-009)
    coalesced_sequence_skips: bool = False  # a coalesced snapshot's sequence counts the skipped ones (REQ-LOAD-014)
    overfill: bool = False                 # accepts beyond running slots plus queue (REQ-CORE-014)
    abort_unimplemented: bool = False      # Control/Abort is not served (REQ-CORE-001)
    core_unlisted: bool = False            # Capabilities.profiles leaves out openengine.core (REQ-CORE-001)
    watch_unimplemented: bool = False      # WatchLoad is not served though load is advertised (REQ-CORE-002)
    load_unadvertised_served: bool = False   # load is not advertised, but its RPCs answer (REQ-CORE-003)
    max_tokens_overrun: bool = False       # a sequence runs one token past max_tokens (REQ-CORE-006)
    final_without_usage: bool = False      # the final response carries no usage (REQ-CORE-017.1)
    chunk_after_final: bool = False        # a token event follows its output's finished (REQ-CORE-009.2)
    ends_internal: bool = False            # a completed stream ends with INTERNAL (REQ-CORE-009)
    kv_session_aborts_all: bool = False    # Abort by kv_session ends every request (REQ-CORE-010.2)
    abort_code_internal: bool = False      # an aborted request ends with ERROR_CODE_INTERNAL (REQ-CORE-010.4)
    abort_counts_zero: bool = False        # Abort of a running request answers ALREADY_FINISHED (REQ-CORE-010.1)
    abort_queued_when_slot_frees: bool = False   # an aborted queued request ends when it gets a slot (REQ-CORE-010)
    role_unspecified: bool = False         # ServerInfo.engine_role is UNSPECIFIED (REQ-CORE-012)
    stop_string_kept: bool = False         # a matched stop string stays in the output (REQ-CORE-013)
    getload_no_timestamp: bool = False     # GetLoad's LoadInfo has no timestamp (REQ-LOAD-001)
    getload_ranks_unasked: bool = False    # GetLoad carries a rank though per_rank is off (REQ-LOAD-001)
    load_instance_id_differs: bool = False   # GetLoad names another instance (REQ-LOAD-002)
    snapshot_deltas: bool = False          # later snapshots leave out what did not change (REQ-LOAD-003)
    snapshot_before_settings: bool = False   # the initial snapshot comes before the settings (REQ-LOAD-004)
    settings_revision_stale: bool = False  # settings report capability_revision 0 (REQ-LOAD-005)
    interval_unclamped: bool = False       # a requested interval is used and reported unclamped (REQ-LOAD-006)
    zero_interval_kept: bool = False       # interval 0 without change_driven is reported as 0 (REQ-LOAD-007)
    no_initial_snapshot: bool = False      # no initial snapshot although asked for (REQ-LOAD-009)
    settings_per_rank_echoed: bool = False   # settings per_rank echoes the request, unsupported (REQ-LOAD-010)
    max_watchers_ignored: bool = False     # WatchLoad streams beyond max_watchers are accepted (REQ-LOAD-011)
    timestamps_backwards: bool = False     # every second WatchLoad message is stamped a second early (REQ-LOAD-014)
    snapshot_backlog: bool = False         # a stalled watcher gets every missed snapshot afterwards (REQ-LOAD-015)
    coalesced_uncounted: bool = False      # coalesced is always 0 (REQ-LOAD-016)
    coalesced_overcounted: bool = False    # every snapshot's coalesced claims 5 updates more (REQ-LOAD-016)
    one_sender: bool = False               # a stream waits while any other stream's send is blocked (REQ-LOAD-017)
    watch_cancel_aborts: bool = False      # cancelling a WatchLoad stream aborts every request (REQ-LOAD-018)
    empty_watch_message: bool = False      # one WatchLoad message sets no kind (REQ-LOAD-022)
    ranks_not_summed: bool = False         # rank 0 counts a request more than the total (REQ-LOAD-023)
    vendor_name_not_canonical: bool = False   # a vendor profile named "Acme.Fast" (REQ-CAP-001)
    core_listed_twice: bool = False        # openengine.core 1 appears twice (REQ-CAP-003)
    kv_limits_unadvertised: bool = False   # Capabilities.kv is set, kv not advertised (REQ-CAP-006)
    limit_out_of_range: bool = False       # max_watchers advertised above its maximum (REQ-CAP-008)
    kv_on_aggregated: bool = False         # openengine.kv advertised by an aggregated engine (REQ-CAP-011)
    tasks_on_no_model: bool = False        # model-scoped openengine.tasks, listed by no model (REQ-CAP-012)
    revision_differs: bool = False         # Capabilities.revision 2, ServerInfo's 1 (REQ-REV-001)
    incompatible_limits: bool = False      # speculative decoding advertised with min_p (REQ-CAP-010)
    health_unimplemented: bool = False     # no standard health service (REQ-HEALTH-001)
    health_service_missing: bool = False   # Check for Observability answers NOT_FOUND (REQ-HEALTH-002)
    health_overall_not_serving: bool = False   # Check("") NOT_SERVING, Inference SERVING (REQ-HEALTH-004)
    health_watch_waits: bool = False       # Watch sends nothing until a status changes (REQ-HEALTH-005)
    health_watch_unknown_ends: bool = False   # Watch for an unknown name ends the stream (REQ-HEALTH-006)
    health_list_unimplemented: bool = False   # health List answers UNIMPLEMENTED (REQ-HEALTH-013)
    control_under_short_name: bool = False   # Control also answers as openengine.Control (REQ-SVC-001)
    abort_error_twice: bool = False        # a failed stream carries its EngineError twice (REQ-SVC-002)
    unknown_model_invalid: bool = False    # an unknown model fails INVALID_ARGUMENT (REQ-SVC-003)
    watchers_full_unavailable: bool = False   # a stream beyond max_watchers fails UNAVAILABLE (REQ-SVC-004)
    nan_temperature_accepted: bool = False   # a NaN temperature is sampled as if greedy (REQ-SVC-005)
    undecodable_unknown: bool = False      # bytes that do not parse fail UNKNOWN (REQ-SVC-006)
    capabilities_vary: bool = False        # every second GetCapabilities reports max_logprobs 4 (REQ-REV-002)
    revision_bumps_on_request: bool = False   # each finished request raises the revision (REQ-REV-004)
    # With Admin (`admin_token`), runtime events or an admin address of its own:
    any_token_accepted: bool = False       # any bearer token passes the admin guard (REQ-ADMIN-002)
    limited_token_allowed: bool = False    # the limited token may pause the engine (REQ-ADMIN-003)
    guard_on_every_service: bool = False   # a wrong admin token is refused on every service (REQ-ADMIN-004)
    bearer_case_sensitive: bool = False    # only the scheme spelled "Bearer" is accepted (REQ-ADMIN-006)
    admin_address_overall_down: bool = False   # the admin address reports "" NOT_SERVING (REQ-ADMIN-001)
    pause_health_unchanged: bool = False   # pausing leaves every health status SERVING (REQ-HEALTH-007)
    paused_refuses_exhausted: bool = False   # Generate while paused fails RESOURCE_EXHAUSTED (REQ-HEALTH-008)
    pause_stops_control: bool = False      # pausing turns the control services NOT_SERVING too (REQ-HEALTH-009)
    shutdown_abrupt: bool = False          # shutdown stops serving without NOT_SERVING first (REQ-HEALTH-010)
    resume_not_announced: bool = False     # resuming sends no StateChanged (REQ-HEALTH-011)
    events_from_zero: bool = False         # runtime event sequences start at 0 (REQ-EVENTS-001)
    initial_state_ignored: bool = False    # no StateChanged first although initial_state is set (REQ-EVENTS-002)
    update_keeps_revision: bool = False    # UpdateConfig changes a limit but not the revision (REQ-REV-003)
    revision_event_missing: bool = False   # no CapabilityRevisionChanged is sent (REQ-REV-005)
    revision_keeps_watches: bool = False   # WatchLoad streams outlive a revision change (REQ-REV-006)
    revision_aborts_unretryable: bool = False   # a revision change aborts running requests, not retryable (REQ-REV-007)
    session_ttl_unclamped: bool = False    # a ttl above max_session_ttl_ms is kept (REQ-SESS-001)
    task_family_unimplemented: bool = False   # a family the model lacks answers UNIMPLEMENTED (REQ-TASKS-001)
    lora_served: bool = False              # Control/LoadLora answers, openengine.adapters unadvertised (REQ-CORE-003)


STEP = 4     # tokens of an output made in one decode step


@dataclass(frozen=True)
class Timing:
    token_seconds: tuple[float, float] = (0.001, 0.003)
    eos_after: tuple[int, int] = (2, 4)    # tokens before the model emits EOS on its own
    min_watch_interval_ms: int = 250
    max_watch_interval_ms: int = 10_000
    default_watch_interval_ms: int = 1000
    default_heartbeat_ms: int = 2000
    max_watchers: int = 8
    max_running_requests: int = 8
    max_queued_requests: int = 4
    max_sequences: int = 2
    max_logprobs: int = 5
    logprobs: bool = True      # output and prompt log-probabilities are offered
    data_parallel: int = 1     # above 1: per-rank load figures (ObservabilityCapabilities.per_rank)


def _now() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    return ts


def _nanos() -> int:
    return time.time_ns()


class Job:
    """One Generate request, produced by its own thread into `events`."""

    def __init__(self, request_id: str, prompt_tokens: int, request, timing: Timing, bugs: Bugs):
        self.request_id = request_id
        self.bugs = bugs
        # Set when the client cancelled while the request was queued and the engine missed it.
        self.cancel_deaf = False
        self.prompt_tokens = prompt_tokens
        self.request = request
        self.timing = timing
        self.events: queue.Queue = queue.Queue()
        # "abort" (Control/Abort), "end" (paused, asleep, drained or a revision change), "cancel"
        self.stop_reason: str | None = None
        self.retryable = False     # what the EngineError of an ended request says
        self.started = threading.Event()
        self.made: list[int] = []

    def produce(self, slots: threading.Semaphore, on_start, on_end) -> None:
        try:
            self._produce(slots, on_start, on_end)
        finally:
            # A cancelled request ends without a message; this frees the thread waiting on it.
            self.events.put(("gone", None))

    def _stopped(self) -> bool:
        """Whether an abort or an end was asked for; it is queued as the request's last event."""
        if self.stop_reason in ("abort", "end"):
            self.events.put((self.stop_reason, None))
            return True
        return False

    def _produce(self, slots: threading.Semaphore, on_start, on_end) -> None:
        s, stopping = self.request.sampling, self.request.stopping
        n = s.num_sequences if s.HasField("num_sequences") else 1
        max_tokens = min(stopping.max_tokens, MAX_OUTPUT_TOKENS) \
            if stopping.HasField("max_tokens") and not self.bugs.max_tokens_ignored else MAX_OUTPUT_TOKENS
        floor = stopping.min_tokens if stopping.HasField("min_tokens") and not self.bugs.min_tokens_ignored else 0
        rng = random.Random(self.request_id)
        eos_at = [rng.randint(*self.timing.eos_after) for _ in range(n)]
        made = self.made = [0] * n
        done = [False] * n
        texts = [""] * n
        stop_ids = set() if self.bugs.ignore_stop_token_ids else {
            c.stop_token_id for c in stopping.conditions if c.WhichOneof("condition") == "stop_token_id"}
        stop_strings = [] if self.bugs.ignore_stop_strings else [
            c.stop_text for c in stopping.conditions if c.WhichOneof("condition") == "stop_text" and c.stop_text]
        # A queued request waits for a slot, but an abort or a cancel ends it there at once (at
        # the next look, a few milliseconds on: far sooner than a running request frees a slot).
        while not slots.acquire(timeout=0.01):
            if self.stop_reason is not None and not (self.stop_reason == "cancel" and self.cancel_deaf) \
                    and not (self.stop_reason == "abort" and self.bugs.abort_queued_when_slot_frees):
                self._stopped()
                on_end(self)
                return
        try:
            on_start(self)
            try:
                if self._stopped():     # aborted while queued, seen only now
                    return
                while not all(done):
                    # A decode step makes STEP tokens of each output at once; the stream sends
                    # what is ready in one message (several tokens to a TokenOutput).
                    if made[0] % STEP == 0:
                        time.sleep(STEP * rng.uniform(*self.timing.token_seconds))
                    if self._stopped():
                        return
                    if self.stop_reason == "cancel" and not self.cancel_deaf:
                        return
                    if self.bugs.error_mid_stream and made[0] >= 3:
                        self.events.put(("failed", None))
                        return
                    for i in range(n):
                        if done[i]:
                            continue
                        made[i] += 1
                        ignore_eos = stopping.ignore_eos and not self.bugs.ignore_eos_ignored
                        wants_eos = made[i] >= eos_at[i] and not ignore_eos and made[i] > floor
                        step = random.randrange(50) if self.bugs.seed_ignored else made[i] * 7 + i
                        token = EOS if wants_eos else 100 + step % 50
                        texts[i] += chr(token) if token else ""
                        may_stop = made[i] > floor
                        by_string = next((x for x in stop_strings if texts[i].endswith(x)), "") \
                            if may_stop else ""
                        by_token = may_stop and token in stop_ids
                        if wants_eos or by_token or by_string or made[i] >= max_tokens + self.bugs.max_tokens_overrun:
                            done[i] = True
                            stopped = wants_eos or by_token or by_string
                            reason = gen_pb.FINISH_REASON_STOP if stopped else gen_pb.FINISH_REASON_LENGTH
                            match = ("stop_text", by_string) if by_string else ("stop_token_id", token) \
                                if by_token else ("eos_token_id", EOS) if wants_eos else None
                            self.events.put(("final", (i, token, reason, match)))
                        else:
                            self.events.put(("token", (i, token)))
                self.events.put(("done", None))
            finally:
                on_end(self)
        finally:
            slots.release()


@dataclass
class State:
    bugs: Bugs
    timing: Timing
    instance_id: str = field(default_factory=lambda: f"other-{uuid.uuid4().hex[:8]}")
    lock: threading.Lock = field(default_factory=threading.Lock)
    jobs: dict = field(default_factory=dict)        # request id -> Job, queued or running
    running: set = field(default_factory=set)
    watchers: int = 0
    rejected: int = 0
    sending: int = 0     # streams blocked in a send (the one_sender bug waits for none)
    revision: int = 1    # the capability revision
    capability_reads: int = 0
    cached: tuple = (0.0, None)      # (monotonic time, LoadInfo) for the load_cached_seconds bug
    admin: bool = False          # openengine.admin is advertised
    events: bool = False         # openengine.runtime-events is advertised
    sessions: dict | None = None  # session id -> SessionInfo, when openengine.sessions is advertised
    tasks: bool = False          # the model serves openengine.tasks (embedding only)
    upstream_only: bool = False  # serves upstream's Inference and Control alone
    loras: dict | None = None    # lora name -> LoraAdapter, when openengine.adapters is served
    finished: dict = field(default_factory=dict)    # request id -> True, recently finished
    run_state: int = events_pb2.ENGINE_STATE_SERVING
    health: health.HealthServicer | None = None         # the main address's
    admin_health: health.HealthServicer | None = None   # the admin address's, when it has one
    subscribers: list = field(default_factory=list)     # one queue per SubscribeRuntimeEvents stream
    watch_wakes: set = field(default_factory=set)       # one event per WatchLoad stream

    def __post_init__(self):
        self.slots = threading.Semaphore(self.timing.max_running_requests)
        self.max_logprobs = self.timing.max_logprobs    # UpdateConfig may change it

    def get_load(self, per_rank: bool = False) -> server_pb2.LoadInfo:
        bugs = self.bugs
        if not bugs.load_cached_seconds:
            info = self.load(per_rank)
        else:
            at, info = self.cached
            if info is None or time.monotonic() - at > bugs.load_cached_seconds:
                self.cached = (time.monotonic(), self.load())
            info = self.cached[1]
        if bugs.getload_no_timestamp or bugs.getload_ranks_unasked or bugs.load_instance_id_differs:
            info = server_pb2.LoadInfo.FromString(info.SerializeToString())
            if bugs.getload_no_timestamp:
                info.ClearField("timestamp_unix_nanos")
            if bugs.getload_ranks_unasked:
                info.ranks.add(data_parallel_rank=0, running_requests=info.running_requests,
                               queued_requests=info.queued_requests)
            if bugs.load_instance_id_differs:
                info.instance_id = "another-" + info.instance_id
        return info

    def load(self, per_rank: bool = False) -> server_pb2.LoadInfo:
        with self.lock:
            running = len(self.running) + self.bugs.phantom_running
            queued = len(self.jobs) - len(self.running)
        if self.bugs.load_always_zero:
            running = queued = 0
        running *= 10 if self.bugs.running_inflated else 1
        info = server_pb2.LoadInfo(instance_id=self.instance_id, timestamp_unix_nanos=_nanos(),
                                   running_requests=running, queued_requests=queued,
                                   rejected_requests=self.rejected)
        ranks = self.timing.data_parallel
        if per_rank and ranks > 1:
            # Requests are dealt to ranks in turn: rank k holds every k-th one.
            for k in range(ranks):
                info.ranks.add(data_parallel_rank=k, running_requests=len(range(k, running, ranks)),
                               queued_requests=len(range(k, queued, ranks)))
            if self.bugs.ranks_not_summed:
                info.ranks[0].running_requests += 1
        return info


# -- discovery -------------------------------------------------------------------------------------

def capabilities(st: State) -> caps_pb.Capabilities:
    t = st.timing
    profiles = [common_pb2.ServiceProfile(name="openengine.core", major=1, minor=0),
                common_pb2.ServiceProfile(name="openengine.load", major=st.bugs.load_major, minor=0)]
    if st.bugs.load_dropped_when_saturated and st.load().queued_requests:
        del profiles[1]
    if st.bugs.core_unlisted:
        del profiles[0]
    if st.bugs.core_listed_twice:
        profiles.append(common_pb2.ServiceProfile(name="openengine.core", major=1, minor=0))
    if st.bugs.vendor_name_not_canonical:
        profiles.append(common_pb2.ServiceProfile(name="Acme.Fast", major=1, minor=0))
    if st.bugs.kv_on_aggregated:
        profiles.append(common_pb2.ServiceProfile(name="openengine.kv", major=1, minor=0))
    if st.bugs.tasks_on_no_model:
        profiles.append(common_pb2.ServiceProfile(name="openengine.tasks", major=1, minor=0))
    out = caps_pb.Capabilities(revision=st.revision + st.bugs.revision_differs, profiles=profiles)
    if st.bugs.kv_limits_unadvertised:
        out.kv.kv_block_size = 16
    if st.bugs.incompatible_limits:
        out.core.speculative_decoding = True
        out.core.min_p = True
    out.core.max_sequences = t.max_sequences
    out.core.max_logprobs = st.max_logprobs
    out.core.output_logprobs = t.logprobs
    out.core.prompt_logprobs = t.logprobs
    st.capability_reads += 1
    if st.bugs.capabilities_vary and st.capability_reads % 2 == 0:
        out.core.max_logprobs = st.max_logprobs - 1
    if st.admin:
        out.profiles.add(name="openengine.admin", major=1, minor=0)
        out.admin.pause_modes.append(caps_pb.PAUSE_MODE_ABORT)
        out.admin.max_sleep_level = 1
        out.admin.updatable_limits.append(UPDATABLE)
    # Every served model has its entry, so a model-scoped profile no model lists is visible.
    model = out.models.add(model=MODEL)
    if st.loras is not None:
        out.profiles.add(name="openengine.adapters", major=1, minor=0)
        model.profiles.add(name="openengine.adapters", major=1, minor=0)
        model.adapters.max_loras = MAX_LORAS
        model.adapters.max_cpu_loras = MAX_LORAS
    if st.tasks:
        out.profiles.add(name="openengine.tasks", major=1, minor=0)
        model.profiles.add(name="openengine.tasks", major=1, minor=0)
        model.tasks.supported_tasks.append(caps_pb.TASK_FAMILY_EMBED)
        model.tasks.max_inputs_per_request = MAX_TASK_INPUTS
        model.tasks.embedding_size = EMBEDDING_SIZE
    if st.sessions is not None:
        out.profiles.add(name="openengine.sessions", major=1, minor=0)
        out.sessions.max_sessions = MAX_SESSIONS
        out.sessions.default_session_ttl_ms = DEFAULT_SESSION_TTL_MS
        out.sessions.max_session_ttl_ms = MAX_SESSION_TTL_MS
    if st.events:
        out.profiles.add(name="openengine.runtime-events", major=1, minor=0)
        out.runtime_events.event_kinds.extend([caps_pb.RUNTIME_EVENT_KIND_CAPABILITY_REVISION_CHANGED,
                                               caps_pb.RUNTIME_EVENT_KIND_STATE_CHANGED])
        out.runtime_events.max_subscribers = MAX_SUBSCRIBERS
    out.core.max_running_requests = t.max_running_requests
    out.core.max_queued_requests = t.max_queued_requests
    out.observability.min_watch_interval_ms = t.min_watch_interval_ms
    out.observability.max_watch_interval_ms = t.max_watch_interval_ms
    out.observability.default_watch_interval_ms = t.default_watch_interval_ms
    out.observability.default_heartbeat_ms = t.default_heartbeat_ms
    out.observability.max_watchers = t.max_watchers
    out.observability.per_rank = t.data_parallel > 1
    if st.bugs.limit_out_of_range:
        out.observability.max_watchers = 70_000     # the registry's maximum is 65536
    if st.bugs.load_unadvertised_served:
        del out.profiles[1]
        out.ClearField("observability")
    return out


def server_info(st: State) -> server_pb2.ServerInfo:
    contract = catalogue()
    info = server_pb2.ServerInfo(
        instance_id=st.instance_id, engine_name="otherengine", engine_version="0.1",
        engine_role=server_pb2.ENGINE_ROLE_UNSPECIFIED if st.bugs.role_unspecified
        else server_pb2.ENGINE_ROLE_AGGREGATED,
        capability_revision=0 if st.upstream_only else st.revision, supported_models=[MODEL],
        schema_revision=1 if st.upstream_only or st.bugs.schema_revision_wrong else contract.schema_revision,
        minimum_client_revision=contract.minimum_client_revision,
        schema_release="openengine-v1" if st.upstream_only else contract.schema_release)
    info.capacity.max_running_requests = st.timing.max_running_requests
    if st.timing.data_parallel > 1:
        info.parallelism.data_parallel_size = st.timing.data_parallel
    return info


def model_info(st: State, request, context):
    if request.model not in ("", MODEL) and not st.bugs.model_info_unknown_ok \
            or (not request.model and st.bugs.empty_model_not_found):
        context.abort(grpc.StatusCode.NOT_FOUND, f"model: no model {request.model!r}")
    info = model_pb2.ModelInfo(model_id=MODEL, served_model_name=MODEL,
                               max_context_length=MAX_CONTEXT_TOKENS,
                               max_output_tokens=MAX_OUTPUT_TOKENS, supports_text_input=True,
                               supports_token_ids_input=True)
    gen = info.generation
    gen.max_num_sequences = st.timing.max_sequences + 2 * st.bugs.upstream_views_differ
    gen.output_logprobs.supported = st.timing.logprobs
    gen.prompt_logprobs.supported = st.timing.logprobs
    if st.timing.logprobs:
        gen.output_logprobs.max_top_n = st.max_logprobs
        gen.prompt_logprobs.max_top_n = st.max_logprobs
    gen.supports_stop_in_output = True
    info.supports_lora = st.loras is not None
    return info


# -- generation ------------------------------------------------------------------------------------

def refusal(st: State, request) -> tuple[grpc.StatusCode, str] | None:
    """Why a GenerateRequest is refused, or None."""
    bad = grpc.StatusCode.INVALID_ARGUMENT
    s, stopping, resp, t, lax = request.sampling, request.stopping, request.response, st.timing, st.bugs.accept_off
    if request.model not in ("", MODEL):
        code = bad if st.bugs.unknown_model_invalid else grpc.StatusCode.NOT_FOUND
        return code, f"model: no model {request.model!r}"
    if request.session_id and request.session_id not in live_sessions(st):
        return grpc.StatusCode.NOT_FOUND, f"session_id: no open session {request.session_id!r}"
    if request.lora_name and st.loras is not None and request.lora_name not in st.loras:
        return grpc.StatusCode.NOT_FOUND, f"lora_name: no adapter {request.lora_name!r}"
    prompt = request.prompt or list(request.token_ids.ids)
    if not prompt:
        return bad, "prompt: empty"
    if s.HasField("num_sequences") and not 1 <= s.num_sequences <= t.max_sequences:
        return bad, f"sampling.num_sequences: 1..{t.max_sequences}"
    for name, selection in (("output", resp.output_candidates), ("prompt", resp.prompt_candidates)):
        if selection.WhichOneof("selection") not in (None, "top_n"):
            return bad, f"response.{name}_candidates: only top_n is offered"
        if selection.top_n > st.max_logprobs:
            return bad, f"response.{name}_candidates.top_n: at most {st.max_logprobs}"
    switches = {"min_p": s.HasField("min_p"), "guided": request.HasField("guided"),
                "output_logprobs": resp.return_output_logprobs and not t.logprobs,
                "prompt_logprobs": resp.return_prompt_logprobs and not t.logprobs,
                "lora_name": bool(request.lora_name) and st.loras is None, "kv": request.HasField("kv")}
    for name, used in switches.items():
        if used and name not in lax:
            return bad, f"{name}: not supported by this engine"
    domains = {f.name: number_domains()[f.full_name] for f in s.DESCRIPTOR.fields if f.full_name in number_domains()}
    for name, domain in domains.items():
        if name == "temperature" and st.bugs.nan_temperature_accepted and math.isnan(s.temperature):
            continue
        if s.HasField(name) and not (math.isfinite(getattr(s, name)) and domain.contains(getattr(s, name))):
            return bad, f"sampling.{name}: {getattr(s, name)} is not a usable value"
    if stopping.HasField("max_tokens") and not 1 <= stopping.max_tokens <= MAX_OUTPUT_TOKENS \
            and not (st.bugs.max_output_unchecked and stopping.max_tokens > MAX_OUTPUT_TOKENS):
        return bad, f"stopping.max_tokens: 1..{MAX_OUTPUT_TOKENS}"
    limit = stopping.max_tokens if stopping.HasField("max_tokens") else MAX_OUTPUT_TOKENS
    if stopping.HasField("min_tokens") and stopping.min_tokens > limit:
        return bad, "stopping.min_tokens: above max_tokens"
    return None


def metadata_refusal(context) -> tuple[grpc.StatusCode, str] | None:
    """Upstream's request metadata: each openengine- key at most once, numbers that parse."""
    seen: dict[str, str] = {}
    for key, value in context.invocation_metadata():
        if not key.startswith("openengine-"):
            continue
        if key in seen:
            return grpc.StatusCode.INVALID_ARGUMENT, f"metadata {key}: sent more than once"
        seen[key] = value
    limits = {"openengine-priority": (-2**31, 2**31 - 1), "openengine-target-dp-rank": (0, 2**32 - 1)}
    for key, (low, high) in limits.items():
        if key in seen and not (seen[key].lstrip("-").isdigit() and low <= int(seen[key]) <= high):
            return grpc.StatusCode.INVALID_ARGUMENT, f"metadata {key}: {seen[key]!r} is not a number in range"
    return None


def _token_info(request, st: State, token: int) -> gen_pb.TokenInfo:
    info = gen_pb.TokenInfo(token_id=token, token="" if not token else chr(token))
    if request.response.return_output_logprobs and not st.bugs.logprobs_not_returned:
        info.logprob, info.rank = -0.5, 1
        for k in range(request.response.output_candidates.top_n):
            info.candidates.add(token_id=100 + k, logprob=-0.5 - k, token=chr(100 + k), rank=k + 1)
    return info


def generate(st: State, request, context):
    if st.run_state != events_pb2.ENGINE_STATE_SERVING:
        if st.bugs.paused_refuses_exhausted and st.run_state == events_pb2.ENGINE_STATE_PAUSED:
            context.abort_with_status(full_status())
        context.abort(grpc.StatusCode.UNAVAILABLE, f"the engine is {events_pb2.EngineState.Name(st.run_state)}")
    problem = refusal(st, request) or (None if st.bugs.metadata_unchecked else metadata_refusal(context))
    if problem:
        context.abort(*problem)
    request_id = request.request_id or uuid.uuid4().hex
    prompt_tokens = len(request.prompt.encode()) or len(request.token_ids.ids)
    job = Job(request_id, prompt_tokens, request, st.timing, st.bugs)
    with st.lock:
        if request_id in st.jobs:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"request_id {request_id!r} is running")
        full = len(st.jobs) >= st.timing.max_running_requests + st.timing.max_queued_requests
        if full and not st.bugs.overfill:
            st.rejected += 1
            context.abort_with_status(full_status())
        st.jobs[request_id] = job

    def started(j):
        with st.lock:
            st.running.add(j.request_id)

    def ended(j):
        with st.lock:
            st.running.discard(j.request_id)
            st.jobs.pop(j.request_id, None)
            st.finished[j.request_id] = True
            while len(st.finished) > 256:
                st.finished.pop(next(iter(st.finished)))
            st.revision += st.bugs.revision_bumps_on_request

    def cancelled():
        with st.lock:
            queued = job.request_id not in st.running
        if st.bugs.cancel_ignored_while_queued and queued:
            job.cancel_deaf = True
        job.stop_reason = job.stop_reason or "cancel"

    if not st.bugs.ignore_cancel:
        context.add_callback(cancelled)
    threading.Thread(target=job.produce, args=(st.slots, started, ended), daemon=True).start()
    n = request.sampling.num_sequences if request.sampling.HasField("num_sequences") else 1
    echo = "" if st.bugs.no_request_id_echo else request_id
    finished: set[int] = set()

    def usage() -> gen_pb.Usage:
        completion = sum(job.made) + st.bugs.usage_counts_one_more
        out = gen_pb.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion,
                           total_tokens=completion + (0 if st.bugs.usage_total_wrong else prompt_tokens))
        if st.bugs.cached_above_prompt:
            out.cached_prompt_tokens = prompt_tokens + 1
        return out

    def response(**event) -> gen_pb.GenerateResponse:
        out = gen_pb.GenerateResponse(request_id=echo, **event)
        if st.bugs.usage_on_every_message:
            out.usage.CopyFrom(usage())
        return out

    sent_text: dict[int, str] = {}

    def token_event(index: int, tokens, text: str) -> gen_pb.GenerateResponse:
        sent_text[index] = sent_text.get(index, "") + text
        if st.bugs.cumulative_text:
            text = sent_text[index]
        event = gen_pb.TokenOutput(tokens=tokens, text=text)
        if index or not st.bugs.output_index_unset:
            event.output_index = index
        return response(token=event)

    prompt_event = None
    if request.response.return_prompt_logprobs and not st.bugs.prompt_logprobs_missing:
        prompt = gen_pb.PromptOutput()
        for k, byte in enumerate(request.prompt.encode() or bytes(t % 256 for t in request.token_ids.ids)):
            info = prompt.tokens.add(token_id=byte, token=chr(byte))
            if k:
                info.logprob, info.rank = -1.0, 1
                for c in range(request.response.prompt_candidates.top_n):
                    info.candidates.add(token_id=100 + c, logprob=-1.0 - c, token=chr(100 + c), rank=c + 1)
        prompt_event = response(prompt=prompt)
        if not st.bugs.prompt_event_late:
            yield prompt_event
            prompt_event = None
    pending = None     # an event read while gathering tokens, not yet sent
    while True:
        (kind, data), pending = pending or job.events.get(), None
        if kind == "gone":
            return
        if kind == "done":
            if st.bugs.ends_internal:
                context.abort(grpc.StatusCode.INTERNAL, "the stream failed after its final")
            return
        if kind in ("abort", "end", "failed"):
            if kind == "abort" and not st.bugs.abort_code_internal:
                last = None
                for i in range(n):
                    if i not in finished:
                        last = response(finished=gen_pb.GenerationFinished(
                            output_index=i, reason=gen_pb.FINISH_REASON_CANCELLED, message="aborted"))
                        finished.add(i)
                        if len(finished) < n:
                            yield last
                if last is not None:
                    last.usage.CopyFrom(usage())
                    yield last
                return
            code = error_pb2.ERROR_CODE_INTERNAL if kind != "end" or st.bugs.abort_code_internal \
                else error_pb2.ERROR_CODE_CANCELLED
            error = response(error=error_pb2.EngineError(
                code=code, message="the request failed" if kind == "failed" else "ended",
                retryable=job.retryable))
            error.usage.CopyFrom(usage())
            yield error
            if st.bugs.abort_error_twice:
                yield error
            return
        if kind == "token":
            index, token = data
            tokens = [token]
            while pending is None:      # the tokens of this output already made go along
                try:
                    pending = job.events.get_nowait()
                except queue.Empty:
                    break
                if pending[0] == "token" and pending[1][0] == index:
                    tokens.append(pending[1][1])
                    pending = None
            text = "" if request.skip_detokenize else "".join(map(chr, tokens))
            yield token_event(index, [_token_info(request, st, t) for t in tokens], text)
            if prompt_event is not None:
                yield prompt_event
                prompt_event = None
            continue
        index, token, reason, match = data
        keep_stop = request.stopping.include_stop_in_output
        sent_token = not (match and match[0] == "stop_token_id" and not keep_stop)
        if sent_token:
            text = "" if request.skip_detokenize or not token else chr(token)
            if match and match[0] == "stop_text" and not keep_stop and not st.bugs.stop_string_kept:
                text = ""
            yield token_event(index, [_token_info(request, st, token)], text)
        event = gen_pb.GenerationFinished(output_index=index, reason=reason)
        if match and not st.bugs.no_stop_match:
            setattr(event.stop_match, match[0], match[1])
        finished.add(index)
        final = response(finished=event)
        if len(finished) == n and not st.bugs.final_without_usage:
            final.usage.CopyFrom(usage())
        yield final
        if st.bugs.chunk_after_final:
            yield token_event(index, [gen_pb.TokenInfo(token_id=token)], "")


def full_status() -> grpc.Status:
    error = any_pb2.Any()
    error.Pack(error_pb2.EngineError(code=error_pb2.ERROR_CODE_OVERLOADED, message="full", retryable=True))
    return rpc_status.to_status(status_pb2.Status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                                                  message="queue full", details=[error]))


def abort(st: State, request, context):
    bugs = st.bugs
    target = request.WhichOneof("target")
    aborted = lifecycle_pb2.ABORT_STATUS_ABORTED
    with st.lock:
        if target is None:
            if not bugs.abort_no_target_ok:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "target: exactly one is required")
            hit = []
        elif target == "all_requests" or (bugs.kv_session_aborts_all and target == "kv_session"):
            hit = [j for j in st.jobs.values()
                   if not bugs.abort_all_running_only or j.request_id in st.running]
        elif target == "kv_session":
            # No request of this engine takes part in a KV handoff.
            context.abort(grpc.StatusCode.NOT_FOUND, f"no KV session {request.kv_session.session_id!r}")
        else:
            rid = request.request_id
            job = st.jobs.get(rid)
            if job is None:
                if rid in st.finished:
                    status = aborted if bugs.abort_finished_aborted else lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED
                    return lifecycle_pb2.AbortResponse(status=status, message="already finished")
                if not bugs.abort_unknown_ok:
                    context.abort(grpc.StatusCode.NOT_FOUND, f"no request {rid!r}")
                return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED)
            hit = [job] if not bugs.abort_skips_queued or rid in st.running else []
    for job in hit:
        job.stop_reason = "abort"
    if bugs.abort_counts_zero and target == "request_id":
        return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED)
    return lifecycle_pb2.AbortResponse(status=aborted, message=f"aborted {len(hit)} request(s)")


# -- load --------------------------------------------------------------------------------------------

def watch_settings(st: State, request) -> load_pb2.WatchLoadSettings:
    t = st.timing

    def clamp(ms: int) -> int:
        return max(t.min_watch_interval_ms, min(t.max_watch_interval_ms, ms))

    bugs = st.bugs
    if bugs.interval_unclamped and request.HasField("interval_ms") and request.interval_ms:
        interval = request.interval_ms
    elif bugs.zero_interval_kept and request.HasField("interval_ms") and not request.interval_ms:
        interval = 0
    else:
        interval = clamp(request.interval_ms) if request.HasField("interval_ms") else t.default_watch_interval_ms
    if request.HasField("heartbeat_ms"):
        beat = clamp(request.heartbeat_ms) if request.heartbeat_ms else 0
    else:
        beat = t.default_heartbeat_ms
    initial = request.initial_snapshot if request.HasField("initial_snapshot") else True
    return load_pb2.WatchLoadSettings(interval_ms=interval, heartbeat_ms=beat, initial_snapshot=initial,
                                      per_rank=request.per_rank and (bugs.settings_per_rank_echoed
                                                                      or t.data_parallel > 1),
                                      instance_id=st.instance_id,
                                      capability_revision=0 if bugs.settings_revision_stale else st.revision)


def watch_load(st: State, request, context):
    bugs = st.bugs
    with st.lock:
        if st.watchers >= st.timing.max_watchers and not bugs.max_watchers_ignored:
            context.abort(grpc.StatusCode.UNAVAILABLE if bugs.watchers_full_unavailable
                          else grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"at most {st.timing.max_watchers} WatchLoad streams")
        st.watchers += 1
    released = threading.Event()
    # Set when the stream ends, its capability revision ends or the engine stops.
    wake_up = threading.Event()
    opened_revision = st.revision
    with st.lock:
        st.watch_wakes.add(wake_up)
    sending = [False]     # for the one_sender bug: this stream is blocked in a send

    def release():
        # On the RPC's end, whether or not this generator is ever resumed to run `finally`.
        if not released.is_set():
            released.set()
            wake_up.set()
            with st.lock:
                st.watchers -= 1
                st.sending -= sending[0]
                st.watch_wakes.discard(wake_up)
            if bugs.watch_cancel_aborts:
                for job in list(st.jobs.values()):
                    job.stop_reason = "abort"

    context.add_callback(release)
    sequence = -1
    stamped = 0

    def message(**kind) -> load_pb2.WatchLoadResponse:
        nonlocal sequence, stamped
        sequence += 1
        stamped += 1
        ts = _nanos()
        if bugs.timestamps_backwards and stamped % 2 == 0:
            ts -= 1_000_000_000
        if kind.get("snapshot") is not None and bugs.snapshot_deltas and stamped > 2:
            kind["snapshot"].load.ClearField("instance_id")
            kind["snapshot"].load.ClearField("timestamp_unix_nanos")
        if bugs.empty_watch_message and sequence == 2:
            kind = {}
        return load_pb2.WatchLoadResponse(sequence=sequence, timestamp_unix_nanos=ts, **kind)

    def send(msg):
        """A message as the generator yields it; with the one_sender bug it first waits while any
        other stream's send is blocked."""
        if not bugs.one_sender:
            return msg
        while st.sending and context.is_active():
            time.sleep(0.005)
        with st.lock:
            st.sending += 1
            sending[0] = True
        return msg

    def sent():
        if sending[0]:
            with st.lock:
                st.sending -= 1
                sending[0] = False

    try:
        settings = watch_settings(st, request)
        opening = [message(settings=settings)]
        if settings.initial_snapshot and not bugs.no_initial_snapshot:
            opening.append(message(snapshot=load_pb2.LoadSnapshot(load=st.load(settings.per_rank))))
            if bugs.snapshot_before_settings:
                opening.reverse()
        for msg in opening:
            yield send(msg)
            sent()
        period = settings.interval_ms / 1000 * (2 if bugs.snapshots_at_double_interval else 1)
        period = period or st.timing.min_watch_interval_ms / 1000
        beat = settings.heartbeat_ms / 1000
        if bugs.heartbeat_off_ignored and not beat:
            beat = st.timing.default_heartbeat_ms / 1000
        next_tick = time.monotonic() + period
        last_message = last_heartbeat = opened = time.monotonic()
        while context.is_active():
            if st.run_state == events_pb2.ENGINE_STATE_STOPPING:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the engine is shutting down")
            if st.revision != opened_revision and not bugs.revision_keeps_watches:
                context.abort(grpc.StatusCode.ABORTED, f"capability revision {opened_revision} ended; "
                                                       f"revision {st.revision} is current")
            now = time.monotonic()
            if bugs.watch_ends_after and now - opened >= bugs.watch_ends_after:
                return
            beat_from = last_heartbeat if bugs.heartbeat_from_last_heartbeat else last_message
            beat_due = beat_from + beat if beat else float("inf")
            wake = min(next_tick, beat_due)
            if wake > now:
                # One wake per message: on a loaded machine every wake-up waits for a core, and
                # each wait would add to the period, as the next tick counts from this one.
                wake_up.wait(wake - now)
                continue
            if now >= next_tick:
                # A send that blocked (a slow reader) skipped ticks: say how many were folded in.
                missed = int((now - next_tick) // period)
                if bugs.coalesced_sequence_skips:
                    sequence += missed
                if bugs.snapshot_backlog:
                    for _ in range(missed):
                        yield send(message(snapshot=load_pb2.LoadSnapshot(load=st.load(settings.per_rank))))
                        sent()
                    missed = 0
                load = st.load(settings.per_rank)
                # The next tick counts from this snapshot's own timestamp, not from when it was
                # due, so consecutive LoadInfo timestamps stay a whole interval apart however
                # long taking the lock took.
                next_tick = time.monotonic() + period
                coalesced = 0 if bugs.coalesced_uncounted else missed + 5 if bugs.coalesced_overcounted else missed
                yield send(message(snapshot=load_pb2.LoadSnapshot(load=load, coalesced=coalesced)))
            else:
                yield send(message(heartbeat=load_pb2.Heartbeat()))
                last_heartbeat = time.monotonic()
            sent()
            last_message = time.monotonic()
    finally:
        release()


# -- upstream's Control ----------------------------------------------------------------------------

def control_health(st: State, request, context) -> lifecycle_pb2.HealthResponse:
    if st.bugs.control_health_unspecified:
        return lifecycle_pb2.HealthResponse()
    state = {events_pb2.ENGINE_STATE_SERVING: lifecycle_pb2.HEALTH_STATE_READY,
             events_pb2.ENGINE_STATE_DRAINING: lifecycle_pb2.HEALTH_STATE_DRAINING}.get(
        st.run_state, lifecycle_pb2.HEALTH_STATE_NOT_READY)
    return lifecycle_pb2.HealthResponse(state=state)


MAX_LORAS = 2


def load_lora(st: State, request, context):
    from openengine.v1 import lora_pb2

    a = request.adapter
    if a.lora_id <= 0 or not a.lora_name or not (os.path.isabs(a.source_path) or st.bugs.lora_relative_path_ok):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      "adapter: a positive lora_id, a lora_name and an absolute source_path are required")
    with st.lock:
        same = st.loras.get(a.lora_name)
        if same is not None and same == a:
            return lora_pb2.LoadLoraResponse(adapter=a, already_loaded=True)
        if same is not None or any(x.lora_id == a.lora_id or x.source_path == a.source_path
                                   for x in st.loras.values()):
            context.abort(grpc.StatusCode.ALREADY_EXISTS, "adapter: its id, name or path is loaded already")
        if len(st.loras) >= MAX_LORAS:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {MAX_LORAS} adapters")
        st.loras[a.lora_name] = lora_pb2.LoraAdapter.FromString(a.SerializeToString())
    return lora_pb2.LoadLoraResponse(adapter=a)


def unload_lora(st: State, request, context):
    from openengine.v1 import lora_pb2

    with st.lock:
        gone = st.loras.pop(request.lora_name, None)
    if gone is None:
        context.abort(grpc.StatusCode.NOT_FOUND, f"lora_name: no adapter {request.lora_name!r}")
    return lora_pb2.UnloadLoraResponse(adapter=gone)


def lora_handlers(st: State, unary, guarded) -> dict:
    from openengine.v1 import lora_pb2

    return {
        "LoadLora": unary(guarded(lambda r, c: load_lora(st, r, c)), lora_pb2.LoadLoraRequest,
                          lora_pb2.LoadLoraResponse),
        "UnloadLora": unary(guarded(lambda r, c: unload_lora(st, r, c)), lora_pb2.UnloadLoraRequest,
                            lora_pb2.UnloadLoraResponse),
        "ListLoras": unary(guarded(lambda r, c: lora_pb2.ListLorasResponse(adapters=list(st.loras.values()))),
                           lora_pb2.ListLorasRequest, lora_pb2.ListLorasResponse),
    }


def control_handlers(st: State, unary, guarded) -> dict:
    handlers = {
        "GetServerInfo": unary(guarded(lambda r, c: server_info(st)), server_pb2.GetServerInfoRequest,
                               server_pb2.ServerInfo),
        "GetModelInfo": unary(guarded(lambda r, c: model_info(st, r, c)), model_pb2.GetModelInfoRequest,
                              model_pb2.ModelInfo),
        "GetLoad": unary(guarded(lambda r, c: st.get_load(r.include_per_rank)), server_pb2.GetLoadRequest,
                         server_pb2.LoadInfo),
        "Health": unary(guarded(lambda r, c: control_health(st, r, c)), lifecycle_pb2.HealthRequest,
                        lifecycle_pb2.HealthResponse),
        "Abort": unary(guarded(lambda r, c: abort(st, r, c)), lifecycle_pb2.AbortRequest,
                       lifecycle_pb2.AbortResponse),
    }
    if st.loras is not None:
        handlers.update(lora_handlers(st, unary, guarded))
    elif st.bugs.lora_served:
        from openengine.v1 import lora_pb2

        handlers["LoadLora"] = unary(lambda r, c: lora_pb2.LoadLoraResponse(), lora_pb2.LoadLoraRequest,
                                     lora_pb2.LoadLoraResponse)
    if st.bugs.abort_unimplemented:
        del handlers["Abort"]
    return handlers


# -- run state and health ----------------------------------------------------------------------------

def health_statuses(st: State, main: bool = True) -> dict[str, int]:
    """What health reports on the main address (or the admin address) in the current run state:
    work services serve only while the engine does, control services throughout, `""` as
    Inference (on the admin address: as Admin)."""
    bugs = st.bugs
    state = st.run_state
    if state == events_pb2.ENGINE_STATE_STOPPING:
        return {}     # enter_graceful_shutdown has set every name NOT_SERVING
    working = state == events_pb2.ENGINE_STATE_SERVING or (
        bugs.pause_health_unchanged and state == events_pb2.ENGINE_STATE_PAUSED)
    if not main:
        return {"": NOT_SERVING if bugs.admin_address_overall_down else SERVING, ADMIN: SERVING}
    names = SERVICES + ((ADMIN,) if st.admin and st.admin_health is None else ()) \
        + ((SESSIONS,) if st.sessions is not None else ()) + ((TASKS,) if st.tasks else ())
    out = {}
    for name in names:
        if bugs.health_service_missing and name == "openengine.v1.Observability":
            continue
        control_down = bugs.pause_stops_control and state == events_pb2.ENGINE_STATE_PAUSED
        up = working if name in WORK_SERVICES else not control_down
        out[name] = SERVING if up else NOT_SERVING
    overall = out["openengine.v1.Inference"]
    out[""] = NOT_SERVING if bugs.health_overall_not_serving else overall
    return out


def publish_health(st: State) -> None:
    for name, status in health_statuses(st).items():
        st.health.set(name, status)
    if st.admin_health is not None:
        for name, status in health_statuses(st, main=False).items():
            st.admin_health.set(name, status)


def set_run_state(st: State, state: int, reason: str) -> None:
    """Health first, then the StateChanged event, so a client reacting to the event sees health
    already in that state."""
    with st.lock:
        previous, st.run_state = st.run_state, state
    if previous == state:
        return
    publish_health(st)
    if st.bugs.resume_not_announced and state == events_pb2.ENGINE_STATE_SERVING:
        return
    emit(st, events_pb2.RuntimeEvent(state_changed=events_pb2.StateChanged(
        previous=previous, state=state, reason=reason)))


# -- runtime events ----------------------------------------------------------------------------------

def emit(st: State, event: events_pb2.RuntimeEvent) -> None:
    with st.lock:
        for q in st.subscribers:
            q.put(event)


def subscribe_events(st: State, request, context):
    bugs = st.bugs
    inbox: queue.Queue = queue.Queue()
    with st.lock:
        if len(st.subscribers) >= MAX_SUBSCRIBERS:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"at most {MAX_SUBSCRIBERS} SubscribeRuntimeEvents streams")
        st.subscribers.append(inbox)
        current = st.run_state
    done = threading.Event()

    def release():
        done.set()
        inbox.put(None)
        with st.lock:
            if inbox in st.subscribers:
                st.subscribers.remove(inbox)

    context.add_callback(release)
    sequence = -1 if bugs.events_from_zero else 0
    try:
        if request.initial_state and not bugs.initial_state_ignored:
            inbox.put(events_pb2.RuntimeEvent(state_changed=events_pb2.StateChanged(
                state=current, reason="the state when the stream opened")))
        while not done.is_set() and context.is_active():
            try:
                event = inbox.get(timeout=0.1)
            except queue.Empty:
                continue
            if event is None:
                return
            sequence += 1
            yield events_pb2.SubscribeRuntimeEventsResponse(sequence=sequence, timestamp=_now(), event=event)
    finally:
        release()


# -- sessions -------------------------------------------------------------------------------------------

def live_sessions(st: State) -> dict:
    """Open sessions whose time to live has not run out (expired ones are dropped here)."""
    if st.sessions is None:
        return {}
    now = time.time()
    with st.lock:
        for sid in [sid for sid, info in st.sessions.items() if info.expires_at.ToSeconds() <= now]:
            del st.sessions[sid]
        return dict(st.sessions)


def open_session(st: State, request, context):
    if request.model not in ("", MODEL):
        context.abort(grpc.StatusCode.NOT_FOUND, f"model: no model {request.model!r}")
    if request.HasField("ttl_ms") and not request.ttl_ms:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ttl_ms: at least 1 when set")
    ttl = request.ttl_ms if request.HasField("ttl_ms") else DEFAULT_SESSION_TTL_MS
    if not st.bugs.session_ttl_unclamped:
        ttl = min(ttl, MAX_SESSION_TTL_MS)
    sid = request.session_id or uuid.uuid4().hex
    live_sessions(st)
    expires = timestamp_pb2.Timestamp()
    expires.FromMilliseconds(int(time.time() * 1000) + ttl)
    info = sessions_pb2.SessionInfo(session_id=sid, model=MODEL, capacity_tokens=request.capacity_tokens,
                                    ttl_ms=ttl, expires_at=expires)
    with st.lock:
        if sid in st.sessions:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"session_id: {sid!r} is open")
        if len(st.sessions) >= MAX_SESSIONS:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {MAX_SESSIONS} open sessions")
        st.sessions[sid] = info
    return sessions_pb2.OpenSessionResponse(session=info)


def close_session(st: State, request, context):
    live_sessions(st)
    with st.lock:
        closed = st.sessions.pop(request.session_id, None) is not None
    return sessions_pb2.CloseSessionResponse(closed=closed)


def list_sessions(st: State, request, context):
    return sessions_pb2.ListSessionsResponse(sessions=[
        info for info in live_sessions(st).values() if request.model in ("", info.model)])


# -- tasks ----------------------------------------------------------------------------------------------

def task_refusal(st: State, request, context, family: str, inputs) -> None:
    """Abort the call unless the engine serves this task now, for this model, with these inputs."""
    if st.run_state != events_pb2.ENGINE_STATE_SERVING:
        context.abort(grpc.StatusCode.UNAVAILABLE, f"the engine is {events_pb2.EngineState.Name(st.run_state)}")
    if request.model not in ("", MODEL):
        context.abort(grpc.StatusCode.NOT_FOUND, f"model: no model {request.model!r}")
    if family != "embed":
        code = grpc.StatusCode.UNIMPLEMENTED if st.bugs.task_family_unimplemented \
            else grpc.StatusCode.INVALID_ARGUMENT
        context.abort(code, f"model: {MODEL!r} does not {family} (its supported_tasks: embed)")
    if not inputs:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "inputs: at least one")
    if len(inputs) > MAX_TASK_INPUTS:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"inputs: at most {MAX_TASK_INPUTS}")


def embed(st: State, request, context):
    task_refusal(st, request, context, "embed", request.inputs)
    if request.HasField("dimensions"):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "dimensions: the model has no matryoshka embeddings")
    out = tasks_pb2.EmbedResponse()
    tokens = 0
    for index, item in enumerate(request.inputs):
        data = item.text.encode() if item.HasField("text") else bytes(t % 256 for t in item.token_ids.ids)
        tokens += len(data)
        # A vector that depends on the input only: the same text always embeds the same.
        rng = random.Random(data)
        out.embeddings.add(index=index, values=[rng.uniform(-1, 1) for _ in range(EMBEDDING_SIZE)])
    out.usage.prompt_tokens = tokens
    return out


# -- admin ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tokens:
    full: str                      # may perform every admin operation
    limited: str | None = None     # valid, but may perform none


def guard(st: State, tokens: Tokens, fn, *, admin: bool = True):
    """An Admin handler behind the bearer-token check. With the guard_on_every_service bug it
    also wraps the other services, refusing a call that carries a wrong token."""
    bugs = st.bugs

    def verdict(context) -> tuple[grpc.StatusCode, str] | None:
        header = dict(context.invocation_metadata()).get("authorization", "")
        scheme, _, token = header.partition(" ")
        scheme_ok = scheme == "Bearer" if bugs.bearer_case_sensitive else scheme.lower() == "bearer"
        if not header and not admin:
            return None
        if not scheme_ok or not token:
            return grpc.StatusCode.UNAUTHENTICATED, "admin: a bearer token is required"
        if hmac.compare_digest(token, tokens.full) or (bugs.any_token_accepted and admin):
            return None
        if tokens.limited and hmac.compare_digest(token, tokens.limited):
            return None if bugs.limited_token_allowed or not admin else (
                grpc.StatusCode.PERMISSION_DENIED, "admin: this token may not change the engine")
        return grpc.StatusCode.UNAUTHENTICATED, "admin: the token is not valid"

    def handle(request, context):
        refused = verdict(context)
        if refused:
            context.abort(*refused)
        return fn(request, context)

    return handle


def pause(st: State, request, context):
    if request.mode not in (caps_pb.PAUSE_MODE_UNSPECIFIED, caps_pb.PAUSE_MODE_ABORT):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "mode: only PAUSE_MODE_ABORT is offered")
    if st.run_state != events_pb2.ENGINE_STATE_SERVING:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      f"the engine is {events_pb2.EngineState.Name(st.run_state)}, not serving")
    set_run_state(st, events_pb2.ENGINE_STATE_PAUSED, "paused by an operator")
    aborted = end_all(st)
    return admin_pb2.PauseGenerationResponse(aborted_requests=aborted)


def resume(st: State, request, context):
    paused = st.run_state == events_pb2.ENGINE_STATE_PAUSED
    if paused:
        set_run_state(st, events_pb2.ENGINE_STATE_SERVING, "resumed by an operator")
    return admin_pb2.ResumeGenerationResponse(resumed=paused)


def sleep(st: State, request, context):
    if request.level > 1:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "level: at most 1 (max_sleep_level)")
    if request.tags:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "tags: this engine has no wake tags")
    if st.run_state != events_pb2.ENGINE_STATE_SERVING:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      f"the engine is {events_pb2.EngineState.Name(st.run_state)}, not serving")
    set_run_state(st, events_pb2.ENGINE_STATE_SLEEPING, "asleep")
    end_all(st)
    return admin_pb2.SleepResponse(released_bytes=0)


def wake_up(st: State, request, context):
    if request.tags:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "tags: this engine has no wake tags")
    if st.run_state == events_pb2.ENGINE_STATE_SLEEPING:
        set_run_state(st, events_pb2.ENGINE_STATE_SERVING, "awake")
    return admin_pb2.WakeUpResponse(awake=st.run_state != events_pb2.ENGINE_STATE_SLEEPING)


def end_all(st: State) -> int:
    """Abort every request held (pausing or sleeping in abort mode): retryable, elsewhere or later."""
    with st.lock:
        jobs = list(st.jobs.values())
    for job in jobs:
        job.retryable = True
        job.stop_reason = "end"
    return len(jobs)


def update_config(st: State, request, context):
    bad = grpc.StatusCode.INVALID_ARGUMENT
    changes = {}
    for k, update in enumerate(request.updates):
        where = f"updates[{k}]"
        if update.limit != UPDATABLE:
            context.abort(bad, f"{where}.limit: {update.limit!r} is not updatable here (only {UPDATABLE})")
        if update.model:
            context.abort(bad, f"{where}.model: {UPDATABLE} is an engine limit, not a model's")
        if update.WhichOneof("value") != "uint_value":
            context.abort(bad, f"{where}: {UPDATABLE} takes a uint_value")
        limit = catalogue().limit(UPDATABLE)
        low, high = limit.minimum or 0, limit.maximum
        if update.uint_value < low or (high is not None and update.uint_value > high):
            context.abort(bad, f"{where}.uint_value: {update.uint_value} is outside {low}..{high}")
        changes[UPDATABLE] = update.uint_value
    previous = st.revision
    changed = [name for name, value in changes.items() if value != st.max_logprobs]
    if request.validate_only or not changed:
        return admin_pb2.UpdateConfigResponse(previous_revision=previous, revision=previous,
                                              changed_limits=changed)
    with st.lock:
        st.max_logprobs = changes[UPDATABLE]
        if not st.bugs.update_keeps_revision:
            st.revision += 1
        running = list(st.jobs.values())
        wakes = list(st.watch_wakes)
    if st.bugs.revision_aborts_unretryable:
        for job in running:
            job.stop_reason = "end"
    # The new revision is current: now end the streams of the old one and tell subscribers.
    if not st.bugs.revision_keeps_watches:
        for w in wakes:
            w.set()
    if st.revision != previous and not st.bugs.revision_event_missing:
        emit(st, events_pb2.RuntimeEvent(capability_revision_changed=events_pb2.CapabilityRevisionChanged(
            previous_revision=previous, revision=st.revision)))
    return admin_pb2.UpdateConfigResponse(previous_revision=previous, revision=st.revision,
                                          changed_limits=changed)


MAX_DRAIN_DEADLINE_MS = 600_000


def drain(st: State, request, context):
    """Stop taking work, report what remains every 50 ms, abort what is left at the deadline."""
    deadline_ms = min(request.deadline_ms, MAX_DRAIN_DEADLINE_MS) if request.HasField("deadline_ms") \
        else MAX_DRAIN_DEADLINE_MS
    set_run_state(st, events_pb2.ENGINE_STATE_DRAINING, "draining")
    until = time.monotonic() + deadline_ms / 1000
    aborted = 0
    while True:
        with st.lock:
            remaining = len(st.jobs)
        if remaining and time.monotonic() >= until and not aborted:
            aborted = end_all(st)
        done = remaining == 0
        yield admin_pb2.DrainResponse(remaining_requests=remaining, aborted_requests=aborted, done=done,
                                      timestamp=_now())
        if done or not context.is_active():
            return
        time.sleep(0.05)


def admin_handlers(st: State, tokens: Tokens, unary, stream) -> dict:
    def guarded(fn):
        return guard(st, tokens, lambda r, c: fn(st, r, c))

    return {
        "Drain": stream(guarded(drain), admin_pb2.DrainRequest, admin_pb2.DrainResponse),
        "PauseGeneration": unary(guarded(pause), admin_pb2.PauseGenerationRequest,
                                 admin_pb2.PauseGenerationResponse),
        "ResumeGeneration": unary(guarded(resume), admin_pb2.ResumeGenerationRequest,
                                  admin_pb2.ResumeGenerationResponse),
        "Sleep": unary(guarded(sleep), admin_pb2.SleepRequest, admin_pb2.SleepResponse),
        "WakeUp": unary(guarded(wake_up), admin_pb2.WakeUpRequest, admin_pb2.WakeUpResponse),
        "ResetPrefixCache": unary(guarded(lambda st, r, c: admin_pb2.ResetPrefixCacheResponse(reset=True)),
                                  admin_pb2.ResetPrefixCacheRequest, admin_pb2.ResetPrefixCacheResponse),
        "UpdateConfig": unary(guarded(update_config), admin_pb2.UpdateConfigRequest,
                              admin_pb2.UpdateConfigResponse),
    }


# -- server ----------------------------------------------------------------------------------------

class _Health(health.HealthServicer):
    """The standard servicer, with List (the one installed leaves it unimplemented)."""

    def List(self, request, context):
        with self._lock:
            statuses = dict(self._server_status)
        return health_pb2.HealthListResponse(statuses={
            name: health_pb2.HealthCheckResponse(status=status) for name, status in statuses.items()})


class _AnyNameHealth(_Health):
    """The buggy variant: every name is SERVING, known or not."""

    def Check(self, request, context):
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def _silent_watch(request, context):
    """The buggy Watch that sends nothing until a status changes (none does)."""
    while context.is_active():
        time.sleep(0.05)
    yield from ()


def _watch_ending_for_unknown(servicer, known):
    """The buggy Watch that answers an unknown name with SERVICE_UNKNOWN and ends the stream."""
    def watch(request, context):
        if request.service not in known:
            yield health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
            return
        yield from servicer.Watch(request, context)
    return watch


_UNPARSED = object()


def _parsed(fn, req_cls, unparsed_unknown: bool):
    """Bytes that do not parse reach the handler as a marker and get INTERNAL with a plain message
    (grpc's own deserializer failure, or a None, would name a Python exception). With
    `unparsed_unknown` (a bug) the handler raises instead, which grpc answers UNKNOWN."""
    def parse(data: bytes):
        try:
            return req_cls.FromString(data)
        except Exception:
            return _UNPARSED

    def handle(request, context):
        if request is _UNPARSED and unparsed_unknown:
            raise ValueError(f"the request does not parse as {req_cls.__name__}")
        if request is _UNPARSED:
            context.abort(grpc.StatusCode.INTERNAL, f"the request does not parse as {req_cls.__name__}")
        return fn(request, context)

    return handle, parse


def _unary(fn, req_cls, resp_cls, unparsed_unknown: bool = False):
    handle, parse = _parsed(fn, req_cls, unparsed_unknown)
    return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=parse,
                                               response_serializer=resp_cls.SerializeToString)


def _stream(fn, req_cls, resp_cls, unparsed_unknown: bool = False):
    handle, parse = _parsed(fn, req_cls, unparsed_unknown)
    return grpc.unary_stream_rpc_method_handler(handle, request_deserializer=parse,
                                                response_serializer=resp_cls.SerializeToString)


class OtherEngine:
    """`with OtherEngine(bugs=Bugs(...)) as engine: engine.address`

    `tls=(key_pem, certificate_pem)` serves over TLS only, as an engine behind TLS does;
    `client_ca` (PEM) then also requires a client certificate it signed.

    Options, each off by default so the plain engine stays small:
    `admin_token` serves `openengine.admin` behind that bearer token (`limited_token`: a valid
    token that may do nothing), on the main address or, with `admin_address`, on one of its own
    (`engine.admin_address`); `runtime_events` serves `openengine.runtime-events`, `sessions`
    `openengine.sessions`, `tasks` `openengine.tasks` (the model embeds); `stoppable` gives
    `engine.shutdown_command`, a shell command that begins a graceful shutdown; `adapters`
    `openengine.adapters` (Control's LoRA RPCs, adapters that change nothing); `upstream_only`
    serves upstream's Inference and Control and nothing else (no Discovery, Observability or
    standard health), as an engine of today's layout does."""

    def __init__(self, *, bugs: Bugs = Bugs(), timing: Timing = Timing(),
                 tls: tuple[bytes, bytes] | None = None, client_ca: bytes | None = None,
                 admin_token: str | None = None, limited_token: str | None = None,
                 admin_address: bool = False, runtime_events: bool = False, sessions: bool = False,
                 tasks: bool = False, stoppable: bool = False, upstream_only: bool = False,
                 adapters: bool = False):
        self.state = State(bugs, timing, admin=admin_token is not None, events=runtime_events,
                           sessions={} if sessions else None, tasks=tasks, upstream_only=upstream_only,
                           loras={} if adapters else None)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=48),
                                  options=[("grpc.so_reuseport", 0)])
        st = self.state
        unary = functools.partial(_unary, unparsed_unknown=bugs.undecodable_unknown)
        stream = functools.partial(_stream, unparsed_unknown=bugs.undecodable_unknown)
        tokens = Tokens(admin_token, limited_token) if admin_token else None

        def open_to_all(fn):
            """A non-Admin handler: unguarded, unless the guard_on_every_service bug wraps it."""
            return guard(st, tokens, fn, admin=False) if tokens and bugs.guard_on_every_service else fn

        handlers = {
            "openengine.v1.Discovery": {
                "GetCapabilities": unary(open_to_all(lambda r, c: capabilities(st)),
                                         discovery_pb2.GetCapabilitiesRequest, caps_pb.Capabilities),
            },
            "openengine.v1.Inference": {
                "Generate": stream(open_to_all(lambda r, c: generate(st, r, c)), gen_pb.GenerateRequest,
                                   gen_pb.GenerateResponse),
            },
            "openengine.v1.Control": control_handlers(st, unary, open_to_all),
            "openengine.v1.Observability": {
                "WatchLoad": stream(open_to_all(lambda r, c: watch_load(st, r, c)), load_pb2.WatchLoadRequest,
                                    load_pb2.WatchLoadResponse),
            },
        }
        if runtime_events:
            handlers["openengine.v1.Observability"]["SubscribeRuntimeEvents"] = stream(
                open_to_all(lambda r, c: subscribe_events(st, r, c)), events_pb2.SubscribeRuntimeEventsRequest,
                events_pb2.SubscribeRuntimeEventsResponse)
        if sessions:
            handlers[SESSIONS] = {
                "OpenSession": unary(open_to_all(lambda r, c: open_session(st, r, c)),
                                     sessions_pb2.OpenSessionRequest, sessions_pb2.OpenSessionResponse),
                "CloseSession": unary(open_to_all(lambda r, c: close_session(st, r, c)),
                                      sessions_pb2.CloseSessionRequest, sessions_pb2.CloseSessionResponse),
                "ListSessions": unary(open_to_all(lambda r, c: list_sessions(st, r, c)),
                                      sessions_pb2.ListSessionsRequest, sessions_pb2.ListSessionsResponse),
            }
        if tasks:
            handlers[TASKS] = {
                "Embed": unary(open_to_all(lambda r, c: embed(st, r, c)), tasks_pb2.EmbedRequest,
                               tasks_pb2.EmbedResponse),
                "Classify": unary(open_to_all(lambda r, c: task_refusal(st, r, c, "classify", r.inputs)),
                                  tasks_pb2.ClassifyRequest, tasks_pb2.ClassifyResponse),
                "Score": unary(open_to_all(lambda r, c: task_refusal(st, r, c, "score", r.documents)),
                               tasks_pb2.ScoreRequest, tasks_pb2.ScoreResponse),
            }
        self.admin_server = None
        if tokens and admin_address:
            # Admin on an address of its own, with its own health (REQ-ADMIN-001); the main
            # address answers Admin with UNIMPLEMENTED.
            self.admin_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                                            options=[("grpc.so_reuseport", 0)])
            st.admin_health = _Health()
            self.admin_server.add_generic_rpc_handlers((
                grpc.method_handlers_generic_handler(ADMIN, admin_handlers(st, tokens, unary, stream)),
                grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
                    "Check": unary(st.admin_health.Check, health_pb2.HealthCheckRequest,
                                   health_pb2.HealthCheckResponse),
                    "Watch": stream(st.admin_health.Watch, health_pb2.HealthCheckRequest,
                                    health_pb2.HealthCheckResponse)})))
            self.admin_port = self.admin_server.add_insecure_port("127.0.0.1:0")
        elif tokens:
            handlers[ADMIN] = admin_handlers(st, tokens, unary, stream)
        if bugs.control_under_short_name:
            handlers["openengine.Control"] = handlers["openengine.v1.Control"]
        if bugs.watch_unimplemented:
            del handlers["openengine.v1.Observability"]["WatchLoad"]
        self.health = st.health = _AnyNameHealth() if bugs.health_says_yes else _Health()
        publish_health(st)
        watch = self.health.Watch
        if bugs.health_watch_waits:
            watch = _silent_watch
        elif bugs.health_watch_unknown_ends:
            watch = _watch_ending_for_unknown(self.health, ("",) + SERVICES)
        handlers["grpc.health.v1.Health"] = {
            "Check": unary(open_to_all(self.health.Check), health_pb2.HealthCheckRequest,
                           health_pb2.HealthCheckResponse),
            "Watch": stream(open_to_all(watch), health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse),
            "List": unary(open_to_all(self.health.List), health_pb2.HealthListRequest,
                          health_pb2.HealthListResponse),
        }
        if bugs.health_list_unimplemented:
            del handlers["grpc.health.v1.Health"]["List"]
        if bugs.health_unimplemented:
            del handlers["grpc.health.v1.Health"]
        if upstream_only:
            handlers = {name: methods for name, methods in handlers.items()
                        if name in ("openengine.v1.Inference", "openengine.v1.Control")}
        self.server.add_generic_rpc_handlers(tuple(
            grpc.method_handlers_generic_handler(name, methods) for name, methods in handlers.items()))
        if tls is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            creds = grpc.ssl_server_credentials([tls], root_certificates=client_ca,
                                                require_client_auth=client_ca is not None)
            self.port = self.server.add_secure_port("127.0.0.1:0", creds)
        self._fifo_dir = tempfile.mkdtemp(prefix="otherengine-") if stoppable else None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def admin_address(self) -> str:
        return f"127.0.0.1:{self.admin_port}"

    @property
    def shutdown_command(self) -> str:
        """Writing to a FIFO the engine reads: the engine then shuts down gracefully."""
        return f"echo stop > {os.path.join(self._fifo_dir, 'stop')}"

    def __enter__(self) -> "OtherEngine":
        self.server.start()
        if self.admin_server is not None:
            self.admin_server.start()
        if self._fifo_dir:
            fifo = os.path.join(self._fifo_dir, "stop")
            os.mkfifo(fifo)
            threading.Thread(target=self._stop_when_told, args=(fifo,), daemon=True).start()
        return self

    def _stop_when_told(self, fifo: str) -> None:
        with open(fifo) as told:
            told.read()
        if self.state.run_state != events_pb2.ENGINE_STATE_STOPPING:
            self.shutdown()

    def shutdown(self) -> None:
        """Health NOT_SERVING everywhere (sent on every Watch), WatchLoad streams ended UNAVAILABLE,
        then the server stops; with the shutdown_abrupt bug it just stops."""
        st = self.state
        if not st.bugs.shutdown_abrupt:
            for servicer in (self.health, st.admin_health):
                if servicer is not None:
                    servicer.enter_graceful_shutdown()
            set_run_state(st, events_pb2.ENGINE_STATE_STOPPING, "shutting down")
            with st.lock:
                wakes = list(st.watch_wakes)
            for w in wakes:
                w.set()
        self.server.stop(grace=0 if st.bugs.shutdown_abrupt else 0.5)
        if self.admin_server is not None:
            self.admin_server.stop(grace=0)

    def __exit__(self, *exc) -> None:
        if self._fifo_dir:
            # Unblocks the reader of a FIFO nobody wrote to.
            with contextlib.suppress(OSError):
                os.close(os.open(os.path.join(self._fifo_dir, "stop"), os.O_WRONLY | os.O_NONBLOCK))
        self.health.enter_graceful_shutdown()
        self.server.stop(grace=0.5).wait(5)
        if self.admin_server is not None:
            self.admin_server.stop(grace=0).wait(5)
        if self._fifo_dir:
            shutil.rmtree(self._fifo_dir, ignore_errors=True)
