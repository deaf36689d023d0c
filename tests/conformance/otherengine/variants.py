"""The test engine's bug variants as data: for each, the wrong behaviour (`Bugs`, and `Timing`
or `Serves` where the behaviour needs a feature the default engine lacks), the clauses of the
spec it breaks (assertion ids, or a requirement's id when it is stated as one), the cases meant
to catch it, and words of the reason a catching case gives.

`tests/conformance/test_otherengine.py` runs each one and requires its cases to fail with those
words; `tests/conformance/test_matrix.py` reads `breaks` to say which variant breaks each clause,
and requires one for every clause of the areas it names complete.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.conformance.otherengine.engine import Bugs, Timing


@dataclass(frozen=True)
class Serves:
    """The optional parts of the engine a variant needs (OtherEngine's options)."""

    admin: bool = False            # openengine.admin behind a token, and a limited token
    admin_address: bool = False    # Admin on an address of its own
    runtime_events: bool = False
    sessions: bool = False
    tasks: bool = False
    stoppable: bool = False        # the runner gets a shutdown command
    adapters: bool = False         # openengine.adapters on Control
    upstream_only: bool = False    # upstream's Inference and Control alone


ADMIN = Serves(admin=True)
EVENTS = Serves(admin=True, runtime_events=True)
UPSTREAM = Serves(upstream_only=True)


@dataclass(frozen=True)
class Variant:
    bugs: Bugs
    breaks: tuple[str, ...]          # assertion ids (or whole requirement ids) it breaks
    patterns: tuple[str, ...]        # the cases to run against it
    cases: frozenset[str]            # the cases meant to catch it: each must fail
    says: str                        # words of the reason one of them gives
    timing: Timing = Timing()
    serves: Serves = Serves()


def variant(breaks: str | tuple[str, ...], patterns: str | tuple[str, ...], says: str,
       cases: str | tuple[str, ...] | None = None, timing: Timing = Timing(), serves: Serves = Serves(),
       **bugs) -> Variant:
    breaks = (breaks,) if isinstance(breaks, str) else breaks
    patterns = (patterns,) if isinstance(patterns, str) else patterns
    caught = (cases,) if isinstance(cases, str) else cases if cases else patterns
    return Variant(Bugs(**bugs), breaks, patterns, frozenset(caught), says, timing, serves)


VARIANTS: dict[str, Variant] = {
    # -- openengine.core: serving, generation, stop conditions -----------------------------------
    "abort-unimplemented": variant("REQ-CORE-001.1", "core.rpcs.served",
                              "Control/Abort answered UNIMPLEMENTED", abort_unimplemented=True),
    "core-unlisted": variant("REQ-CORE-001.2", "core.profiles.*", "openengine.core is not advertised",
                        cases="core.profiles.core-listed", core_unlisted=True),
    "watch-unimplemented": variant("REQ-CORE-002", "load.rpcs.served", "WatchLoad answered UNIMPLEMENTED",
                              watch_unimplemented=True),
    "load-unadvertised-served": variant("REQ-CORE-003", "load.absent.*", "WatchLoad kept the stream open",
                                   cases="load.absent.unimplemented", load_unadvertised_served=True),
    "lora-served": variant("REQ-CORE-003", "adapters.absent.*", "LoadLora answered OK",
                           cases="adapters.absent.unimplemented", lora_served=True),
    "load-dropped-when-saturated": variant("REQ-CORE-005", "core.capabilities.*",
                                      "with every slot busy and a request queued GetCapabilities lists",
                                      cases="core.capabilities.saturated", load_dropped_when_saturated=True),
    "max-tokens-overrun": variant(("REQ-CORE-019.1", "REQ-CORE-006"), "core.generate.stream",
                                  "max_tokens 6 but 7 tokens", max_tokens_overrun=True),
    "max-tokens-ignored": variant("REQ-CORE-019.1", "core.generate.stream", "asked max_tokens 6;",
                                  timing=Timing(token_seconds=(0.005, 0.005)), max_tokens_ignored=True),
    "final-without-usage": variant("REQ-CORE-017.1", "core.generate.stream", "carries no usage",
                              final_without_usage=True),
    "usage-on-every-message": variant("REQ-CORE-017.1", "core.generate.stream",
                                      "only the final response carries it", usage_on_every_message=True),
    "usage-total-wrong": variant("REQ-CORE-017.2", "core.generate.stream", "usage.total_tokens",
                                 usage_total_wrong=True),
    "chunk-after-final": variant("REQ-CORE-009.2", "core.generate.terminal", "followed its finished event",
                            chunk_after_final=True),
    "ends-internal": variant("REQ-CORE-009.3", "core.generate.stream", "failed with INTERNAL",
                        ends_internal=True),
    "error-mid-stream": variant("REQ-CORE-009.1", ("core.generate.stream", "core.generate.client-cancel"),
                                "the request ended with an EngineError (code ERROR_CODE_INTERNAL",
                                cases="core.generate.stream", error_mid_stream=True),
    "no-request-id-echo": variant("REQ-CORE-015", "core.generate.stream", "not the request's",
                                  no_request_id_echo=True),
    "output-index-unset": variant("REQ-CORE-016.1", "core.generate.stream", "left output_index unset",
                                  output_index_unset=True),
    "no-stop-match": variant("REQ-CORE-018", "core.generate.stop-*", "but stop_match is unset",
                             cases="core.generate.stop-token-ids", no_stop_match=True),
    "logprobs-not-returned": variant("REQ-CORE-006", "core.generate.output-logprobs",
                                     "advertised output logprobs (max_logprobs 5) were not delivered",
                                     logprobs_not_returned=True),
    "prompt-logprobs-missing": variant("REQ-CORE-006", "core.generate.prompt-logprobs",
                                       "no prompt event came", prompt_logprobs_missing=True),
    "abort-skips-queued": variant("REQ-CORE-010.1", "core.abort.*",
                             "not with a FINISH_REASON_CANCELLED finished event",
                             cases="core.abort.queued", abort_skips_queued=True),
    "kv-session-aborts-all": variant("REQ-CORE-010.2", "core.abort.targets",
                                "a KV session no request belongs to answered ABORT_STATUS_ABORTED",
                                kv_session_aborts_all=True),
    # Ended after the running requests, or still open when the client stopped reading: never aborted.
    "abort-all-running-only": variant("REQ-CORE-010.3", "core.abort.*", "the queued request ",
                                 cases="core.abort.all-queued", abort_all_running_only=True),
    "abort-code-internal": variant("REQ-CORE-010.4", "core.abort.by-id", "an EngineError of code ERROR_CODE_INTERNAL",
                              abort_code_internal=True),
    "abort-counts-zero": variant("REQ-CORE-010.1", "core.abort.by-id", "answered ABORT_STATUS_ALREADY_FINISHED",
                            abort_counts_zero=True),
    "abort-finished-aborted": variant("REQ-CORE-010.5", "core.abort.targets",
                                      "had just finished answered ABORT_STATUS_ABORTED",
                                      abort_finished_aborted=True),
    "abort-unknown-ok": variant("REQ-CORE-010.6", "core.abort.targets",
                                "an unknown request id answered ABORT_STATUS_ALREADY_FINISHED",
                                abort_unknown_ok=True),
    "abort-queued-when-slot-frees": variant("REQ-CORE-010.7", "core.abort.queued",
                                       "Abort waited for a free slot", abort_queued_when_slot_frees=True),
    "abort-no-target-ok": variant("REQ-CORE-010.8", "core.abort.targets", "naming no target answered",
                                  abort_no_target_ok=True),
    "accepts-beyond-the-queue": variant("REQ-CORE-014", "core.overload.*", "one more request was accepted",
                                   cases="core.overload.refused", overfill=True),
    "ignore-cancel": variant("REQ-CORE-011.1", "core.generate.*", "not stopped",
                        cases="core.generate.client-cancel", ignore_cancel=True),
    "cancel-ignored-while-queued": variant("REQ-CORE-011.2", "core.generate.*", "was not freed from the queue",
                                      cases="core.generate.cancel-queued", cancel_ignored_while_queued=True),
    "role-unspecified": variant("REQ-CORE-012", "core.server-info.instance-id", "ENGINE_ROLE_UNSPECIFIED",
                           role_unspecified=True),
    "model-info-unknown-ok": variant("REQ-CORE-020.1", "core.model-info.answers",
                                     "GetModelInfo for an unknown model was accepted", model_info_unknown_ok=True),
    "ignore-stop-token-ids": variant("REQ-CORE-013.1", "core.generate.stop-*", "more tokens followed",
                                cases="core.generate.stop-token-ids", ignore_stop_token_ids=True),
    "ignore-stop-strings": variant("REQ-CORE-013.2", "core.generate.stop-*", "characters follow it",
                              cases="core.generate.stop-strings", ignore_stop_strings=True),
    "stop-string-kept": variant("REQ-CORE-013.3", "core.generate.stop-strings", "and 0 characters follow it",
                           stop_string_kept=True),
    "cumulative-text": variant("REQ-CORE-016.2", "core.generate.delta-text", "text is cumulative",
                               cumulative_text=True),
    "prompt-event-late": variant("REQ-CORE-016.3", "core.generate.prompt-logprobs",
                                 "at most once, first", prompt_event_late=True),
    "usage-counts-one-more": variant("REQ-CORE-017.3", "core.generate.stream",
                                     "usage.completion_tokens 7 != 6 tokens", usage_counts_one_more=True),
    "cached-above-prompt": variant("REQ-CORE-017.4", "core.generate.stream", "usage.cached_prompt_tokens",
                                   cached_above_prompt=True),
    "ignore-eos-ignored": variant("REQ-CORE-019.3", "core.generate.stream", "with ignore_eos, but the output ended",
                                  ignore_eos_ignored=True),
    "empty-model-not-found": variant("REQ-CORE-020.2", "core.model-info.answers",
                                     "GetModelInfo with an empty model failed with NOT_FOUND",
                                     empty_model_not_found=True),
    "running-inflated": variant("REQ-LOAD-024.1", "core.load.back-to-idle", "above max_running_requests",
                                running_inflated=True),
    "lora-relative-path-ok": variant("REQ-ADAPT-001", "adapters.invalid", "LoadLora with a relative path was accepted",
                                     serves=Serves(adapters=True), lora_relative_path_ok=True),
    "min-tokens-ignored": variant("REQ-CORE-019.2", "core.generate.min-tokens",
                                  "nothing ends an output before min_tokens", min_tokens_ignored=True),
    "seed-ignored": variant("REQ-CORE-006", "core.generate.seed", "sampling.seed is not honoured",
                            seed_ignored=True),
    "phantom-running": variant("REQ-LOAD-024.2", "core.load.back-to-idle", "still counted 1 running",
                               phantom_running=True),
    "load-always-zero": variant("REQ-LOAD-001.2", ("core.load.back-to-idle", "core.getload.current"),
                                "counted no running or queued request", cases="core.load.back-to-idle",
                                load_always_zero=True),
    "schema-revision-wrong": variant("REQ-REV-009", "core.server-info.revisions", "schema_revision is 1",
                                     schema_revision_wrong=True),
    "control-health-unspecified": variant("REQ-HEALTH-014", "core.control-health",
                                          "answered HEALTH_STATE_UNSPECIFIED", control_health_unspecified=True),
    # -- openengine.core: capabilities, revisions and health (areas CAP, REV and HEALTH) --------
    "min-p-when-off": variant("REQ-CAP-009", "core.generate.limits", "sampling.min_p set was accepted",
                         accept_off=frozenset({"min_p"})),
    "prompt-logprobs-when-off": variant("REQ-CAP-009", "core.generate.limits",
                                   "response.return_prompt_logprobs set was accepted",
                                   timing=Timing(logprobs=False), accept_off=frozenset({"prompt_logprobs"})),
    "guided-when-off": variant("REQ-CAP-009", "core.generate.limits", "guided json_schema was accepted",
                          accept_off=frozenset({"guided"})),
    "max-output-unchecked": variant("REQ-CAP-009", "core.generate.*", "its max_output_tokens is 2048",
                               cases="core.generate.model-limits", max_output_unchecked=True),
    "load-at-major-0": variant(("REQ-CAP-002", "REQ-CAP-004"), ("load.rpcs.served", "capabilities.*"),
                          "registry defines only major 1",
                          cases=("load.rpcs.served", "capabilities.reserved-names",
                                 "capabilities.majors-positive"), load_major=0),
    "vendor-name-not-canonical": variant("REQ-CAP-001", "capabilities.names-canonical", "not canonical",
                                    vendor_name_not_canonical=True),
    "core-listed-twice": variant("REQ-CAP-003", "capabilities.no-duplicates", "advertised more than once",
                            core_listed_twice=True),
    "kv-limits-unadvertised": variant("REQ-CAP-006", "capabilities.submessages-advertised",
                                 "kv is set but openengine.kv is not advertised", kv_limits_unadvertised=True),
    "limit-out-of-range": variant("REQ-CAP-008", "capabilities.limits-in-range", "must be within 1..65536",
                             limit_out_of_range=True),
    "incompatible-limits": variant("REQ-CAP-010", "capabilities.combinations", "cannot be served while",
                              incompatible_limits=True),
    "kv-on-aggregated": variant("REQ-CAP-011", "capabilities.role-scope", "whose role is ENGINE_ROLE_AGGREGATED",
                           kv_on_aggregated=True),
    "tasks-on-no-model": variant("REQ-CAP-012", "capabilities.model-scope", "but no served model lists it",
                            tasks_on_no_model=True),
    "revision-differs": variant("REQ-REV-001", "core.discovery.revision",
                           "Capabilities.revision 2 differs from ServerInfo", revision_differs=True),
    "health-unimplemented": variant("REQ-HEALTH-001", "health.served", "failed with UNIMPLEMENTED",
                               health_unimplemented=True),
    "health-service-missing": variant("REQ-HEALTH-002", "health.check.advertised-services",
                                 "openengine.v1.Observability: NOT_FOUND", health_service_missing=True),
    "health-serving-for-any-name": variant("REQ-HEALTH-003", "health.*", "'conformance.no.such.Service' answered SERVING",
                                      cases="health.check.unknown-not-found", health_says_yes=True),
    "health-overall-not-serving": variant("REQ-HEALTH-004", "health.check.overall",
                                     "Check(\"\") is NOT_SERVING while openengine.v1.Inference is SERVING",
                                     health_overall_not_serving=True),
    "health-watch-waits": variant("REQ-HEALTH-005", "health.watch.first-message", "the current status is due at once",
                             health_watch_waits=True),
    "health-watch-unknown-ends": variant("REQ-HEALTH-006", "health.watch.unknown-service",
                                    "ended with OK after SERVICE_UNKNOWN", health_watch_unknown_ends=True),
    "health-list-unimplemented": variant("REQ-HEALTH-013", "health.list", "List failed with UNIMPLEMENTED",
                                    health_list_unimplemented=True),
    "capabilities-vary": variant("REQ-REV-002", "core.discovery.stable",
                            "GetCapabilities answered differently within one revision", capabilities_vary=True),
    "revision-bumps-on-request": variant("REQ-REV-004", "core.revision.unchanged-by-state",
                                    "the revision changed 1 -> 2 after a request", revision_bumps_on_request=True),
    # -- services, names and statuses (area SVC) ---------------------------------------------------
    "discovery-under-short-name": variant("REQ-SVC-001", "core.services.names",
                                     "served under a wrong name: /openengine.Control/GetServerInfo",
                                     control_under_short_name=True),
    "error-twice": variant("REQ-SVC-002", "core.generate.stream",
                           "response(s) followed the terminal error event",
                           error_mid_stream=True, abort_error_twice=True),
    "unknown-model-invalid": variant("REQ-SVC-003", "core.generate.not-found",
                                "an unknown model failed with INVALID_ARGUMENT", unknown_model_invalid=True),
    "watchers-full-unavailable": variant("REQ-SVC-004", "load.watch.max-watchers",
                                    "failed with UNAVAILABLE, not RESOURCE_EXHAUSTED", watchers_full_unavailable=True),
    "nan-temperature-accepted": variant("REQ-SVC-005", "core.numbers.sampling", "sampling.temperature = nan was accepted",
                                   nan_temperature_accepted=True),
    "metadata-unchecked": variant("REQ-SVC-007", "core.generate.metadata",
                                  "openengine-priority sent twice was accepted", metadata_unchecked=True),
    "upstream-views-differ": variant("REQ-CAP-014", "capabilities.upstream-views-agree", "OEV138",
                                     upstream_views_differ=True),
    "undecodable-unknown": variant("REQ-SVC-006", "core.wire.undecodable", "UNKNOWN, not INTERNAL",
                              undecodable_unknown=True),
    # -- with Admin, runtime events, an admin address, a shutdown command ------------------------
    "admin-address-overall-down": variant("REQ-ADMIN-001", "admin.own-address-health",
                                     "Check(\"\") is NOT_SERVING, Admin is SERVING",
                                     serves=Serves(admin=True, admin_address=True), admin_address_overall_down=True),
    "any-token-accepted": variant("REQ-ADMIN-002", "admin.unauthenticated", "with a wrong token was accepted",
                             serves=ADMIN, any_token_accepted=True),
    "limited-token-allowed": variant("REQ-ADMIN-003", "admin.permission-denied", "lacking the permission was accepted",
                                serves=ADMIN, limited_token_allowed=True),
    "guard-on-every-service": variant("REQ-ADMIN-004", "admin.guard-isolated", "with a wrong admin token",
                                 serves=ADMIN, guard_on_every_service=True),
    "bearer-case-sensitive": variant("REQ-ADMIN-006", "admin.bearer-scheme-case", "bearer",
                                serves=ADMIN, bearer_case_sensitive=True),
    "pause-health-unchanged": variant("REQ-HEALTH-007", "health.pause.work-not-serving",
                                 "openengine.v1.Inference is SERVING while paused",
                                 serves=ADMIN, pause_health_unchanged=True),
    "paused-refuses-exhausted": variant("REQ-HEALTH-008", "health.pause.work-unavailable",
                                   "failed with RESOURCE_EXHAUSTED, not UNAVAILABLE",
                                   serves=ADMIN, paused_refuses_exhausted=True),
    "pause-stops-control": variant("REQ-HEALTH-009", "health.pause.control-serving", "is NOT_SERVING",
                              serves=ADMIN, pause_stops_control=True),
    "shutdown-abrupt": variant("REQ-HEALTH-010", "core.shutdown.graceful", "ended without NOT_SERVING",
                          serves=Serves(stoppable=True), shutdown_abrupt=True),
    "resume-not-announced": variant("REQ-HEALTH-011", "events.state-follows-health",
                               "no StateChanged SERVING after resume event", serves=EVENTS,
                               resume_not_announced=True),
    "events-from-zero": variant("REQ-EVENTS-001", "events.initial-state", "sequences start at 1", serves=EVENTS,
                           events_from_zero=True),
    "initial-state-ignored": variant("REQ-EVENTS-002", "events.initial-state", "no event within", serves=EVENTS,
                                initial_state_ignored=True),
    "update-keeps-revision": variant("REQ-REV-003", "admin.update-config", "revision 1 after changing",
                                serves=EVENTS, update_keeps_revision=True),
    "revision-event-missing": variant("REQ-REV-005", "admin.update-config", "no CapabilityRevisionChanged event",
                                 serves=EVENTS, revision_event_missing=True),
    "revision-keeps-watches": variant("REQ-REV-006", "admin.update-config", "stayed open after the revision changed",
                                 serves=EVENTS, revision_keeps_watches=True),
    # Tokens slow enough that the request is still running when the revision changes.
    "revision-aborts-unretryable": variant("REQ-REV-007", "admin.update-config",
                                      "neither completed nor ended with a retryable ERROR_CODE_CANCELLED",
                                      serves=EVENTS, timing=Timing(token_seconds=(0.02, 0.03)),
                                      revision_aborts_unretryable=True),
    "session-ttl-unclamped": variant("REQ-SESS-001", "sessions.ttl-clamped", "expected 120000 ms",
                                serves=Serves(sessions=True), session_ttl_unclamped=True),
    "task-family-unimplemented": variant("REQ-TASKS-001", "tasks.families", "UNIMPLEMENTED",
                                    serves=Serves(tasks=True), task_family_unimplemented=True),
    # -- openengine.load ---------------------------------------------------------------------------
    "getload-no-timestamp": variant("REQ-LOAD-001.1", "core.getload.complete",
                                    "LoadInfo.timestamp_unix_nanos is not set", getload_no_timestamp=True),
    "getload-cached": variant("REQ-LOAD-001.2", "core.getload.*", "describes an earlier moment",
                         cases="core.getload.current", load_cached_seconds=1.0),
    "getload-ranks-unasked": variant("REQ-LOAD-001.3", "core.getload.complete", "without include_per_rank answered 1 ranks",
                                getload_ranks_unasked=True),
    "load-instance-id-differs": variant("REQ-LOAD-002", "load.instance-id", "GetLoad instance_id 'another-",
                                   load_instance_id_differs=True),
    "snapshot-deltas": variant("REQ-LOAD-003", "load.watch.snapshots-complete", "the snapshot's load has no",
                          snapshot_deltas=True),
    "snapshot-before-settings": variant("REQ-LOAD-004", "load.watch.settings-first",
                                   "the first message is snapshot, not settings", snapshot_before_settings=True),
    "settings-revision-stale": variant("REQ-LOAD-005", "load.watch.settings-effective",
                                  "opened under capability revision 0", settings_revision_stale=True),
    "interval-unclamped": variant("REQ-LOAD-006", "load.watch.interval-clamped",
                             "effective interval_ms should be 250, the settings say 1", interval_unclamped=True),
    "zero-interval-kept": variant("REQ-LOAD-007", "load.watch.interval-zero",
                             "effective interval_ms should be 250, the settings say 0", zero_interval_kept=True),
    "heartbeat-off-ignored": variant("REQ-LOAD-008", "load.watch.heartbeat-off", "heartbeats were asked off",
                                heartbeat_off_ignored=True),
    "no-initial-snapshot": variant("REQ-LOAD-009", "load.watch.initial-snapshot-on",
                              "promised an initial snapshot", no_initial_snapshot=True),
    "settings-per-rank-echoed": variant("REQ-LOAD-010", "load.watch.per-rank",
                                   "effective per_rank should be False, the settings say True",
                                   settings_per_rank_echoed=True),
    "max-watchers-ignored": variant("REQ-LOAD-011", "load.watch.max-watchers", "stream 9 was accepted",
                               max_watchers_ignored=True),
    "snapshots-at-double-interval": variant("REQ-LOAD-012", "load.watch.periodic", "one was due every 250 ms",
                                       snapshots_at_double_interval=True),
    "heartbeat-not-reset": variant("REQ-LOAD-013", "load.watch.heartbeat-*", "not restarted by snapshots",
                              cases="load.watch.heartbeat-busy", heartbeat_from_last_heartbeat=True),
    "coalesced-sequence-skips": variant("REQ-LOAD-014.1", "load.watch.slow-reader", "sequence jumps",
                                   coalesced_sequence_skips=True),
    "timestamps-backwards": variant("REQ-LOAD-014.2", "load.watch.timestamps", "timestamp goes backwards",
                               timestamps_backwards=True),
    "snapshot-backlog": variant("REQ-LOAD-015", "load.watch.slow-reader", "the server queued a backlog",
                           snapshot_backlog=True),
    "coalesced-uncounted": variant("REQ-LOAD-016", "load.watch.slow-reader", "only 0 counted as coalesced",
                              coalesced_uncounted=True),
    "coalesced-overcounted": variant("REQ-LOAD-016", "load.watch.slow-reader", "more than the",
                                     coalesced_overcounted=True),
    "one-sender": variant("REQ-LOAD-017", "load.watch.stalled-isolated", "snapshots of a healthy watcher arrived in",
                     one_sender=True),
    # Tokens slow enough that the ones the case reads after cancelling are made after the abort,
    # not already queued before it.
    "watch-cancel-aborts": variant("REQ-LOAD-018", "load.watch.cancel-only-unsubscribes",
                              "with a finished event, reason FINISH_REASON_CANCELLED",
                              timing=Timing(token_seconds=(0.02, 0.03)), watch_cancel_aborts=True),
    "watch-ends-after-2s": variant("REQ-LOAD-019", "load.watch.stays-open", "ended the WatchLoad stream with OK",
                              watch_ends_after=2.0),
    "empty-watch-message": variant("REQ-LOAD-022", "load.watch.message-kinds",
                              "carries neither settings, snapshot nor heartbeat", empty_watch_message=True),
    "ranks-not-summed": variant("REQ-LOAD-023", "load.ranks.sum", "but its 2 ranks add up to 1",
                           timing=Timing(data_parallel=2), ranks_not_summed=True),
}


def breaks_by_variant() -> dict[str, tuple[str, ...]]:
    """Variant name -> the clauses it breaks: what `oespec conformance --matrix` reads."""
    return {name: v.breaks for name, v in VARIANTS.items()}
