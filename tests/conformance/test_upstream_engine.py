"""The runner against an engine of today's layout: the upstream-only engine (written from
upstream's protos alone, tests/conformance/upstream_engine) is judged, never refused. Clean, it
passes every case whose RPCs it serves and fails each requirement the proposal adds, saying what
to add; with each planted defect, the case meant for it fails with a reason naming the defect."""

from __future__ import annotations

import asyncio

import pytest

from openengine.conformance import Options, Outcome, run_suite
from openengine.conformance.report import render_text

from tests.conformance.conftest import failed, report_of, side_by_side
from tests.conformance.upstream_engine.launch import generate_stubs, upstream_engine
from tests.conformance.upstream_engine.variants import VARIANTS

# Engines started as subprocesses, mostly waiting on their streams (see tests/conftest.py).
pytestmark = pytest.mark.waits

# Two slots so a request can queue; fast tokens and a short limit keep runs brief.
ENGINE = {"slots": 2, "token_ms": 1, "max_output_tokens": 400}

# Variant -> (the case meant to catch it, words of the reason it gives).
CAUGHT_BY = {
    "ignores-max-tokens": ("core.generate.stream", "asked max_tokens 6;"),
    "no-usage": ("core.generate.stream", "carries no usage"),
    "usage-wrong-total": ("core.generate.stream", "usage.total_tokens"),
    "usage-on-every-response": ("core.generate.stream", "only the final response carries it"),
    "missing-output-index": ("core.generate.stream", "left output_index unset"),
    "no-finished-event": ("core.generate.stream", "never got a finished event"),
    "finished-twice": ("core.generate.stream", "followed its finished event"),
    "request-id-not-echoed": ("core.generate.stream", "not the request's"),
    "stop-text-ignored": ("core.generate.stop-strings", "characters follow it"),
    "stop-token-ignored": ("core.generate.stop-token-ids", "more tokens followed"),
    "stop-text-in-output": ("core.generate.stop-strings", "and 0 characters follow it"),
    "no-stop-match": ("core.generate.stop-token-ids", "stop_match is unset"),
    "length-reported-as-stop": ("core.generate.stream", "finished with FINISH_REASON_STOP"),
    "min-tokens-ignored": ("core.generate.min-tokens", "nothing ends an output before min_tokens"),
    "seed-ignored": ("core.generate.seed", "sampling.seed is not honoured"),
    "num-sequences-ignored": ("core.generate.terminal", "output(s) [1"),
    "logprobs-ignored": ("core.generate.output-logprobs", "were not delivered"),
    # Ended by its length, or still running at its deadline on a slow machine: never cancelled.
    "abort-ignored": ("core.abort.by-id", "a finished event of FINISH_REASON_CANCELLED"),
    "abort-no-cancelled": ("core.abort.by-id", "no finished event, not with a finished event of "
                                               "FINISH_REASON_CANCELLED"),
    "abort-unknown-ok": ("core.abort.targets", "an unknown request id answered ABORT_STATUS_ABORTED"),
    "abort-finished-not-found": ("core.abort.targets", "had just finished failed with NOT_FOUND"),
    "abort-no-target-ok": ("core.abort.targets", "no target answered ABORT_STATUS_ABORTED"),
    "load-never-idle": ("core.load.back-to-idle", "still counted 1 running"),
    "load-always-zero": ("core.load.back-to-idle", "counted no running or queued request"),
    "revision-too-new": ("core.server-info.revisions", "minimum_client_revision is 2"),
    "schema-revision-zero": ("core.server-info.revisions", "schema_revision is 0"),
    "model-info-unknown-ok": ("core.model-info.answers", "GetModelInfo for an unknown model was accepted"),
    "health-not-ready": ("core.control-health", "answered HEALTH_STATE_NOT_READY"),
}

# What the proposal adds and an engine of upstream's layout lacks: each fails, saying what to add.
MIGRATION = {
    "core.discovery.answers": "add the Discovery service",
    "core.rpcs.served": "Discovery/GetCapabilities",
    "core.profiles.core-listed": "Discovery/GetCapabilities",
    "core.server-info.revisions": "schema_revision is 1",
    "health.served": "add the standard grpc.health.v1.Health service",
    "core.numbers.sampling": "was accepted",
    "core.wire.undecodable": "not INTERNAL",
}


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return generate_stubs(tmp_path_factory.mktemp("upstream-stubs"))


RUNNER = dict(rpc_timeout=2, case_timeout=15)


def _judge(stubs):
    with upstream_engine(stubs, None, **ENGINE) as address:
        return asyncio.run(run_suite(Options(target=address, **RUNNER)))


def test_every_variant_has_the_case_meant_to_catch_it():
    assert set(CAUGHT_BY) == set(VARIANTS)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_clean_engine_is_judged_and_the_report_is_a_migration_checklist(stubs):
    report = _judge(stubs)
    bad = failed(report)
    for case, words in MIGRATION.items():
        assert words in bad.get(case, ""), (case, bad.get(case))
    # Every failure is a requirement the proposal adds: standard health, discovery, the
    # revision it serves, and its stricter input rules.
    assert set(bad) <= set(MIGRATION) | {r.id for r in report.results if r.id.startswith("health.")} \
        | {"core.numbers.penalties"}, sorted(bad)
    outcomes = {r.id: r.outcome for r in report.results}
    for case, _ in set(CAUGHT_BY.values()):
        if case not in MIGRATION:
            assert outcomes[case] is Outcome.PASS, (case, outcomes[case])
    for case in ("core.generate.request-id", "core.abort.all", "core.abort.queued",
                 "core.generate.client-cancel", "core.getload.current", "core.model-info.answers"):
        assert outcomes[case] is Outcome.PASS, (case, outcomes[case])
    assert report.verdict.startswith("DOES NOT CONFORM") and report.exit_code == 1
    text = render_text(report)
    assert "migration:" in text and "openengine.load (Observability/WatchLoad)" in text


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_each_planted_defect_is_caught_by_the_case_naming_it(stubs, subtests):
    """The defects run side by side, each in an engine process of its own; each is a subtest."""
    def start(variant):
        return lambda stack: Options(target=stack.enter_context(upstream_engine(stubs, variant, **ENGINE)),
                                     **RUNNER)

    outcomes = side_by_side({variant: (start(variant), [case]) for variant, (case, _) in sorted(CAUGHT_BY.items())})
    for variant, outcome in outcomes.items():
        with subtests.test(variant):
            (case, words), report = CAUGHT_BY[variant], report_of(outcome)
            bad = failed(report)
            assert case in bad, f"{variant}: {case} did not fail ({report.verdict})"
            assert words in bad[case], bad[case]
            assert report.exit_code == 1
