"""The pull-request job summary: step results, the breaking verdict, conformance counts, the site."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.checkout import ROOT

SCRIPT = ROOT / ".ci" / "pull_request_summary.py"


@pytest.fixture(scope="module")
def summary():
    spec = importlib.util.spec_from_file_location("pull_request_summary", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuite name="openengine-conformance" tests="5" failures="1" errors="1" skipped="1" time="1.0">
  <testcase classname="openengine.load" name="load.get.complete"><failure message="no field"/></testcase>
  <testcase classname="openengine.load" name="load.watch.settings-first"><error message="boom"/></testcase>
  <testcase classname="openengine.core" name="core.a"/>
  <testcase classname="openengine.core" name="core.b"/>
  <testcase classname="openengine.admin" name="admin.x"><skipped message="no token"/></testcase>
</testsuite>
"""

BREAKING = """$ oespec breaking --against main --format github
::error file=proto/openengine/v1/load.proto,line=54,col=3,title=OEB050::field LoadInfo.prefill_batch_size removed%0Ahint: bump
::warning file=profiles.yaml,line=220,title=OEB031::RPC added, legal with a minor bump
"""


def test_counts_come_from_the_junit_report(summary):
    counts = summary.parse_junit(JUNIT)
    assert (counts.cases, counts.passed, counts.failed, counts.errors, counts.skipped) == (5, 2, 1, 1, 1)
    assert counts.failing == ("load.get.complete", "load.watch.settings-first")


def test_annotations_are_read_back(summary):
    found = summary.parse_annotations(BREAKING)
    assert [(a.level, a.rule, a.where) for a in found] == [
        ("error", "OEB050", "proto/openengine/v1/load.proto:54"), ("warning", "OEB031", "profiles.yaml:220")]
    assert found[0].message == "field LoadInfo.prefill_batch_size removed hint: bump"


@pytest.mark.parametrize("status, text, verdict", [
    (None, "", "not run"),
    (0, "", "no breaking change"),
    (0, BREAKING.split("\n", 2)[2], "no illegal change; 1 change(s) reported"),
    (1, BREAKING, "**breaking**: 1 change(s)"),
])
def test_breaking_verdict(summary, status, text, verdict):
    assert summary.breaking_verdict(status, summary.parse_annotations(text)).startswith(verdict)


def test_the_summary_of_a_failed_run(summary, tmp_path):
    for step, status in (("check", 0), ("breaking", 1), ("test", 2), ("conformance", 1)):
        (tmp_path / f"{step}.status").write_text(f"{status}\n")
    (tmp_path / "breaking.txt").write_text(BREAKING)
    (tmp_path / "conformance.xml").write_text(JUNIT)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--base", "origin/main"],
                          capture_output=True, text=True, check=True)
    text = proc.stdout
    assert "| check | passed |" in text and "| test | **failed** (exit status 2) |" in text
    assert "| site | not run |" in text and "Not built." in text
    assert "### Breaking changes against `origin/main`" in text
    assert "| error | OEB050 | `proto/openengine/v1/load.proto:54` |" in text
    assert "5 cases: 2 passed, 1 failed, 1 errors, 1 skipped." in text
    assert "Failing: `load.get.complete`, `load.watch.settings-first`." in text


def test_the_site_link_is_shown_when_the_site_was_built(summary, tmp_path):
    (tmp_path / "site.status").write_text("0\n")
    text = summary.render(tmp_path, "main", "https://example.invalid/a/9")
    assert "[The built site](https://example.invalid/a/9)" in text


def test_an_unreadable_report_is_named(summary, tmp_path):
    (tmp_path / "conformance.status").write_text("1\n")
    (tmp_path / "conformance.xml").write_text("<testsuite")
    assert "The JUnit report conformance.xml is unreadable" in summary.render(tmp_path, "main", "")
