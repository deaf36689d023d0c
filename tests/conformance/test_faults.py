"""Every fault of the reference engine is caught by the case meant for it, and only by it (or by
the few cases that cannot help seeing the same broken behaviour)."""

from __future__ import annotations

import contextlib
import fnmatch
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.faults import FAULTS

from openengine.conformance import Options
from openengine.serve import AdminAccess

from tests.conformance.conftest import TOKEN, failed, reference_engine, report_of, run_suite, side_by_side

# The fault matrix: an engine per fault (the fast lane leaves it out).
pytestmark = [pytest.mark.slow, pytest.mark.waits]

CAPS = ["capabilities.*", "core.discovery.*", "core.profiles.*"]

# fault -> what to run, the cases that must fail, and the other cases allowed to fail with it.
# `rule`: the validators' rule id the failing cases report. The WatchLoad stream rules are judged
# by `WatchLoadChecker` alone, so a load case that computed one itself would fail without it.
PLAN: dict[str, dict] = {
    "watch-sequence-not-increasing": dict(run=["load.watch.sequence"], fails={"load.watch.sequence"},
                                          rule="OEV304"),
    "watch-settings-not-first": dict(run=["load.watch.settings-first", "load.watch.initial-snapshot-on"],
                                     fails={"load.watch.settings-first"}, rule="OEV301",
                                     also={"load.watch.initial-snapshot-on"}),
    "watch-timestamp-backwards": dict(run=["load.watch.timestamps"], fails={"load.watch.timestamps"},
                                      rule="OEV307"),
    "watch-no-initial-snapshot": dict(run=["load.watch.initial-snapshot-on"],
                                      fails={"load.watch.initial-snapshot-on"}, rule="OEV317"),
    "watch-missing-heartbeat": dict(run=["load.watch.heartbeat-idle"], fails={"load.watch.heartbeat-idle"},
                                    rule="OEV312"),
    "watch-interval-not-clamped": dict(run=["load.watch.interval-clamped", "load.watch.heartbeat-settings"],
                                       fails={"load.watch.interval-clamped"}, rule="OEV316",
                                       also={"load.watch.heartbeat-settings"}),
    "watch-instance-id-mismatch": dict(run=["load.instance-id", "load.watch.settings-effective"],
                                       fails={"load.instance-id"}, rule="OEV309",
                                       also={"load.watch.settings-effective"}),
    "watch-silent-gap": dict(run=["load.watch.slow-reader"], fails={"load.watch.slow-reader"}),
    "watch-cancel-aborts-requests": dict(run=["load.watch.cancel-only-unsubscribes"],
                                         fails={"load.watch.cancel-only-unsubscribes"}),
    # A stream that ends after its first snapshot starves every case that reads one; the stalled
    # watcher's case is run too, as it once left a task whose failure nobody read.
    "watch-ends-ok": dict(run=["load.watch.stays-open", "load.watch.stalled-isolated"],
                          fails={"load.watch.stays-open"}, also={"load.*"}),
    "watch-max-watchers-ignored": dict(run=["load.watch.max-watchers"], fails={"load.watch.max-watchers"}),
    "watch-heartbeat-not-reset": dict(run=["load.watch.heartbeat-busy"], fails={"load.watch.heartbeat-busy"},
                                      rule="OEV313"),
    "watch-revision-stream-kept": dict(run=["admin.update-config", "load.watch.stays-open"],
                                       fails={"admin.update-config"}),
    "capabilities-unadvertised-submessage": dict(run=CAPS, fails={"capabilities.submessages-advertised"}),
    "capabilities-missing-core": dict(run=CAPS, fails={"core.profiles.core-listed"},
                                      also={"capabilities.submessages-advertised",
                                            "capabilities.combinations"}),
    "capabilities-duplicate-profile": dict(run=CAPS, fails={"capabilities.no-duplicates"}),
    # max_sequences 0 also disagrees with what ModelInfo.generation reports.
    "capabilities-limit-out-of-range": dict(run=CAPS + ["core.generate.*"],
                                            fails={"capabilities.limits-in-range"},
                                            also={"capabilities.upstream-views-agree"}),
    "capabilities-revision-mismatch": dict(run=CAPS, fails={"core.discovery.revision"}),
    "capabilities-role-mismatch": dict(run=CAPS, fails={"capabilities.role-scope"},
                                       engine=dict(profiles=("kv",), role="prefill")),
    "limits-not-enforced": dict(run=["core.generate.*"], fails={"core.generate.limits"},
                                also={"core.generate.not-found", "core.generate.model-limits"}),
    "features-off-accepted": dict(run=["core.generate.*"], fails={"core.generate.limits"},
                                  engine=dict(limits={"core": {
                                      "min_p": False, "prompt_logprobs": False, "output_logprobs": False,
                                      "guided_decoding_modes": ["json_object"]}})),
    "unadvertised-rpc-implemented": dict(run=["*.absent.unimplemented", "*.rpcs.served"],
                                         fails=set(), also={"*.absent.unimplemented"},
                                         engine=dict(profiles=("load",))),
    # Without per-service entries every case that reads a service's status sees the fault.
    "health-not-per-service": dict(run=["health.*"], fails={"health.check.advertised-services"},
                                   also={"health.*"}),
    "health-unknown-not-found": dict(run=["health.*"], fails={"health.check.unknown-not-found"}),
    "health-watch-no-initial": dict(run=["health.*"], fails={"health.watch.first-message"},
                                    also={"health.watch.unknown-service"}),
    "health-pause-not-reflected": dict(run=["health.*"], fails={"health.pause.work-not-serving"},
                                       also={"health.*"}),
    "load-ranks-not-summed": dict(run=["load.ranks.*", "core.getload.*"], fails={"load.ranks.sum"},
                                  engine=dict(profiles=("load",), limits={"load": {"per_rank": True}})),
    "getload-instance-mismatch": dict(run=["load.instance-id", "core.getload.*"],
                                      fails={"load.instance-id", "core.getload.complete"}),
    "events-sequence-from-zero": dict(run=["events.*"], fails={"events.initial-state"}),
    "session-ttl-not-clamped": dict(run=["sessions.*"], fails={"sessions.ttl-clamped"}),
    "admin-no-auth": dict(run=["admin.unauthenticated", "admin.guard-isolated"],
                          fails={"admin.unauthenticated"}),
    "bearer-scheme-case-sensitive": dict(run=["admin.bearer-scheme-case", "admin.unauthenticated"],
                                         fails={"admin.bearer-scheme-case"}),
    "numbers-not-checked": dict(run=["*.numbers.*", "core.generate.*"],
                                fails={"core.numbers.sampling", "core.numbers.penalties"}),
    "wire-policy-off": dict(run=["core.wire.*"], fails={"core.wire.undecodable"}),
    "health-list-unimplemented": dict(run=["health.*"], fails={"health.list"}),
}


# The faults breaking one clause each: each runs only the case(s) citing that clause.
GENERATE = ["core.generate.stream", "core.generate.terminal"]
PLAN.update({
    "abort-unimplemented": dict(run=["core.rpcs.served"], fails={"core.rpcs.served"}),
    "watch-unimplemented": dict(run=["load.rpcs.served"], fails={"load.rpcs.served"}),
    "profiles-shrink-when-busy": dict(run=["core.capabilities.*"],
                                      fails={"core.capabilities.stable", "core.capabilities.saturated"}),
    "role-unspecified": dict(run=["core.server-info.instance-id"], fails={"core.server-info.instance-id"}),
    "vendor-name-not-canonical": dict(run=["capabilities.names-canonical"], fails={"capabilities.names-canonical"}),
    "vendor-major-zero": dict(run=["capabilities.majors-positive"], fails={"capabilities.majors-positive"}),
    "reserved-name-invented": dict(run=["capabilities.reserved-names"], fails={"capabilities.reserved-names"}),
    "model-info-drifts": dict(run=["core.discovery.stable"], fails={"core.discovery.stable"}),
    "services-unversioned-names": dict(run=["core.services.names"], fails={"core.services.names"}),
    "final-without-usage": dict(run=GENERATE, fails={"core.generate.stream", "core.generate.terminal"}),
    "chunk-after-final": dict(run=GENERATE, fails={"core.generate.terminal"}),
    "generate-ends-internal": dict(run=GENERATE, fails={"core.generate.stream"}, also={"core.generate.terminal"}),
    "max-tokens-overrun": dict(run=["core.generate.stream"], fails={"core.generate.stream"}),
    "stop-token-ids-ignored": dict(run=["core.generate.stop-*"], fails={"core.generate.stop-token-ids"}),
    "stop-strings-ignored": dict(run=["core.generate.stop-*"], fails={"core.generate.stop-strings"}),
    "stop-string-kept": dict(run=["core.generate.stop-*"], fails={"core.generate.stop-strings"}),
    "full-not-retryable": dict(run=["core.overload.refused"], fails={"core.overload.refused"},
                               engine=dict(limits={"core": {"max_running_requests": 2, "max_queued_requests": 2}})),
    "paused-failed-precondition": dict(run=["health.pause.work-unavailable"],
                                       fails={"health.pause.work-unavailable"}),
    "abort-by-id-ignored": dict(run=["core.abort.by-id", "core.abort.queued", "core.abort.all"],
                                fails={"core.abort.by-id", "core.abort.queued"}),
    "kv-session-aborts-all": dict(run=["core.abort.targets"], fails={"core.abort.targets"}),
    "abort-finished-aborted": dict(run=["core.abort.targets"], fails={"core.abort.targets"}),
    "abort-unknown-aborted": dict(run=["core.abort.targets", "core.abort.by-id"], fails={"core.abort.targets"}),
    "abort-no-target-accepted": dict(run=["core.abort.targets"], fails={"core.abort.targets"}),
    "abort-queued-when-slot-frees": dict(run=["core.abort.queued", "core.abort.all-queued"],
                                         fails={"core.abort.queued"}),
    "cancel-ignored-while-queued": dict(run=["core.generate.cancel-queued", "core.generate.client-cancel"],
                                        fails={"core.generate.cancel-queued"}),
    "health-unimplemented": dict(run=["health.served"], fails={"health.served"}),
    "health-overall-not-serving": dict(run=["health.check.overall"], fails={"health.check.overall"}),
    # The current case compares two answers' timestamps.
    "getload-no-timestamp": dict(run=["core.getload.*"], fails={"core.getload.complete"},
                                 also={"core.getload.current"}),
    "getload-cached": dict(run=["core.getload.*"], fails={"core.getload.current"}),
    "getload-ranks-unasked": dict(run=["core.getload.*"], fails={"core.getload.complete"}),
    "watch-snapshots-stale": dict(run=["load.watch.snapshots-complete"], fails={"load.watch.snapshots-complete"}),
    "watch-zero-interval-periodic": dict(run=["load.watch.interval-zero"], fails={"load.watch.interval-zero"}),
    "watch-settings-per-rank-echoed": dict(run=["load.watch.per-rank"], fails={"load.watch.per-rank"},
                                           engine=dict(limits={"load": {"per_rank": False}})),
    "watch-snapshots-halved": dict(run=["load.watch.periodic"], fails={"load.watch.periodic"}),
    "watch-empty-message": dict(run=["load.watch.message-kinds"], fails={"load.watch.message-kinds"}),
    "watch-snapshot-backlog": dict(run=["load.watch.slow-reader"], fails={"load.watch.slow-reader"}),
    "watchers-full-unavailable": dict(run=["load.watch.max-watchers"], fails={"load.watch.max-watchers"}),
    "events-initial-state-wrong": dict(run=["events.initial-state"], fails={"events.initial-state"}),
    "config-change-same-revision": dict(run=["admin.update-config"], fails={"admin.update-config"}),
    "pause-changes-revision": dict(run=["core.revision.unchanged-by-state"],
                                   fails={"core.revision.unchanged-by-state"}),
    "revision-event-missing": dict(run=["admin.update-config"], fails={"admin.update-config"}),
    # Tokens slow enough that the case's request is still running when the revision changes.
    "revision-aborts-not-retryable": dict(run=["admin.update-config"], fails={"admin.update-config"},
                                          engine=dict(token_delay_ms=20)),
    "admin-guard-on-inference": dict(run=["admin.guard-isolated"], fails={"admin.guard-isolated"}),
    "model-scoped-profile-unlisted": dict(run=["capabilities.model-scope"], fails={"capabilities.model-scope"}),
    "task-family-unimplemented": dict(run=["tasks.families"], fails={"tasks.families"},
                                      engine=dict(limits={"tasks": {"supported_tasks": ["embed"]}})),
    "watch-one-sender": dict(run=["load.watch.stalled-isolated"], fails={"load.watch.stalled-isolated"}),
    "admin-address-overall-not-serving": dict(run=["admin.own-address-health"], fails={"admin.own-address-health"},
                                            engine=dict(admin=AdminAccess(port=0, token=TOKEN)),
                                            admin_address=True),
    # Only a signal to an engine process shows a graceful shutdown.
    "shutdown-health-serving": dict(run=["core.shutdown.graceful"], fails={"core.shutdown.graceful"},
                                    process=True),
    "limited-token-allowed": dict(run=["admin.permission-denied"], fails={"admin.permission-denied"},
                                  options=dict(admin_limited_token="limited-" + TOKEN)),
    "abort-ignored": dict(run=["core.abort.all", "core.abort.all-queued", "core.abort.by-id"],
                          fails={"core.abort.all", "core.abort.all-queued"}),
    "generate-no-terminal": dict(run=["core.abort.*"],
                                 fails={"core.abort.by-id", "core.abort.all"},
                                 also={"core.abort.queued", "core.abort.all-queued"}),
    "client-cancel-ignored": dict(run=["core.generate.client-cancel", "core.generate.cancel-queued"],
                                  fails={"core.generate.client-cancel"}),
    # The faults of the rebase onto upstream v1's clauses. core.generate.terminal checks the whole
    # stream shape as well, so it sees every broken rule of the shape.
    "generate-event-less-response": dict(run=GENERATE, fails={"core.generate.stream", "core.generate.terminal"}),
    "request-id-first-only": dict(run=GENERATE + ["core.generate.request-id"],
                                  fails={"core.generate.stream", "core.generate.request-id"},
                                  also={"core.generate.terminal"}),
    "output-index-zero-unset": dict(run=GENERATE, fails={"core.generate.stream", "core.generate.terminal"}),
    "token-text-cumulative": dict(run=GENERATE + ["core.generate.delta-text"], fails={"core.generate.delta-text"},
                                  also=set(GENERATE)),
    "prompt-after-token": dict(run=["core.generate.prompt-logprobs"], fails={"core.generate.prompt-logprobs"}),
    "usage-total-prompt-only": dict(run=GENERATE, fails={"core.generate.stream"}, also={"core.generate.terminal"}),
    "usage-completion-one-more": dict(run=GENERATE, fails={"core.generate.stream", "core.generate.terminal"}),
    "usage-cached-above-prompt": dict(run=GENERATE, fails={"core.generate.stream"}, also={"core.generate.terminal"}),
    "stop-match-omitted": dict(run=["core.generate.stop-*"],
                               fails={"core.generate.stop-token-ids", "core.generate.stop-strings"}),
    "min-tokens-ignored": dict(run=["core.generate.min-tokens"], fails={"core.generate.min-tokens"}),
    "ignore-eos-ignored": dict(run=["core.generate.ignore-eos"], fails={"core.generate.ignore-eos"}),
    "seed-ignored": dict(run=["core.generate.seed"], fails={"core.generate.seed"}),
    # A pause in abort mode fails a running request; a signal to an engine process (the only way
    # to shut it down) fails the request it was running.
    "failure-as-status": dict(run=["admin.pause-abort", "core.shutdown.graceful"],
                              fails={"admin.pause-abort", "core.shutdown.graceful"}, process=True),
    "model-info-unknown-answered": dict(run=["core.model-info.answers"], fails={"core.model-info.answers"}),
    "model-info-empty-refused": dict(run=["core.model-info.answers"], fails={"core.model-info.answers"}),
    "capacity-disagrees": dict(run=CAPS, fails={"capabilities.upstream-views-agree"}, rule="OEV138"),
    "schema-release-branch": dict(run=["core.server-info.revisions"], fails={"core.server-info.revisions"}),
    "control-health-not-ready": dict(run=["core.control-health"], fails={"core.control-health"}),
    "unload-unknown-ok": dict(run=["adapters.lifecycle", "adapters.invalid"], fails={"adapters.lifecycle"},
                              engine=dict(profiles=("adapters",))),
    "malformed-priority-ignored": dict(run=["core.generate.metadata"], fails={"core.generate.metadata"}),
    "getload-running-over-capacity": dict(run=["core.load.back-to-idle"], fails={"core.load.back-to-idle"}),
    "getload-phantom-running": dict(run=["core.load.back-to-idle"], fails={"core.load.back-to-idle"}),
})



def test_every_fault_has_a_plan():
    assert sorted(FAULTS) == sorted(PLAN), "add the new fault to PLAN (and a case that catches it)"


@contextlib.contextmanager
def engine_process(fault: str):
    """`python -m tests.faults --serve FAULT` on a free port: (its address, its process id)."""
    root = Path(__file__).resolve().parents[2]
    engine = subprocess.Popen([sys.executable, "-m", "tests.faults", "--serve", fault, "--port", "0",
                               "--admin-token", TOKEN], cwd=root, stderr=subprocess.STDOUT,
                              stdout=subprocess.PIPE, text=True)
    try:
        address = None
        for line in engine.stdout:
            found = re.search(r"serving on (\S+)", line)
            if found:
                address = found.group(1)
                break
        assert address, "the engine did not log its address"
        # Its log is read on, so the engine never blocks on a full pipe.
        threading.Thread(target=engine.stdout.read, daemon=True).start()
        yield address, engine.pid
    finally:
        if engine.poll() is None:
            engine.kill()
        engine.wait(10)


def _allowed(case_id: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(case_id, p) for p in patterns)


def _start(fault: str):
    """How to start the engine committing `fault`, and the runner's options that reach it."""
    plan = PLAN[fault]
    options = dict(plan.get("options", {}), admin_token=TOKEN)

    def start(stack: contextlib.ExitStack) -> Options:
        if plan.get("process"):
            address, pid = stack.enter_context(engine_process(fault))
            return Options(target=address, shutdown_command=f"kill -TERM {pid}", **options)
        engine = stack.enter_context(reference_engine(faults=(fault,), **plan.get("engine", {})))
        admin = {"admin_target": engine.server.admin_address} if plan.get("admin_address") else {}
        return Options(target=engine.address, **options, **admin)
    return start


def check_caught(fault: str, report) -> None:
    plan = PLAN[fault]
    bad = failed(report)
    assert report.results
    missing = plan["fails"] - set(bad)
    assert not missing, f"{fault}: {sorted(missing)} did not fail; failures: {bad}"
    if "rule" in plan:
        unnamed = {c: bad[c] for c in plan["fails"] if plan["rule"] not in bad[c]}
        assert not unnamed, f"{fault}: not reported as the checker's {plan['rule']}: {unnamed}"
    if not plan["fails"]:
        assert bad, f"{fault}: no case failed"
    unexpected = {c: r for c, r in bad.items()
                  if c not in plan["fails"] and not _allowed(c, plan.get("also", ()))}
    assert not unexpected, f"{fault}: other cases failed too: {unexpected}"


@pytest.mark.timeout(300)
def test_each_fault_is_caught_by_its_case(subtests):
    """The faults run side by side, each on an engine of its own; each is a subtest."""
    outcomes = side_by_side({fault: (_start(fault), PLAN[fault]["run"]) for fault in sorted(FAULTS)})
    for fault in sorted(FAULTS):
        with subtests.test(fault):
            check_caught(fault, report_of(outcomes[fault]))


def test_without_faults_the_same_selections_pass():
    with reference_engine() as engine:
        report = run_suite(engine.address, patterns=sorted({p for plan in PLAN.values()
                                                            for p in plan["run"]}))
    assert failed(report) == {}
