"""How the WatchLoad cases judge "one message per period" (openengine/conformance/cases/load.py):
the lower quartile of the gaps over ten arrivals (bursts after a stall left out), so a busy
machine's late timers and stalls pass and a stream at twice its period fails, whatever the period."""

from __future__ import annotations

import pytest

from openengine.conformance.cases.load import RATE_GAPS, RATE_PERIOD_MS, Received, _rate_problem


def _arrivals(gaps_ms: list[float]) -> list[Received]:
    at, out = 0.0, [Received(msg=None, at=0.0)]
    for gap in gaps_ms:
        at += gap / 1000
        out.append(Received(msg=None, at=at))
    return out


def test_one_message_per_period_passes():
    assert _rate_problem(_arrivals([20.0] * RATE_GAPS), 20, 1.0, "snapshots") is None


def test_a_stall_of_the_machine_moves_a_few_gaps_and_passes():
    gaps = [100.0] * RATE_GAPS
    gaps[3], gaps[4], gaps[5] = 400.0, 0.5, 0.5       # held back, then delivered at once
    assert _rate_problem(_arrivals(gaps), 100, 2.0, "snapshots") is None


def test_a_loaded_machines_jitter_at_the_asked_period_passes():
    gaps = [RATE_PERIOD_MS + d for d in (3, 40, 12, 25, 0, 45, 8, 30, 15, 20)][:RATE_GAPS]
    assert _rate_problem(_arrivals(gaps), RATE_PERIOD_MS, 3.0, "heartbeats") is None


@pytest.mark.parametrize("period_ms", [10, 20, 100, RATE_PERIOD_MS, 1000])
def test_a_stream_at_twice_its_period_fails_at_every_period(period_ms):
    problem = _rate_problem(_arrivals([2.0 * period_ms] * RATE_GAPS), period_ms, 60.0, "snapshots")
    assert problem is not None and f"arrived {2 * period_ms} ms apart or more" in problem
    assert f"period is {period_ms} ms" in problem


def test_too_few_arrivals_before_the_deadline_fail():
    problem = _rate_problem(_arrivals([20.0] * 3), 20, 0.88, "snapshots")
    assert problem is not None and problem.startswith("4 snapshots arrived in 0.88 s")


def test_an_engine_whose_timer_runs_late_on_a_loaded_machine_passes():
    # Re-armed after each message, a late timer lengthens most gaps; a few still come on time.
    late = [1.6, 1.5, 1.0, 1.7, 1.05, 1.55, 1.8, 1.1, 1.6, 1.65][:RATE_GAPS]
    assert _rate_problem(_arrivals([RATE_PERIOD_MS * f for f in late]), RATE_PERIOD_MS, 5.0, "heartbeats") is None


def test_a_stream_at_twice_its_period_read_in_bursts_after_stalls_fails():
    gaps = [2.0 * RATE_PERIOD_MS] * RATE_GAPS
    gaps[2] = gaps[3] = gaps[6] = 1.0        # held back by the reader, then read at once
    problem = _rate_problem(_arrivals(gaps), RATE_PERIOD_MS, 10.0, "snapshots")
    assert problem is not None and f"period is {RATE_PERIOD_MS} ms" in problem
