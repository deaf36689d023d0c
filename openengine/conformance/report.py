"""Report renderers (text, JSON, JUnit XML) and the live progress display."""

from __future__ import annotations

import json
import shutil
import sys
from xml.etree import ElementTree as ET

from openengine.conformance.runner import CaseResult, Outcome, Report

LABELS = {Outcome.PASS: "PASS", Outcome.FAIL: "FAIL", Outcome.SKIP: "SKIP", Outcome.ERROR: "ERROR",
          Outcome.XFAIL: "XFAIL", Outcome.STALE: "STALE"}


def result_line(r: CaseResult) -> str:
    reqs = ",".join(r.requirements)
    line = f"{LABELS[r.outcome]:<5} {r.id:<44} {reqs}"
    detail = r.reason
    if r.outcome is Outcome.XFAIL:
        detail = f"expected failure ({r.expected_reason}): {r.reason}"
    if detail:
        line += f"\n      {detail}"
    return line


def render_text(report: Report, *, include_results: bool = True) -> str:
    out = []
    e = report.engine
    if e:
        out.append(f"engine   {e.get('engine_name') or '?'} {e.get('engine_version') or ''} at "
                   f"{report.target}, role {e.get('role')}, instance {e.get('instance_id')!r}, "
                   f"revision {e.get('capability_revision')}")
    else:
        out.append(f"engine   at {report.target}: not discovered")
    if report.discovery_error:
        out.append(f"discovery failed: {report.discovery_error}")
    out.append("profiles " + (", ".join(report.advertised) or "(none)")
               + (f"; forced: {', '.join(report.forced)}" if report.forced else ""))
    out.append("")
    if include_results:
        out.extend(result_line(r) for r in report.results)
        out.append("")
    counts = report.counts()
    out.append("  ".join(f"{k} {v}" for k, v in counts.items() if v) + f"  in {report.seconds:.1f} s")
    cov = report.coverage
    if cov and cov.wire:
        exercised = len([r for r in cov.wire if r in report.exercised()])
        out.append(f"wire requirements: {len(cov.covered)}/{len(cov.wire)} have a case "
                   f"({cov.percent:.0f}%), {exercised} checked in this run")
        if cov.uncovered:
            out.append("  without a case: " + ", ".join(cov.uncovered))
    bad = [r for r in report.results if r.outcome.bad]
    if not report.results:
        out.append("no case ran: check --profile and --case")
    out.append("CONFORMS" if report.ok else
               f"DOES NOT CONFORM: {len(bad)} case(s) " + ", ".join(r.id for r in bad))
    return "\n".join(out) + "\n"


def render_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2, sort_keys=False) + "\n"


def render_junit(report: Report) -> str:
    counts = report.counts()
    suite = ET.Element("testsuite", {
        "name": "openengine-conformance", "tests": str(len(report.results)),
        "failures": str(counts["fail"] + counts["stale"]), "errors": str(counts["error"]),
        "skipped": str(counts["skip"] + counts["xfail"]), "time": f"{report.seconds:.3f}"})
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", {"name": "target", "value": report.target})
    ET.SubElement(props, "property", {"name": "profiles", "value": ",".join(report.advertised)})
    for r in report.results:
        tc = ET.SubElement(suite, "testcase", {"classname": r.profile, "name": r.id,
                                               "time": f"{r.seconds:.3f}"})
        ET.SubElement(tc, "properties").append(
            ET.Element("property", {"name": "requirements", "value": ",".join(r.requirements)}))
        if r.outcome is Outcome.FAIL:
            ET.SubElement(tc, "failure", {"message": r.reason}).text = r.reason
        elif r.outcome is Outcome.STALE:
            ET.SubElement(tc, "failure", {"message": r.reason, "type": "stale-expected-failure"})
        elif r.outcome is Outcome.ERROR:
            ET.SubElement(tc, "error", {"message": r.reason}).text = r.reason
        elif r.outcome is Outcome.SKIP:
            ET.SubElement(tc, "skipped", {"message": r.reason})
        elif r.outcome is Outcome.XFAIL:
            ET.SubElement(tc, "skipped", {"message": f"expected failure ({r.expected_reason}): "
                                                     f"{r.reason}", "type": "xfail"})
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


class Progress:
    """On a terminal: one line that updates in place. Otherwise: one plain line per case."""

    def __init__(self, stream=None, *, live: bool | None = None, echo: bool = True):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.echo = echo
        self.counts: dict[Outcome, int] = {}

    def __call__(self, case_id: str, done: int, total: int, result: CaseResult | None) -> None:
        if result is not None:
            self.counts[result.outcome] = self.counts.get(result.outcome, 0) + 1
        if self.live:
            tally = " ".join(f"{LABELS[o].lower()} {n}" for o, n in self.counts.items())
            state = "running" if result is None else "done"
            text = f"[{done}/{total}] {tally}  {state} {case_id}"
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + text[:width].ljust(width))
            if result is not None and result.outcome.bad:
                self.stream.write("\r" + " " * width + "\r" + result_line(result) + "\n")
            self.stream.flush()
        elif self.echo and result is not None:
            self.stream.write(result_line(result) + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self.live:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + " " * width + "\r")
            self.stream.flush()
