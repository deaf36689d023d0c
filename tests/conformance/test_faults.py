"""Every fault of the reference engine is caught by the case meant for it, and only by it (or by
the few cases that cannot help seeing the same broken behaviour)."""

from __future__ import annotations

import fnmatch

import pytest

from openengine.engine.faults import FAULTS

from tests.conformance.conftest import failed, reference_engine, run_suite

# The fault matrix: an engine per fault (the fast lane leaves it out).
pytestmark = [pytest.mark.slow, pytest.mark.waits]

LOAD_ALL = ["load.*"]
CAPS = ["capabilities.*", "core.discovery.*", "core.profiles.*"]

# fault -> what to run, the cases that must fail, and the other cases allowed to fail with it.
# `rule`: the validators' rule id the failing cases report. The WatchLoad stream rules are judged
# by `WatchLoadChecker` alone, so a load case that computed one itself would fail without it.
PLAN: dict[str, dict] = {
    "watch-sequence-not-increasing": dict(run=LOAD_ALL, fails={"load.watch.sequence"}, rule="OEV304"),
    "watch-settings-not-first": dict(run=LOAD_ALL, fails={"load.watch.settings-first"}, rule="OEV301",
                                     also={"load.watch.initial-snapshot-on"}),
    "watch-timestamp-backwards": dict(run=LOAD_ALL, fails={"load.watch.timestamps"}, rule="OEV307",
                                      also={"load.watch.initial-snapshot-off", "load.watch.heartbeat-idle",
                                            "load.watch.periodic"}),
    "watch-no-initial-snapshot": dict(run=LOAD_ALL, fails={"load.watch.initial-snapshot-on"}, rule="OEV317"),
    "watch-missing-heartbeat": dict(run=LOAD_ALL, fails={"load.watch.heartbeat-idle"}, rule="OEV312"),
    "watch-interval-not-clamped": dict(run=LOAD_ALL, fails={"load.watch.interval-clamped"}, rule="OEV316",
                                       also={"load.watch.heartbeat-settings"}),
    "watch-instance-id-mismatch": dict(run=LOAD_ALL, fails={"load.instance-id"}, rule="OEV309",
                                       also={"load.watch.settings-effective"}),
    "watch-silent-gap": dict(run=LOAD_ALL, fails={"load.watch.slow-reader"}),
    "watch-cancel-aborts-requests": dict(run=LOAD_ALL, fails={"load.watch.cancel-only-unsubscribes"}),
    # A stream that ends after its first snapshot starves every case that reads one.
    "watch-ends-ok": dict(run=LOAD_ALL, fails={"load.watch.stays-open"}, also={"load.*"}),
    "watch-max-watchers-ignored": dict(run=LOAD_ALL, fails={"load.watch.max-watchers"}),
    "watch-heartbeat-not-reset": dict(run=LOAD_ALL, fails={"load.watch.heartbeat-busy"}, rule="OEV313"),
    "watch-revision-stream-kept": dict(run=["admin.update-config", "load.watch.stays-open"],
                                       fails={"admin.update-config"}),
    "capabilities-unadvertised-submessage": dict(run=CAPS, fails={"capabilities.submessages-advertised"}),
    "capabilities-missing-core": dict(run=CAPS, fails={"core.profiles.core-listed"},
                                      also={"capabilities.submessages-advertised",
                                            "capabilities.combinations"}),
    "capabilities-duplicate-profile": dict(run=CAPS, fails={"capabilities.no-duplicates"}),
    "capabilities-limit-out-of-range": dict(run=CAPS + ["core.generate.*"],
                                            fails={"capabilities.limits-in-range"}),
    "capabilities-revision-mismatch": dict(run=CAPS, fails={"core.discovery.revision"}),
    "capabilities-role-mismatch": dict(run=CAPS, fails={"capabilities.role-scope"},
                                       engine=dict(profiles=("kv",), role="prefill")),
    "limits-not-enforced": dict(run=["core.generate.*"], fails={"core.generate.limits"},
                                also={"core.generate.not-found", "core.generate.model-limits"}),
    "features-off-accepted": dict(run=["core.generate.*"], fails={"core.generate.limits"},
                                  engine=dict(limits={"core": {
                                      "min_p": False, "logit_bias": False, "prompt_logprobs": False,
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
    "generate-no-terminal": dict(run=["core.abort.*", "core.generate.*"],
                                 fails={"core.abort.by-id", "core.abort.all"},
                                 also={"core.abort.queued", "core.abort.all-queued"}),
    "client-cancel-ignored": dict(run=["core.abort.*", "core.generate.*"],
                                  fails={"core.generate.client-cancel"},
                                  also={"core.generate.cancel-queued"}),
    "abort-ignored": dict(run=["core.abort.*", "core.generate.*"],
                          fails={"core.abort.by-id", "core.abort.all"},
                          also={"core.abort.queued", "core.abort.all-queued"}),
    "load-ranks-not-summed": dict(run=["load.ranks.*", "load.getload.*"], fails={"load.ranks.sum"},
                                  engine=dict(profiles=("load",), limits={"load": {"per_rank": True}})),
    "getload-instance-mismatch": dict(run=["load.instance-id", "load.getload.*"],
                                      fails={"load.instance-id"}),
    "events-sequence-from-zero": dict(run=["events.*"], fails={"events.initial-state"}),
    "session-ttl-not-clamped": dict(run=["sessions.*"], fails={"sessions.ttl-clamped"}),
    "admin-no-auth": dict(run=["admin.unauthenticated", "admin.guard-isolated"],
                          fails={"admin.unauthenticated"}),
    "bearer-scheme-case-sensitive": dict(run=["admin.bearer-scheme-case", "admin.unauthenticated"],
                                         fails={"admin.bearer-scheme-case"}),
    "numbers-not-checked": dict(run=["*.numbers.*", "core.generate.*"],
                                fails={"core.numbers.sampling", "core.numbers.penalties",
                                       "core.numbers.logit-bias"}),
    "wire-policy-off": dict(run=["core.wire.*"], fails={"core.wire.undecodable"}),
    "health-list-unimplemented": dict(run=["health.*"], fails={"health.list"}),
}


# The alias faults: each fails its own alias case against an engine serving both aliases.
ALIASES = dict(aliases=("openengine", "control"), profiles=("load", "admin"))
PLAN.update({
    # load is left unadvertised so an alias GetLoad must be refused.
    "alias-unadvertised-served": dict(run=["alias.*"], fails={"alias.unadvertised-unimplemented"},
                                      engine=dict(aliases=("openengine", "control"), profiles=("admin",))),
    "alias-abort-separate": dict(run=["alias.*"], fails={"alias.shared-requests"}, engine=ALIASES),
    "alias-drain-unguarded": dict(run=["alias.*"], fails={"alias.admin-guard"}, engine=ALIASES),
    "alias-answers-differ": dict(run=["alias.*"], fails={"alias.same-answers"}, engine=ALIASES),
    "alias-not-in-health": dict(run=["alias.*"], fails={"alias.health"}, engine=ALIASES),
})


def test_every_fault_has_a_plan():
    assert sorted(FAULTS) == sorted(PLAN), "add the new fault to PLAN (and a case that catches it)"


def _allowed(case_id: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(case_id, p) for p in patterns)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_is_caught_by_its_case(fault):
    plan = PLAN[fault]
    with reference_engine(faults=(fault,), **plan.get("engine", {})) as engine:
        report = run_suite(engine.address, patterns=plan["run"])
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


def test_without_faults_the_same_selections_pass():
    with reference_engine() as engine:
        report = run_suite(engine.address, patterns=sorted({p for plan in PLAN.values()
                                                            for p in plan["run"]}))
    assert failed(report) == {}
