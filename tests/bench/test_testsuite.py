"""The recorded test-suite timings: judged against their goals, kept in results.md across re-runs."""

from __future__ import annotations

from bench import testsuite

RECORD = {
    "date": "2026-12-03 07:00 UTC",
    "machine": {"cpu": "AMD EPYC", "cores": 2, "commit": "abc1234"},
    "conditions": "Shared machine.",
    "runs": [
        {"target": "test-fast", "wall_s": 48.2, "cpu_s": 70.1, "exit_status": 0, "pytest": "1000 passed",
         "loadavg_before": "1.0 1.0 1.0", "loadavg_after": "2.0 1.0 1.0"},
        {"target": "test", "wall_s": 171.0, "cpu_s": 240.0, "exit_status": 0, "pytest": "1200 passed",
         "loadavg_before": "1.0 1.0 1.0", "loadavg_after": "2.0 1.0 1.0"},
    ],
}


def test_each_run_is_judged_against_its_goal():
    section = testsuite.section(RECORD)
    figures = {f.name: f for f in section.figures}
    assert figures["tests.test_fast.wall"].met is True and figures["tests.test_fast.wall"].goal == "<= 60"
    assert figures["tests.test.wall"].met is False and figures["tests.test.wall"].goal == "<= 150"
    assert figures["tests.test.cpu"].value == 240.0 and figures["tests.test.cpu"].met is None
    assert "1200 passed" in figures["tests.test.wall"].note and "Shared machine." in section.discussion


def test_a_failed_run_never_meets_its_goal_and_names_what_failed():
    failed = dict(RECORD["runs"][0], exit_status=1, pytest="1 failed, 999 passed",
                  failures=["tests/a.py::test_x[1]", "tests/a.py::test_x[2]", "tests/b.py::test_y"])
    section = testsuite.section(dict(RECORD, runs=[failed]))
    wall = next(f for f in section.figures if f.name == "tests.test_fast.wall")
    assert wall.value == 48.2 and wall.met is False
    assert "1 failed" in wall.note and "exit 1" in wall.note
    assert "(in tests/a.py::test_x, tests/b.py::test_y)" in wall.note


def test_the_section_is_replaced_in_place_and_appended_once():
    base = "# Benchmark results\n\n## Fleet\n\ntext\n"
    once = testsuite.with_section(base, testsuite.section(RECORD))
    assert once.startswith(base.rstrip("\n")) and once.count(testsuite.BEGIN) == 1
    assert "| `tests.test.wall` | 171 |  | s | <= 150 | **missed** |" in once
    faster = dict(RECORD, runs=[dict(RECORD["runs"][1], wall_s=140.0)])
    twice = testsuite.with_section(once + "\n## Later\n", testsuite.section(faster))
    assert twice.count(testsuite.BEGIN) == 1 and "## Later" in twice
    assert "| `tests.test.wall` | 140 |  | s | <= 150 | met |" in twice and "171" not in twice


def test_nothing_recorded_leaves_results_alone(tmp_path):
    assert testsuite.section(None) is None
    assert testsuite.with_section("# Results\n", None) == "# Results\n"
    assert testsuite.load_record(tmp_path / "missing.json") is None
