"""Case results as the finding records every command prints (`case_diagnostic`, through
`openengine.contractkit.diagnostics`), the JUnit case report, the published report document, and
the live progress display.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from importlib import metadata
from xml.etree import ElementTree as ET

from openengine.contractkit.diagnostics import Context, Diagnostic
from openengine.contractkit.rules import Severity
from openengine.contractkit.diagnostics import printable as _printable
from openengine.contractkit.diagnostics import render
from openengine.conformance.context import load_contract
from openengine.conformance.matrix import packaged_requirements, requirement_of
from openengine.conformance.runner import CaseResult, Outcome, Report
from openengine.contract import CORE, catalogue


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """`text` from the engine with every control character shown as an escape (`\\x1b`), a tab
    kept, a newline kept or shown as `\\n`."""
    out = _printable(text, keep="\t\n")
    return out if keep_newlines else out.replace("\n", "\\n")


def detail(r: CaseResult) -> str:
    """What a result says beyond its label; an expected failure names its entry either way."""
    if r.outcome is Outcome.XFAIL:
        return f"expected failure ({r.expected_reason}): {r.reason}"
    if r.outcome is Outcome.STALE:
        return f"{r.reason} (entry: {r.expected_reason})"
    return r.reason


def result_line(r: CaseResult) -> str:
    reqs = ",".join(r.requirements)
    line = f"{r.outcome.name:<5} {r.id:<44} {reqs}"
    text = detail(r)
    if text:
        line += f"\n      {printable(text)}"
    return line


def _summary_lines(report: Report) -> list[str]:
    counts = report.counts()
    out = ["  ".join(f"{k} {v}" for k, v in counts.items() if v) + f"  in {report.seconds:.1f} s"]
    cov = report.coverage
    if cov and cov.wire:
        checked = {requirement_of(cited) for cited in report.exercised()}
        exercised = len([r for r in cov.wire if r in checked])
        out.append(f"wire requirements: {len(cov.covered)}/{len(cov.wire)} have a case "
                   f"({cov.percent:.0f}%), {exercised} checked in this run")
        if cov.uncovered:
            out.append("  without a case: " + ", ".join(cov.uncovered))
    if not report.results:
        out.append("no case ran: check --profile and --case")
    out += _migration_lines(report)
    out.append(report.verdict)
    return out


def _migration_lines(report: Report) -> list[str]:
    """For an engine of upstream's layout alone: the report is a migration checklist."""
    found = report.engine.get("discovery") if report.engine else None
    if found in (None, "served"):
        return []

    optional = [f"{p.name} ({', '.join(r.full_name.removeprefix('openengine.v1.') for r in p.rpcs)})"
                for p in load_contract().values() if p.name != CORE]
    return [f"migration: {found}, so the engine serves upstream's layout without the proposal's "
            "services; each FAIL above names the requirement it breaks and what to add.",
            "  optional profiles, advertised in GetCapabilities once served: " + "; ".join(optional)]


def _engine_lines(report: Report) -> list[str]:
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
    return [printable(line) for line in out]


# Outcome -> the severity of its record: what makes the run fail is an error, what only informs
# (skipped, unchecked, an expected failure) is info, and a pass is no record at all.
_OUTCOME_SEVERITY = {Outcome.FAIL: Severity.ERROR, Outcome.ERROR: Severity.ERROR, Outcome.STALE: Severity.ERROR,
                     Outcome.SKIP: Severity.INFO, Outcome.UNCHECKED: Severity.INFO, Outcome.XFAIL: Severity.INFO}


def case_diagnostic(result: CaseResult, target: str) -> Diagnostic | None:
    """The one finding record for a case result (None for a pass), so conformance prints through
    the same named printers as every other command. The case id is the rule id; the target is
    the place. Text from the engine is kept as sent; each printer escapes what its format must."""
    severity = _OUTCOME_SEVERITY.get(result.outcome)
    if severity is None:
        return None
    details: dict = {"outcome": str(result.outcome), "requirements": list(result.requirements)}
    if result.expected_reason:
        details["expected_failure"] = result.expected_reason
    return Diagnostic(target, 0, 0, result.id, severity, f"{result.outcome.name} {result.title}: {detail(result)}",
                      "", details)


def report_diagnostics(report: Report) -> list[Diagnostic]:
    """The records of a report, in the order the cases ran."""
    return [d for d in (case_diagnostic(r, report.target) for r in report.results) if d is not None]


def sarif_location(d: Diagnostic) -> dict:
    """Where a code-scanning tool shows a case's finding: the spec requirement the case checks
    (its page and line, from the packaged index), and the case against the engine as a logical
    location. The engine's address is no file."""
    location: dict = {"logicalLocations": [{"name": d.rule_id, "fullyQualifiedName": f"{d.path}/{d.rule_id}"}]}
    written = {r.id: r for r in packaged_requirements()}
    cited = [written[requirement_of(rid)] for rid in d.details.get("requirements", ())
             if requirement_of(rid) in written]
    if cited:
        physical: dict = {"artifactLocation": {"uri": f"spec/{cited[0].page}"}}
        if cited[0].line:
            physical["region"] = {"startLine": cited[0].line}
        location["physicalLocation"] = physical
    return location


def render_report(fmt: str, report: Report, context: Context | None = None) -> str:
    """The report in any of the shared formats; `context` (a command's own) is merged in. JSON is
    the published report document (`report_document`, what `--report FILE` writes) and JUnit the
    full case report (`render_junit`, what `--junit FILE` writes)."""
    if fmt == "json":
        return json.dumps(report_document(report), indent=2) + "\n"
    if fmt == "junit":
        return render_junit(report)
    own = replace(context or Context(tool="oespec conformance"), trailer=tuple(_summary_lines(report)),
                  preamble=tuple(_engine_lines(report)) + ("",), sarif_location=sarif_location)
    return render(fmt, report_diagnostics(report), own)


def render_text(report: Report) -> str:
    return render_report("text", report)


def render_json(report: Report) -> str:
    return render_report("json", report)


def render_junit(report: Report) -> str:
    """JUnit XML valid against the common schema (Jenkins xunit `junit-10.xsd`): requirements go
    in each testcase's system-out (a testcase has no properties there), every text is escaped
    of control characters, and unchecked or expected failures are `skipped` with the reason."""
    counts = report.counts()
    suite = ET.Element("testsuite", {
        "name": "openengine-conformance", "tests": str(len(report.results)),
        "failures": str(counts["fail"] + counts["stale"]), "errors": str(counts["error"]),
        "skipped": str(counts["skip"] + counts["xfail"] + counts["unchecked"]),
        "time": f"{report.seconds:.3f}"})
    props = ET.SubElement(suite, "properties")
    for name, value in (("target", report.target), ("profiles", ",".join(report.advertised)),
                        ("verdict", report.verdict)):
        ET.SubElement(props, "property", {"name": name, "value": printable(value)})
    for r in report.results:
        tc = ET.SubElement(suite, "testcase", {"classname": r.profile, "name": r.id,
                                               "time": f"{r.seconds:.3f}"})
        message = printable(detail(r))
        if r.outcome in (Outcome.SKIP, Outcome.UNCHECKED, Outcome.XFAIL):
            label = "unchecked: " if r.outcome is Outcome.UNCHECKED else ""
            ET.SubElement(tc, "skipped", {"message": label + message})
        elif r.outcome is Outcome.ERROR:
            ET.SubElement(tc, "error", {"message": message}).text = printable(r.reason, keep_newlines=True)
        elif r.outcome in (Outcome.FAIL, Outcome.STALE):
            kind = "stale-expected-failure" if r.outcome is Outcome.STALE else "requirement-broken"
            ET.SubElement(tc, "failure", {"message": message, "type": kind}).text = \
                printable(r.reason, keep_newlines=True)
        ET.SubElement(tc, "system-out").text = f"requirements: {', '.join(r.requirements)}"
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


# The published report's format: a new field is an addition within a version; a field renamed,
# removed or given another meaning makes the next version.
REPORT_KIND = "openengine-conformance-report"
REPORT_VERSION = 1
REPORT_SCHEMA = "https://openengine.dev/schemas/conformance_report.schema.json"


def report_document(report: Report) -> dict:
    """The report to publish (`--report FILE`): who was judged, against which contract, by which
    runner and when, what it advertised, and the outcome and reason of every case; versioned, and
    described by schemas/conformance_report.schema.json."""
    contract, engine = catalogue(), report.engine or {}
    try:
        version = metadata.version("openengine-profiles")
    except metadata.PackageNotFoundError:     # run from a tree that is not installed
        version = "unknown"
    return {
        "$schema": REPORT_SCHEMA,
        "kind": REPORT_KIND,
        "version": REPORT_VERSION,
        "date": report.started_at,
        "target": report.target,
        "implementation": {key: engine.get(key, default) for key, default in (
            ("engine_name", ""), ("engine_version", ""), ("instance_id", ""), ("role", ""), ("schema_revision", 0),
            ("schema_release", ""), ("capability_revision", 0), ("discovery", "not read"))},
        "contract": {"schema_revision": contract.schema_revision,
                     "minimum_client_revision": contract.minimum_client_revision,
                     "schema_release": contract.schema_release,
                     "registry_revision": contract.registry_revision},
        "runner": {"name": "oespec conformance", "version": version},
        "profiles": {"advertised": list(engine.get("profiles", [])), "forced": list(report.forced)},
        "verdict": {"conforms": report.ok, "text": report.verdict, "counts": report.counts(),
                    "unchecked_requirements": report.unchecked_requirements()},
        "results": [{"case": r.id, "profile": r.profile, "requirements": list(r.requirements),
                     "title": r.title, "outcome": str(r.outcome), "reason": r.reason,
                     "seconds": round(r.seconds, 3),
                     **({"expected_failure": r.expected_reason} if r.expected_reason else {})}
                    for r in report.results],
    }


class Progress:
    """On a terminal: one line that updates in place. Otherwise: one plain line per case."""

    def __init__(self, stream=None, *, live: bool | None = None):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.counts: dict[Outcome, int] = {}

    def __call__(self, case_id: str, done: int, total: int, result: CaseResult | None) -> None:
        if result is not None:
            self.counts[result.outcome] = self.counts.get(result.outcome, 0) + 1
        if self.live:
            tally = " ".join(f"{o} {n}" for o, n in self.counts.items())
            state = "running" if result is None else "done"
            text = f"[{done}/{total}] {tally}  {state} {case_id}"
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + text[:width].ljust(width))
            if result is not None and result.outcome.bad:
                self.stream.write("\r" + " " * width + "\r" + result_line(result) + "\n")
            self.stream.flush()
        elif result is not None:
            self.stream.write(result_line(result) + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self.live:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + " " * width + "\r")
            self.stream.flush()
