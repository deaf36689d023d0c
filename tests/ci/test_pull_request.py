"""The pull-request workflow's steps (.ci/pull-request), run for real in a copy of the tree.

The workflow calls the script once per step, so running the script here is running the workflow
(less the checkout, cache and upload actions). A change that passes every step is the added profile
of tests/engine/test_add_a_profile.py, whose copy runs the whole workflow; here, the changes it
must fail on. The test step runs a narrow selection of tests in
one process (`PYTEST_WORKERS=0`), since the whole suite is the run this test is part of and a
pool of workers would cost more to start than the selection takes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.checkout import git, run

# Each test runs several whole workflow steps (the conformance step is the whole suite against an
# engine): on a loaded machine that outlasts the suite's default per-test timeout, a hang guard.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# The load tests that read a snapshot; the cancellation storm (slow) adds nothing to the verdict.
LOAD_TESTS = "tests/engine/test_load.py -m 'not slow'"
BROKEN_LINK = "\nSee [the missing page](missing-page.md).\n"
UNKNOWN_ANCHOR = "\nSee [a missing section](load.md#no-such-section).\n"


def _steps(tree: Path, *steps: str, **env: str):
    summary = tree / "summary.md"
    env.setdefault("PYTEST_WORKERS", "0")
    proc = run([".ci/pull-request", *steps], tree, BASE="main", GITHUB_STEP_SUMMARY=str(summary), **env)
    return proc, summary


def _status(tree: Path, step: str) -> int | None:
    path = tree / "build" / "pull-request" / f"{step}.status"
    return int(path.read_text()) if path.is_file() else None


def test_the_site_step_fails_on_a_broken_link_and_on_an_unknown_anchor(tree):
    # One build with both planted: strict mode fails on any warning, and each is named as one.
    index = tree / "spec" / "index.md"
    index.write_text(index.read_text(encoding="utf-8") + BROKEN_LINK + UNKNOWN_ANCHOR, encoding="utf-8")
    proc, _ = _steps(tree, "site")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    for message in ("missing-page.md", "#no-such-section"):
        assert any(message in line for line in warnings), output
    assert "strict mode" in output
    assert _status(tree, "site") == proc.returncode


def _delete_load_field(tree: Path) -> None:
    """The simulated pull request: WatchLoadSettings.instance_id deleted (its number reserved),
    openengine.load bumped to 2.0 with a history entry and the registry's revision raised, so the
    version rules call it legal."""
    proto = tree / "proto" / "openengine" / "v1" / "load.proto"
    text = proto.read_text(encoding="utf-8")
    field = re.search(r"\n(?:\s*//[^\n]*\n)*\s*string instance_id = (\d+);", text)
    assert field, "WatchLoadSettings.instance_id is gone from load.proto: pick another field"
    proto.write_text(text.replace(field[0], f"\n  reserved {field[1]};\n  reserved \"instance_id\";"),
                     encoding="utf-8")
    registry = tree / "profiles.yaml"
    text = registry.read_text(encoding="utf-8")
    load = text.index("  - name: openengine.load\n")
    head, tail = text[:load], text[load:]
    tail = tail.replace('    version: "1.0"\n', '    version: "2.0"\n', 1)
    history_end = re.compile(r"    history:\n(?:      .*\n)+").search(tail).end()    # oldest first
    tail = (tail[:history_end] + '      - version: "2.0"\n'
            "        changes: Removes WatchLoadSettings.instance_id.\n" + tail[history_end:])
    head = re.sub(r"(?m)^(  revision: )(\d+)$", lambda m: f"{m[1]}{int(m[2]) + 1}", head, count=1)
    registry.write_text(head + tail, encoding="utf-8")
    proc = run([".venv/bin/oespec", "generate"], tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_version_legal_field_deletion_that_breaks_the_engine_fails_the_workflow(git_tree):
    _delete_load_field(git_tree)
    git(git_tree, "commit", "-q", "-am", "load 2.0: drop WatchLoadSettings.instance_id")

    # The version rules are satisfied: the registry checks and the breaking step passes.
    proc, _ = _steps(git_tree, "check", "breaking")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    # The reference engine still sets the field: the tests and the conformance suite catch it.
    proc, _ = _steps(git_tree, "test", PYTEST_ARGS=LOAD_TESTS)
    assert proc.returncode != 0 and _status(git_tree, "test") != 0
    assert "instance_id" in proc.stdout + proc.stderr
    proc, summary = _steps(git_tree, "conformance")
    assert proc.returncode != 0 and _status(git_tree, "conformance") != 0

    proc, summary = _steps(git_tree, "summary")
    text = summary.read_text(encoding="utf-8")
    assert "| check | passed |" in text and "| breaking | passed |" in text
    assert "| test | **failed**" in text and "| conformance | **failed**" in text
    failed = re.search(r"(\d+) cases: \d+ passed, (\d+) failed, (\d+) errors", text)
    assert failed and int(failed[2]) + int(failed[3]) > 0, text
    assert re.search(r"Failing: .*`load\.", text), text
