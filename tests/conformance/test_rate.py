"""How the WatchLoad cases judge "one message per period" (openengine/conformance/cases/load.py):
the median gap over ten arrivals, so a stall of a busy machine passes and a slow engine fails."""

from __future__ import annotations

from openengine.conformance.cases.load import RATE_GAPS, Received, _rate_problem


def _arrivals(gaps_ms: list[float]) -> list[Received]:
    at, out = 0.0, [Received(msg=None, at=0.0)]
    for gap in gaps_ms:
        at += gap / 1000
        out.append(Received(msg=None, at=at))
    return out


def test_one_message_per_period_passes():
    assert _rate_problem(_arrivals([20.0] * RATE_GAPS), 20, 1.0, "snapshots") is None


def test_a_stall_of_the_machine_moves_a_few_gaps_and_passes():
    gaps = [20.0] * RATE_GAPS
    gaps[3], gaps[4], gaps[5] = 400.0, 0.5, 0.5       # held back, then delivered at once
    assert _rate_problem(_arrivals(gaps), 20, 1.0, "snapshots") is None


def test_every_message_late_by_a_loaded_machines_delay_passes():
    assert _rate_problem(_arrivals([80.0] * RATE_GAPS), 40, 2.0, "heartbeats") is None


def test_an_engine_sending_every_other_period_fails_on_the_median():
    problem = _rate_problem(_arrivals([500.0] * RATE_GAPS), 250, 6.0, "snapshots")
    assert problem is not None and "median 500 ms" in problem


def test_too_few_arrivals_before_the_deadline_fail():
    problem = _rate_problem(_arrivals([20.0] * 3), 20, 0.88, "snapshots")
    assert problem is not None and problem.startswith("4 snapshots in 0.88 s")
