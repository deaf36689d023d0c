"""The pull-request job summary (Markdown for $GITHUB_STEP_SUMMARY) from what `.ci/pull-request`
left in its output folder: each step's exit status, the breaking check's annotations and the
conformance run's JUnit report.

    python .ci/pull_request_summary.py OUT [--base REF] [--site-url URL]
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

STEPS = ("check", "upstream", "breaking", "test", "conformance", "site")
ANNOTATION = re.compile(r"^::(error|warning|notice) (?P<props>[^:]*)::(?P<body>.*)$")


@dataclass(frozen=True)
class Annotation:
    level: str
    rule: str
    where: str
    message: str


@dataclass(frozen=True)
class ConformanceCounts:
    cases: int
    passed: int
    failed: int
    errors: int
    skipped: int
    failing: tuple[str, ...]


def _unescape(text: str) -> str:
    return text.replace("%0A", " ").replace("%0D", "").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def parse_annotations(text: str) -> list[Annotation]:
    found = []
    for line in text.splitlines():
        m = ANNOTATION.match(line.strip())
        if not m:
            continue
        props = dict(p.split("=", 1) for p in m["props"].split(",") if "=" in p)
        where = _unescape(props.get("file", ""))
        if props.get("line"):
            where += f":{props['line']}"
        found.append(Annotation(m[1], _unescape(props.get("title", "")), where, _unescape(m["body"])))
    return found


def parse_junit(text: str) -> ConformanceCounts:
    root = ET.fromstring(text)
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise ValueError("no <testsuite> element")
    failing = tuple(tc.get("name", "?") for tc in suite.iter("testcase")
                    if tc.find("failure") is not None or tc.find("error") is not None)
    cases, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0))
    errors, skipped = int(suite.get("errors", 0)), int(suite.get("skipped", 0))
    return ConformanceCounts(cases, cases - failed - errors - skipped, failed, errors, skipped, failing)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _status(out: Path, step: str) -> int | None:
    path = out / f"{step}.status"
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _word(status: int | None) -> str:
    return "not run" if status is None else ("passed" if status == 0 else f"**failed** (exit status {status})")


def breaking_verdict(status: int | None, annotations: list[Annotation]) -> str:
    if status is None:
        return "not run"
    errors = sum(a.level == "error" for a in annotations)
    others = len(annotations) - errors
    if status != 0:
        return (f"**breaking**: {errors} change(s) break clients or servers without the version bump "
                "that makes them legal" if errors else f"**failed** (exit status {status})")
    if others:
        return f"no illegal change; {others} change(s) reported, legal with the profile versions given"
    return "no breaking change"


def render(out: Path, base: str, site_url: str) -> str:
    lines = ["## Pull request checks", "", "| Step | Result |", "| --- | --- |"]
    statuses = {step: _status(out, step) for step in STEPS}
    lines += [f"| {step} | {_word(statuses[step])} |" for step in STEPS]

    breaking_file = out / "breaking.txt"
    annotations = parse_annotations(breaking_file.read_text(encoding="utf-8")) if breaking_file.is_file() else []
    lines += ["", f"### Breaking changes against `{base}`", "",
              f"Verdict: {breaking_verdict(statuses['breaking'], annotations)}."]
    if annotations:
        lines += ["", "| Level | Rule | Where | Change |", "| --- | --- | --- | --- |"]
        lines += [f"| {a.level} | {a.rule} | `{a.where}` | {_cell(a.message)} |" for a in annotations[:50]]
        if len(annotations) > 50:
            lines.append(f"\n… and {len(annotations) - 50} more in the step's annotations.")

    lines += ["", "### Conformance", ""]
    junit = out / "conformance.xml"
    try:
        counts = parse_junit(junit.read_text(encoding="utf-8")) if junit.is_file() else None
    except (ET.ParseError, ValueError) as err:
        counts = None
        lines.append(f"The JUnit report {junit.name} is unreadable: {err}.")
    if counts is not None:
        lines.append(f"{counts.cases} cases: {counts.passed} passed, {counts.failed} failed, "
                     f"{counts.errors} errors, {counts.skipped} skipped.")
        if counts.failing:
            lines += ["", "Failing: " + ", ".join(f"`{c}`" for c in counts.failing) + "."]
    elif not junit.is_file():
        lines.append("Not run." if statuses["conformance"] is None else
                     "No report: the suite did not get as far as writing one.")

    lines += ["", "### Site", ""]
    if statuses["site"] == 0:
        lines.append(f"[The built site]({site_url}) (artifact `site`)." if site_url else
                     "Built; no artifact was uploaded.")
    else:
        lines.append("Not built." if statuses["site"] is None else "The strict build failed: see the `site` step.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--base", default="origin/main")
    parser.add_argument("--site-url", default="")
    args = parser.parse_args(argv)
    sys.stdout.write(render(args.out, args.base, args.site_url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
