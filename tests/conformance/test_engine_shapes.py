"""A correct engine conforms whatever its shape: the independent test engine made slow (tens of
milliseconds a token), small (two slots and one queue place, so the suite saturates it at once)
and with long watch intervals (a 1 s minimum), all at once. Each case derives the state it
judges from the advertised limits, so nothing its profiles make checkable is left unchecked."""

from __future__ import annotations

import pytest

from openengine.conformance import Outcome

from tests.conformance.conftest import failed, run_suite
from tests.conformance.otherengine import OtherEngine
from tests.conformance.otherengine.engine import Timing

pytestmark = pytest.mark.waits

SLOW_SMALL_LONG = Timing(
    token_seconds=(0.02, 0.04), eos_after=(4, 8),
    max_running_requests=2, max_queued_requests=1, max_watchers=2,
    min_watch_interval_ms=1000, default_watch_interval_ms=3000, default_heartbeat_ms=5000,
    max_watch_interval_ms=30_000)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_slow_small_engine_with_long_intervals_conforms_with_nothing_more_unchecked():
    with OtherEngine(timing=SLOW_SMALL_LONG) as engine:
        report = run_suite(engine.address, admin_token=None)
    assert failed(report) == {}, report.verdict
    by_id = {r.id: r for r in report.results}
    # The windows of the rate, heartbeat and slow-reader cases span several 1 s intervals: longer
    # than their share of the case timeout, so the cases moved their deadlines rather than give up.
    for case in ("load.watch.periodic", "load.watch.heartbeat-idle", "load.watch.slow-reader",
                 "load.watch.stalled-isolated", "load.watch.heartbeat-busy",
                 "core.generate.client-cancel", "core.capabilities.saturated", "core.abort.queued",
                 "core.generate.cancel-queued"):
        assert by_id[case].outcome is Outcome.PASS, (case, by_id[case].reason)
    # Only what needs Admin (which this engine lacks) stays unchecked, as for the default shape.
    assert set(report.unchecked_requirements()) <= {"REQ-HEALTH-010"}, report.verdict
    assert report.exit_code == 0
