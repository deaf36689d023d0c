"""The suite's scheduling (tests/conftest.py): the end-to-end modules in three xdist groups, slow
modules first, the waiting slow tests shared out (the long ones first) into xdist groups for the
workers beyond one per core; and, run for real, pytest-xdist keeping a group on one worker (a
pytest release that renames test ids another way turns the groups off silently)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("suite_conftest", Path(__file__).with_name("conftest.py"))
suite_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite_conftest)


class FakeItem:
    def __init__(self, nodeid: str, *marks: str):
        self.nodeid = nodeid
        self.marks = set(marks)
        self.groups: list[str] = []

    def get_closest_marker(self, name: str):
        return object() if name in self.marks else None

    def add_marker(self, mark) -> None:
        assert mark.name == "xdist_group"
        self.groups.append(mark.args[0])


def _schedule(items, monkeypatch, workers: int):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    monkeypatch.setattr(suite_conftest.os, "cpu_count", lambda: 2)
    suite_conftest.pytest_collection_modifyitems(items)
    return [(i.nodeid, i.groups) for i in items]


def test_modules_with_slow_tests_move_first_and_keep_their_order(monkeypatch):
    items = [FakeItem("tests/a.py::one"), FakeItem("tests/a.py::two"),
             FakeItem("tests/b.py::fast"), FakeItem("tests/b.py::slow", "slow"),
             FakeItem("tests/c.py::only"),
             FakeItem("tests/d.py::slow", "slow"), FakeItem("tests/d.py::fast")]
    assert [nodeid for nodeid, _ in _schedule(items, monkeypatch, 0)] == [
        "tests/b.py::fast", "tests/b.py::slow", "tests/d.py::slow", "tests/d.py::fast",
        "tests/a.py::one", "tests/a.py::two", "tests/c.py::only"]


def test_waiting_slow_tests_are_dealt_into_one_group_per_worker_beyond_one_per_core(monkeypatch):
    waiting = [FakeItem(f"tests/w.py::t{n}", "slow", "waits") for n in range(5)]
    quick = FakeItem("tests/w.py::quick", "waits")       # not slow: left to the shared queue
    computing = FakeItem("tests/c.py::t", "slow")
    scheduled = dict(_schedule([computing, *waiting, quick], monkeypatch, 5))
    assert [scheduled[f"tests/w.py::t{n}"] for n in range(5)] == [
        ["waiting-0"], ["waiting-1"], ["waiting-0"], ["waiting-1"], ["waiting-0"]]
    assert scheduled["tests/w.py::quick"] == [] and scheduled["tests/c.py::t"] == []


def test_a_waits_mark_on_one_test_makes_its_modules_slow_tests_waiting(monkeypatch):
    items = [FakeItem("tests/w.py::t0", "slow", "waits"), FakeItem("tests/w.py::t1", "slow")]
    assert [groups for _, groups in _schedule(items, monkeypatch, 4)] == [["waiting-0"], ["waiting-0"]]


def test_the_end_to_end_modules_get_groups_apart_from_the_waiting_ones(monkeypatch):
    items = [FakeItem("tests/ci/test_pull_request.py::t", "slow"),
             FakeItem("tests/engine/test_add_a_profile.py::t", "slow", "waits"),
             FakeItem("tests/w.py::t", "slow", "waits")]
    scheduled = dict(_schedule(items, monkeypatch, 4))
    assert scheduled == {"tests/ci/test_pull_request.py::t": ["end-to-end-workflow"],
                         "tests/engine/test_add_a_profile.py::t": ["end-to-end-workflow"],
                         "tests/w.py::t": ["waiting-0"]}
    # Two workers on two cores: no waiting lane, the waiting tests share the queue.
    items = [FakeItem("tests/ci/test_pull_request.py::t", "slow"), FakeItem("tests/w.py::t", "slow", "waits")]
    assert dict(_schedule(items, monkeypatch, 2)) == {"tests/ci/test_pull_request.py::t": ["end-to-end-workflow"],
                                                      "tests/w.py::t": []}


def test_without_workers_nothing_is_grouped(monkeypatch):
    items = [FakeItem("tests/w.py::t0", "slow", "waits")]
    assert _schedule(items, monkeypatch, 0) == [("tests/w.py::t0", [])]


GROUPED = '''
import os, pytest
from pathlib import Path

@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("n", range(6))
def test_grouped(n):
    out = Path(os.environ["GROUP_OUT"])
    (out / f"{n}").write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))
'''


@pytest.mark.slow
def test_xdist_keeps_a_group_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3",
                           "--dist", "loadgroup", str(tmp_path / "test_grouped.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
                               "GROUP_OUT": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {p.read_text() for p in out.iterdir()}
    # Run by pytest-xdist workers (the outer run's worker name is not passed down), all one.
    assert len(list(out.iterdir())) == 6 and len(workers) == 1 and workers.pop().startswith("gw"), workers


def test_one_worker_per_core_computes_and_the_rest_wait():
    assert suite_conftest.waiting_lanes(6, 2) == 4
    assert suite_conftest.waiting_lanes(8, 2) == 6
    assert suite_conftest.waiting_lanes(3, 2) == 1     # never every worker
    assert suite_conftest.waiting_lanes(2, 2) == 0     # no worker beyond the cores: no lane
    assert suite_conftest.waiting_lanes(2, 8) == 0
    # With the end-to-end groups on workers of their own, the lanes take the workers left.
    assert suite_conftest.waiting_lanes(12, 2, 3) == 9
    assert suite_conftest.waiting_lanes(4, 2, 3) == 1


def test_the_long_waiting_tests_are_spread_first_and_the_short_ones_fill_in():
    long = [FakeItem(f"tests/whole.py::t{n}", "slow", "waits") for n in range(3)]
    short = [FakeItem(f"tests/variants.py::v{n}", "slow", "waits") for n in range(suite_conftest.MANY * 2)]
    groups = suite_conftest.waiting_groups([*short, *long], 3)
    assert sorted(sum(i in long for i in members) for members in groups.values()) == [1, 1, 1]
    assert sorted(len(members) for members in groups.values()) == [9, 9, 9]
