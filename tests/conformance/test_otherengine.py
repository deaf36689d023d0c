"""The suite against an engine it was not written with (tests/conformance/otherengine): the right
verdict on a correct engine with fast EOS and a 250 ms minimum watch interval, and a failure for
every bug variant, each caught by the case meant for it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from openengine.conformance import Options, Outcome, all_cases, run_suite as run_options

from tests.conformance.conftest import failed, report_of, run_suite, side_by_side
from tests.conformance.otherengine import Bugs, OtherEngine, Timing
from tests.conformance.otherengine.variants import VARIANTS, Serves

ADMIN_TOKEN, LIMITED_TOKEN = "otherengine-admin", "otherengine-no-rights"

# Most of its time is spent waiting on engines' streams and timers (see tests/conftest.py).
pytestmark = pytest.mark.waits


def _run(bugs: Bugs = Bugs(), **kw):
    with OtherEngine(bugs=bugs) as engine:
        return run_suite(engine.address, admin_token=None, **kw)


@contextlib.contextmanager
def _serving(serves: Serves, bugs: Bugs = Bugs(), timing: Timing = Timing()):
    """The engine with the optional parts `serves` names, and runner options that reach them."""
    with OtherEngine(bugs=bugs, timing=timing, admin_token=ADMIN_TOKEN if serves.admin else None,
                     limited_token=LIMITED_TOKEN, admin_address=serves.admin_address,
                     runtime_events=serves.runtime_events, sessions=serves.sessions, tasks=serves.tasks,
                     stoppable=serves.stoppable, upstream_only=serves.upstream_only,
                     adapters=serves.adapters) as engine:
        yield engine, Options(
            target=engine.address,
            admin_token=ADMIN_TOKEN if serves.admin else None,
            admin_limited_token=LIMITED_TOKEN if serves.admin else None,
            admin_target=engine.admin_address if serves.admin_address else None,
            shutdown_command=engine.shutdown_command if serves.stoppable else None)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_correct_engine_without_admin_conforms_and_the_verdict_says_what_went_unchecked():
    """The engine of every option passes the whole suite (below); without Admin, what needs it
    is unchecked and the verdict says so, while the cases that make their own conditions (fast
    EOS, a long minimum interval) still pass."""
    report = _run(patterns=["core.shutdown.*", "health.*", "core.generate.client-cancel",
                            "load.watch.snapshots-complete", "load.watch.periodic", "load.watch.per-rank", "load.ranks.*"])
    assert failed(report) == {}, report.verdict
    by_id = {r.id: r for r in report.results}
    for case in ("load.watch.snapshots-complete", "load.watch.periodic", "core.generate.client-cancel"):
        assert by_id[case].outcome is Outcome.PASS, (case, by_id[case])
    # Skipped only where the engine offers no such feature (it has no per-rank figures).
    assert all("per_rank" in r.reason for r in report.results
               if r.outcome is Outcome.SKIP and r.profile == "openengine.load")
    assert by_id["core.shutdown.graceful"].outcome is Outcome.UNCHECKED
    assert report.verdict.startswith("CONFORMS, ") and "REQ-HEALTH-010" in report.verdict
    assert report.exit_code == 0


def _start(variant: str):
    v = VARIANTS[variant]
    return lambda stack: stack.enter_context(_serving(v.serves, v.bugs, v.timing))[1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_bug_variant_is_caught_by_its_case(subtests):
    """The variants run side by side, each on an engine of its own; each is a subtest."""
    outcomes = side_by_side({name: (_start(name), list(v.patterns)) for name, v in sorted(VARIANTS.items())})
    for variant, outcome in outcomes.items():
        with subtests.test(variant):
            v, report = VARIANTS[variant], report_of(outcome)
            bad = failed(report)
            assert v.cases <= set(bad), f"{variant}: {sorted(v.cases - set(bad))} passed; failures: {bad}"
            # The reason that names the bug is one of the cases meant to catch it, not a bystander's.
            assert any(v.says in bad[case] for case in v.cases), bad
            assert not report.ok and report.exit_code == 1


def test_each_variant_is_meant_to_be_caught_by_cases_that_observe_what_it_breaks():
    """A case meant to catch a variant cites the clause the variant breaks (or its requirement,
    when stated as one): the matrix's case column and variant column then agree."""
    by_id = {c.id: c for c in all_cases()}
    for name, v in VARIANTS.items():
        cited = {req for case in v.cases for req in by_id[case].requirements}
        assert set(v.breaks) & cited, f"{name} breaks {v.breaks}; its cases cite {sorted(cited)}"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_correct_engine_with_every_option_conforms_with_nothing_checkable_unchecked():
    with _serving(Serves(admin=True, runtime_events=True, sessions=True, tasks=True,
                         stoppable=True, adapters=True)) as (_, options):
        report = asyncio.run(run_options(options))
    assert failed(report) == {}, report.verdict
    outcomes = {r.id: r.outcome for r in report.results}
    # Left unchecked only what no engine with these profiles could show: the registry has no
    # double-typed updatable limit for a NaN to be refused in.
    assert {case for case, o in outcomes.items() if o is Outcome.UNCHECKED} == {
        "admin.numbers.update-config"}
    for case in ("admin.update-config", "admin.permission-denied", "admin.drain", "core.shutdown.graceful",
                 "events.initial-state", "events.state-follows-health", "health.pause.work-unavailable",
                 "core.revision.unchanged-by-state", "sessions.ttl-clamped", "sessions.max-sessions",
                 "sessions.lifecycle", "tasks.families", "tasks.max-inputs", "capabilities.model-scope",
                 "adapters.lifecycle", "adapters.invalid", "adapters.limits"):
        assert outcomes[case] is Outcome.PASS, case
    assert outcomes["admin.own-address-health"] is Outcome.SKIP      # Admin is on the main address
    assert report.exit_code == 0


@pytest.mark.timeout(60)
def test_a_correct_engine_with_admin_on_its_own_address_conforms():
    with _serving(Serves(admin=True, admin_address=True)) as (_, options):
        report = asyncio.run(run_options(options, patterns=["admin.*", "health.*", "core.rpcs.served"]))
    assert failed(report) == {}, report.verdict
    outcomes = {r.id: r.outcome for r in report.results}
    assert outcomes["admin.own-address-health"] is Outcome.PASS
    assert outcomes["admin.rpcs.served"] is Outcome.PASS
    assert outcomes["health.check.advertised-services"] is Outcome.PASS
