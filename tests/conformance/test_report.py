"""Renderers and the progress display, on a made-up report."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

from openengine.conformance import (
    CaseResult, Outcome, Progress, Report, render_json, render_junit, render_text,
)


def _report():
    results = [CaseResult(f"x.case-{o.value}", "openengine.core", ("REQ-CORE-001",), "t", o,
                          reason="" if o is Outcome.PASS else f"because {o.value}",
                          expected_reason="known" if o in (Outcome.XFAIL, Outcome.STALE) else "")
               for o in Outcome]
    return Report("127.0.0.1:1", {}, ["openengine.core"], results, None, 1.0)


def test_text_json_and_junit_agree_on_outcomes():
    report = _report()
    text = render_text(report)
    assert "DOES NOT CONFORM" in text and "x.case-stale" in text
    data = json.loads(render_json(report))
    assert data["counts"] == {o.value: 1 for o in Outcome} and data["ok"] is False
    suite = ET.fromstring(render_junit(report))
    assert suite.get("failures") == "2" and suite.get("errors") == "1" and suite.get("skipped") == "2"
    kinds = {tc.get("name"): [c.tag for c in tc if c.tag != "properties"] for tc in suite}
    assert kinds["x.case-xfail"] == ["skipped"] and kinds["x.case-stale"] == ["failure"]
    assert report.exit_code == 1


def test_progress_is_one_updating_line_on_a_terminal_and_plain_lines_otherwise():
    report = _report()
    live, plain = io.StringIO(), io.StringIO()
    for stream, is_tty in ((live, True), (plain, False)):
        p = Progress(stream, live=is_tty)
        for i, r in enumerate(report.results):
            p(r.id, i, len(report.results), None)
            p(r.id, i + 1, len(report.results), r)
        p.finish()
    assert "\r" in live.getvalue()
    assert "\r" not in plain.getvalue()
    assert len(plain.getvalue().splitlines()) >= len(report.results)
