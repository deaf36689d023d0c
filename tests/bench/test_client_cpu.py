"""The client-CPU benchmark (bench/watchers.py --client-cpu) on a tiny run: every reader receives
updates, the watchers validate them, and every goal is a ratio of figures from that run."""

from __future__ import annotations

import pytest

from bench import watchers


@pytest.mark.slow
def test_a_quick_client_cpu_run_measures_every_reader_and_states_its_goals():
    section = watchers.run(quick=True)
    by_name = {f.name: f for f in section.figures}
    for reader in ("bare_aio", "async_watcher", "bare_sync", "watcher", "feed"):
        assert by_name[f"watchers.{reader}.client_us_per_update"].value > 0, reader
    goals = [f for f in section.figures if f.met is not None]
    assert {f.name for f in goals} == {
        "watchers.async_watcher_over_bare_aio", "watchers.watcher_over_bare_sync",
        "watchers.async_watcher_validation_added", "watchers.watcher_validation_added"}
    assert all(f.value > 0 for f in goals)
