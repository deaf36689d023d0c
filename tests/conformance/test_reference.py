"""The whole suite passes against the reference engine, with all profiles and with subsets."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from openengine.conformance import Options, Outcome
from openengine.engine import ModelConfig

from tests.conformance.conftest import TOKEN, failed, reference_engine, report_of, run_suite, side_by_side

# Whole suites against engines (the fast lane leaves them out).
pytestmark = [pytest.mark.slow, pytest.mark.waits]

# The default engine (every profile, one model) is judged whole by the subprocess test below;
# an engine without load shows load's cases absent in the prefill and encoder subsets.
SUBSETS = [
    dict(profiles=("core", "load")),
    dict(profiles=("kv",), role="prefill"),
    dict(profiles=("kv", "load"), role="decode"),
    dict(profiles=("encoder",), role="encoder"),
    # Two models that differ in their model-scoped profiles and limits (REQ-CAP-012).
    dict(profiles=("all",), models=(
        ModelConfig(name="chat", profiles=("adapters",), limits={"adapters": {"max_lora_rank": 32}}),
        ModelConfig(name="embedder", max_context_tokens=1024, max_output_tokens=64, profiles=("tasks", "adapters"),
                    limits={"tasks": {"supported_tasks": ["embed", "score"]}}))),
]


def _name(kw: dict) -> str:
    return "+".join(kw["profiles"]) + (f"@{kw['role']}" if "role" in kw else "") + \
        (f"-{len(kw['models'])}-models" if "models" in kw else "")


def _start(engine_kw: dict):
    return lambda stack: Options(target=stack.enter_context(reference_engine(**engine_kw)).address,
                                 admin_token=TOKEN)


@pytest.mark.timeout(240)
def test_suite_passes(subtests):
    """Each subset on an engine of its own, the suites side by side; each is a subtest."""
    subsets = {_name(kw): kw for kw in SUBSETS}
    outcomes = side_by_side({name: (_start(kw), None) for name, kw in subsets.items()})
    for name, outcome in outcomes.items():
        with subtests.test(name):
            judge_subset(subsets[name], report_of(outcome))


def judge_subset(engine_kw: dict, report) -> None:
    assert failed(report) == {}
    advertised = set(report.advertised)
    ran = {r.id for r in report.results}
    from openengine.conformance.context import load_contract

    for info in load_contract().values():
        if info.name in advertised:
            assert f"{info.short_name}.rpcs.served" in ran
        else:
            assert f"{info.short_name}.absent.unimplemented" in ran
    assert report.coverage and report.coverage.percent == 100.0
    # Only what needs an option the run did not give stays unchecked, never a load requirement.
    unchecked = {r.id for r in report.results if r.outcome is Outcome.UNCHECKED}
    allowed = {"core.shutdown.graceful", "admin.permission-denied", "admin.drain",
               # No registry limit is a double yet: a NaN double_value cannot be told from a type error.
               "admin.numbers.update-config"}
    if engine_kw.get("role") == "prefill":
        # A prefill engine produces one token per request: no request runs long enough to
        # cancel or abort it midway, and the runner says so instead of passing.
        allowed |= {"core.abort.all", "core.abort.by-id", "core.capabilities.stable",
                    "core.generate.client-cancel", "core.abort.queued", "core.abort.all-queued",
                    "core.generate.cancel-queued", "core.capabilities.saturated",
                    "core.getload.current", "core.overload.refused"}
    assert unchecked <= allowed, unchecked
    if "openengine.load" in advertised:
        assert not [req for req in report.unchecked_requirements() if req.startswith("REQ-LOAD-")]
    if "models" in engine_kw:
        assert report.engine["supported_models"] == [m.name for m in engine_kw["models"]]


def test_profile_option_restricts_and_forces():
    with reference_engine(profiles=("core",)) as engine:
        only = run_suite(engine.address, profiles=["load"])
    assert only.forced == ["openengine.load"]
    assert {r.profile for r in only.results} == {"openengine.load"}
    # Forced but not served: its cases fail, they do not pass by accident.
    assert any(r.outcome is Outcome.FAIL for r in only.results)


def test_command_against_a_subprocess_engine(tmp_path):
    """What `make conformance` does: an engine on a free port, the suite, a graceful stop."""
    root = Path(__file__).resolve().parents[2]
    oespec = [sys.executable, "-m", "oespec.cli"]
    engine = subprocess.Popen(oespec + ["engine", "--port", "0", "--admin-token", TOKEN],
                              cwd=root, stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True)
    try:
        address = None
        deadline = time.monotonic() + 20
        while address is None and time.monotonic() < deadline:
            line = engine.stdout.readline()
            m = re.search(r"serving on (\S+)", line)
            address = m.group(1) if m else None
        assert address, "the engine did not log its address"
        junit = tmp_path / "report.xml"
        done = subprocess.run(oespec + ["conformance", "--target", address, "--admin-token", TOKEN,
                                        "--shutdown-command", f"kill -TERM {engine.pid}",
                                        "--format", "json", "--junit", str(junit)],
                              cwd=root, capture_output=True, text=True, timeout=120)
        report = json.loads(done.stdout) if done.stdout.startswith("{") else {}
        bad = [f"{r['case']}: {r['reason']}" for r in report.get("results", ())
               if r["outcome"] in ("fail", "error")]
        assert done.returncode == 0, bad or done.stdout[-3000:] + done.stderr[-3000:]
        outcomes = {r["case"]: r["outcome"] for r in report["results"]}
        assert outcomes["core.shutdown.graceful"] == "pass" and report["verdict"]["conforms"]
        # Only what needs an option the run did not give stays unchecked, never a load requirement.
        unchecked = {case for case, outcome in outcomes.items() if outcome == "unchecked"}
        assert unchecked <= {"admin.permission-denied", "admin.drain", "admin.numbers.update-config"}, unchecked
        assert not [r for r in report["verdict"]["unchecked_requirements"] if r.startswith("REQ-LOAD-")]
        suite = ET.parse(junit).getroot()
        assert int(suite.get("tests")) == len(report["results"])
        assert int(suite.get("failures")) == 0 and int(suite.get("errors")) == 0
        assert engine.wait(10) == 0
    finally:
        if engine.poll() is None:
            os.kill(engine.pid, signal.SIGKILL)
            engine.wait(5)
