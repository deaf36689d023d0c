"""Renderers and the progress display, on a made-up report."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from openengine.conformance import (
    CaseResult, Outcome, Progress, Report, render_json, render_junit, render_text,
)
from openengine.conformance.runner import apply_expected

XSD = Path(__file__).resolve().parents[1] / "data" / "junit-10.xsd"
HOSTILE_TEXT = "engine said \x1b[2J\x1b[31mred\x07 \x00nul \x0bvt \x7fdel \x9bcsi\nnext line \ufffe"


def _report(reason_text: str = ""):
    results = [CaseResult(f"x.case-{o.value}", "openengine.core", ("REQ-CORE-001",), "t", o,
                          reason="" if o is Outcome.PASS else f"because {o.value}{reason_text}",
                          expected_reason="known" if o in (Outcome.XFAIL, Outcome.STALE) else "")
               for o in Outcome]
    return Report("127.0.0.1:1", {"engine_name": "bad\x1b]0;title\x07name"}, ["openengine.core"],
                  results, None, 1.0)


def test_text_json_and_junit_agree_on_outcomes():
    report = _report()
    text = render_text(report)
    assert "DOES NOT CONFORM" in text and "x.case-stale" in text
    data = json.loads(render_json(report))
    assert data["verdict"]["counts"] == {o.value: 1 for o in Outcome} and data["verdict"]["conforms"] is False
    assert data["verdict"]["text"].startswith("DOES NOT CONFORM")
    suite = ET.fromstring(render_junit(report))
    assert suite.get("failures") == "2" and suite.get("errors") == "1" and suite.get("skipped") == "3"
    kinds = {tc.get("name"): [c.tag for c in tc if c.tag != "system-out"]
             for tc in suite.iter("testcase")}
    assert kinds["x.case-xfail"] == ["skipped"] and kinds["x.case-stale"] == ["failure"]
    assert kinds["x.case-unchecked"] == ["skipped"] and kinds["x.case-pass"] == []
    assert report.exit_code == 1


def _validate(xml_text: str) -> None:
    from lxml import etree

    schema = etree.XMLSchema(etree.parse(str(XSD)))
    doc = etree.fromstring(xml_text.encode("utf-8"))
    schema.assertValid(doc)


def test_junit_is_valid_against_the_common_schema():
    _validate(render_junit(_report()))


def test_the_schema_rejects_properties_inside_a_testcase():
    """The shape the report used to have must not pass, or the schema test above proves nothing."""
    from lxml import etree

    bad = ('<testsuite name="s" tests="1"><testcase name="c"><properties><property name="a" '
           'value="b"/></properties></testcase></testsuite>')
    with pytest.raises(etree.DocumentInvalid):
        _validate(bad)


def test_junit_is_well_formed_whatever_the_engine_sent():
    xml_text = render_junit(_report(HOSTILE_TEXT))
    suite = ET.fromstring(xml_text)          # raises on a control character
    _validate(xml_text)
    failure = next(tc for tc in suite.iter("testcase") if tc.get("name") == "x.case-fail").find("failure")
    assert "\\x1b[2J" in failure.get("message") and "\x1b" not in xml_text


def test_text_output_escapes_control_characters():
    text = render_text(_report(HOSTILE_TEXT))
    for raw in ("\x1b", "\x07", "\x00", "\x0b", "\x7f", "\x9b"):
        assert raw not in text
    assert "\\x1b[31mred\\x07" in text and "bad\\x1b]0;title\\x07name" in text


def test_verdict_counts_unchecked_requirements():
    def result(case_id, outcome, reqs):
        return CaseResult(case_id, "openengine.core", reqs, "t", outcome, reason="why")

    only_unchecked = Report("t:1", {}, [], [result("a.b", Outcome.PASS, ("REQ-CORE-001",)),
                                            result("a.c", Outcome.UNCHECKED, ("REQ-CORE-002", "REQ-CORE-001"))],
                            None)
    assert only_unchecked.ok and only_unchecked.exit_code == 0
    assert only_unchecked.unchecked_requirements() == ["REQ-CORE-002"]
    assert only_unchecked.verdict == "CONFORMS, 1 requirement unchecked: REQ-CORE-002"
    assert render_text(only_unchecked).rstrip().endswith("REQ-CORE-002")
    two = Report("t:1", {}, [], [result("a.c", Outcome.UNCHECKED, ("REQ-CORE-002", "REQ-CORE-001"))], None)
    assert two.verdict == "CONFORMS, 2 requirements unchecked: REQ-CORE-001, REQ-CORE-002"
    clean = Report("t:1", {}, [], [result("a.b", Outcome.PASS, ("REQ-CORE-001",))], None)
    assert clean.verdict == "CONFORMS"


def test_expected_failures_read_the_same_case_by_case_and_in_the_summary():
    results = [apply_expected(CaseResult("x.fails", "p", ("REQ-CORE-001",), "t", Outcome.FAIL, "broke"),
                              {"x.fails": "known bug", "x.passes": "was broken"}),
               apply_expected(CaseResult("x.passes", "p", ("REQ-CORE-001",), "t", Outcome.PASS),
                              {"x.fails": "known bug", "x.passes": "was broken"})]
    assert [r.outcome for r in results] == [Outcome.XFAIL, Outcome.STALE]
    plain = io.StringIO()
    progress = Progress(plain, live=False)
    for i, r in enumerate(results):
        progress(r.id, i + 1, 2, r)
    lines = plain.getvalue()
    assert "XFAIL x.fails" in lines and "expected failure (known bug): broke" in lines
    assert "STALE x.passes" in lines and "remove the entry" in lines
    assert "FAIL  x.fails" not in lines and "PASS  x.passes" not in lines
    summary = render_text(Report("t:1", {}, [], results, None))
    assert "error x.passes: STALE" in summary and "remove the entry" in summary
    assert "DOES NOT CONFORM: 1 case(s) x.passes" in summary


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


@pytest.mark.prints_traceback
def test_a_task_exception_nobody_retrieved_counts_as_a_traceback(caplog):
    """The check every conformance test ends with (tests/conformance/conftest.py) sees the
    "Task exception was never retrieved" report asyncio prints when such a task is collected."""
    import asyncio
    import gc

    from tests.conformance.conftest import tracebacks

    async def fails():
        raise RuntimeError("nobody reads this")

    async def leave_it():
        task = asyncio.ensure_future(fails())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        del task

    asyncio.run(leave_it())
    gc.collect()
    assert any("never retrieved" in line for line in tracebacks(caplog.records))
    caplog.clear()


def test_together_cancels_the_rest_and_leaves_no_exception_unread(caplog):
    import asyncio
    import gc

    from openengine.conformance.context import together
    from tests.conformance.conftest import tracebacks

    finished = []

    async def fails_soon():
        await asyncio.sleep(0.01)
        raise ValueError("first")

    async def fails_later():
        await asyncio.sleep(0.02)
        raise ValueError("second")

    async def runs_long():
        try:
            await asyncio.sleep(30)
        finally:
            finished.append("cancelled")

    async def main():
        try:
            await together(fails_soon(), fails_later(), runs_long())
        except ValueError as err:
            return str(err)

    assert asyncio.run(main()) == "first"
    gc.collect()
    assert finished == ["cancelled"] and not tracebacks(caplog.records)


def test_the_published_report_names_what_was_judged_and_round_trips_through_its_schema(tmp_path):
    """`--report FILE` against an engine of upstream's layout: the implementation from its
    ServerInfo, this contract's revision, the runner and date, the advertised profiles (none
    without Discovery), every case's outcome and reason; valid against its JSON Schema, and read
    back as the same document."""
    import datetime

    import jsonschema

    from oespec.cli import run
    from openengine.contract import catalogue

    from tests.conformance.otherengine import OtherEngine

    out = tmp_path / "report.json"
    with OtherEngine(upstream_only=True) as engine:
        code = run(["conformance", "--target", engine.address, "--case", "core.generate.stream",
                    "--case", "core.discovery.answers", "--report", str(out), "--format", "json"])
    assert code == 1
    doc = json.loads(out.read_text(encoding="utf-8"))
    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" /
                         "conformance_report.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(doc)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["version"] == 1 and doc["kind"] == "openengine-conformance-report"
    assert doc["implementation"]["engine_name"] == "otherengine" and doc["implementation"]["engine_version"] == "0.1"
    assert "UNIMPLEMENTED" in doc["implementation"]["discovery"]
    assert doc["contract"]["schema_revision"] == catalogue().schema_revision
    assert doc["runner"]["version"]
    assert datetime.datetime.fromisoformat(doc["date"]).tzinfo is not None
    assert doc["profiles"]["advertised"] == []
    outcomes = {r["case"]: r for r in doc["results"]}
    assert outcomes["core.generate.stream"]["outcome"] == "pass"
    assert outcomes["core.discovery.answers"]["outcome"] == "fail"
    assert "add the Discovery service" in outcomes["core.discovery.answers"]["reason"]
    assert doc["verdict"]["conforms"] is False
    # A result the schema does not describe is refused, so the schema is not vacuous.
    doc["results"][0]["outcome"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(doc)
