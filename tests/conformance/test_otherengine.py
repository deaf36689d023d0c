"""The suite against an engine it was not written with (tests/conformance/otherengine): the right
verdict on a correct engine with fast EOS and a 250 ms minimum watch interval, and a failure for
every bug variant, each caught by the case meant for it."""

from __future__ import annotations

import pytest

from openengine.conformance import Outcome

from tests.conformance.conftest import failed, run_suite
from tests.conformance.otherengine import Bugs, OtherEngine

# Most of its time is spent waiting on engines' streams and timers (see tests/conftest.py).
pytestmark = pytest.mark.waits


def _run(bugs: Bugs = Bugs(), **kw):
    with OtherEngine(bugs=bugs) as engine:
        return run_suite(engine.address, admin_token=None, **kw)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_correct_engine_conforms_with_no_load_requirement_unchecked():
    report = _run()
    assert failed(report) == {}, report.verdict
    by_id = {r.id: r for r in report.results}
    load = [r for r in report.results if r.profile == "openengine.load"]
    assert len(load) >= 20
    assert [r.id for r in load if r.outcome not in (Outcome.PASS, Outcome.SKIP)] == []
    # Skipped only where the engine offers no such feature (it has no per-rank figures).
    assert all("per_rank" in r.reason for r in load if r.outcome is Outcome.SKIP)
    assert not [req for req in report.unchecked_requirements() if req.startswith("REQ-LOAD-")]
    # Fast EOS and a long minimum interval: the cases made their own conditions.
    assert by_id["load.watch.snapshots-complete"].outcome is Outcome.PASS
    assert by_id["load.watch.periodic"].outcome is Outcome.PASS
    assert by_id["core.generate.client-cancel"].outcome is Outcome.PASS
    # No Admin: what needs it is skipped or unchecked, and the verdict says so.
    assert by_id["core.shutdown.graceful"].outcome is Outcome.UNCHECKED
    assert report.verdict.startswith("CONFORMS, ") and "REQ-HEALTH-010" in report.verdict
    assert report.exit_code == 0


VARIANTS = {
    "ignore-cancel": (Bugs(ignore_cancel=True), ["core.generate.*"], {"core.generate.client-cancel"},
                      "not stopped"),
    "min-p-when-off": (Bugs(accept_off=frozenset({"min_p"})), ["core.generate.limits"],
                       {"core.generate.limits"}, "sampling.min_p set was accepted"),
    "logit-bias-when-off": (Bugs(accept_off=frozenset({"logit_bias"})), ["core.generate.limits"],
                            {"core.generate.limits"}, "sampling.logit_bias set was accepted"),
    "prompt-logprobs-when-off": (Bugs(accept_off=frozenset({"prompt_logprobs"})),
                                 ["core.generate.limits"], {"core.generate.limits"},
                                 "sampling.prompt_logprobs set was accepted"),
    "guided-when-off": (Bugs(accept_off=frozenset({"guided"})), ["core.generate.limits"],
                        {"core.generate.limits"}, "guided json_schema was accepted"),
    "heartbeat-not-reset": (Bugs(heartbeat_from_last_heartbeat=True), ["load.watch.heartbeat-*"],
                            {"load.watch.heartbeat-busy"}, "not restarted by snapshots"),
    "load-at-major-0": (Bugs(load_major=0), ["load.rpcs.served", "capabilities.*"],
                        {"load.rpcs.served", "capabilities.reserved-names", "capabilities.majors-positive"},
                        "registry defines only major 1"),
    "watch-ends-after-2s": (Bugs(watch_ends_after=2.0), ["load.watch.stays-open"],
                            {"load.watch.stays-open"}, "ended the WatchLoad stream with OK"),
    "heartbeat-off-ignored": (Bugs(heartbeat_off_ignored=True), ["load.watch.heartbeat-off"],
                              {"load.watch.heartbeat-off"}, "heartbeats were asked off"),
    "snapshots-at-double-interval": (Bugs(snapshots_at_double_interval=True), ["load.watch.periodic"],
                                     {"load.watch.periodic"}, "one was due every 250 ms"),
    "abort-skips-queued": (Bugs(abort_skips_queued=True), ["core.abort.*"], {"core.abort.queued"},
                           "not with one terminal error of code ERROR_CODE_ABORTED"),
    "abort-all-running-only": (Bugs(abort_all_running_only=True), ["core.abort.*"],
                               {"core.abort.all-queued"}, "the queued request ended after"),
    "abort-unknown-not-found": (Bugs(abort_unknown_not_found=True), ["core.abort.*"],
                                {"core.abort.unknown"}, "failed with NOT_FOUND"),
    "cancel-ignored-while-queued": (Bugs(cancel_ignored_while_queued=True), ["core.generate.*"],
                                    {"core.generate.cancel-queued"}, "was not freed from the queue"),
    "load-dropped-when-saturated": (Bugs(load_dropped_when_saturated=True), ["core.capabilities.*"],
                                    {"core.capabilities.saturated"},
                                    "with every slot busy and a request queued GetCapabilities lists"),
    "ignore-stop-token-ids": (Bugs(ignore_stop_token_ids=True), ["core.generate.stop-*"],
                              {"core.generate.stop-token-ids"}, "more tokens followed"),
    "ignore-stop-strings": (Bugs(ignore_stop_strings=True), ["core.generate.stop-*"],
                            {"core.generate.stop-strings"}, "characters follow it"),
    "getload-cached": (Bugs(load_cached_seconds=1.0), ["load.getload.*"], {"load.getload.current"},
                       "describes an earlier moment"),
    "max-output-unchecked": (Bugs(max_output_unchecked=True), ["core.generate.*"],
                             {"core.generate.model-limits"}, "its max_output_tokens is 2048"),
    "coalesced-sequence-skips": (Bugs(coalesced_sequence_skips=True), ["load.watch.slow-reader"],
                                 {"load.watch.slow-reader"}, "sequence jumps"),
    "health-serving-for-any-name": (Bugs(health_says_yes=True), ["health.*", "alias.*"],
                                    {"health.check.unknown-not-found", "alias.health"},
                                    "answers UNIMPLEMENTED"),
    "accepts-beyond-the-queue": (Bugs(overfill=True), ["core.overload.*"], {"core.overload.refused"},
                                 "one more request was accepted"),
}


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_bug_variant_is_caught_by_its_case(variant):
    bugs, patterns, must_fail, says = VARIANTS[variant]
    report = _run(bugs, patterns=patterns)
    bad = failed(report)
    assert must_fail <= set(bad), f"{variant}: {sorted(must_fail - set(bad))} passed; failures: {bad}"
    # The reason that names the bug is one of the cases meant to catch it, not a bystander's.
    assert any(says in bad[case] for case in must_fail), bad
    assert not report.ok and report.exit_code == 1
