"""One diagnostic record for every finding of the toolkit, and the printers that render it.

`oespec check`, `validate`, `breaking`, `generate --check`, `spec` and (through an adapter from a
case result) `conformance` all produce `Diagnostic` records; a printer chosen by name (`text`,
`json`, `github`, `junit`) turns a list of them into output. Keeping one record means a CI
annotation, a terminal line, a JUnit report and a JSON report can never disagree. It sits in the
lower layer so the runtime (the conformance runner) and the toolkit share it.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Callable, Iterable

from contractkit.locations import NOWHERE, Loc  # noqa: F401  (every stage imports them from here)
from contractkit.rules import Severity  # noqa: F401  (the one severity of every family)




@dataclass(frozen=True)
class Diagnostic:
    """A finding: where it is, which rule found it, how bad it is, and how to fix it."""

    path: str
    line: int
    column: int
    rule_id: str
    severity: Severity
    message: str
    hint: str = ""
    # Extra structured facts (a baseline location, who a break affects, the bump needed, ...).
    details: dict = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def at(cls, path: str, loc: Loc, rule_id: str, severity: Severity, message: str,
           hint: str = "", **details) -> "Diagnostic":
        return cls(path, loc.line, loc.column, rule_id, severity, message, hint, details)

    def sort_key(self):
        return (self.path, self.line, self.column, self.rule_id, self.message)

    def as_dict(self) -> dict:
        out = {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "rule_id": self.rule_id,
            "severity": str(self.severity),
            "message": self.message,
            "hint": self.hint,
        }
        if self.details:
            out["details"] = self.details
        return out


def sorted_diagnostics(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    return sorted(diags, key=Diagnostic.sort_key)


def _position(d: Diagnostic) -> str:
    if d.line:
        return f"{d.path}:{d.line}:{d.column}"
    return d.path


def render_text(diags: list[Diagnostic]) -> str:
    lines = []
    for d in diags:
        lines.append(f"{_position(d)}: {d.severity} {d.rule_id}: {d.message}")
        if d.hint:
            lines.append(f"    hint: {d.hint}")
        for key, value in d.details.items():
            lines.append(f"    {key}: {value}")
    counts = {s: sum(1 for d in diags if d.severity == s) for s in Severity}
    summary = ", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}"
                        for s in (Severity.ERROR, Severity.WARNING, Severity.INFO))
    lines.append(f"{len(diags)} finding{'s' if len(diags) != 1 else ''} ({summary})")
    return "\n".join(lines) + "\n"


def render_json(diags: list[Diagnostic]) -> str:
    return json.dumps({"diagnostics": [d.as_dict() for d in diags]}, indent=2, sort_keys=False) + "\n"


def _github_escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _github_escape_property(text: str) -> str:
    return _github_escape_data(text).replace(":", "%3A").replace(",", "%2C")


_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render_github(diags: list[Diagnostic]) -> str:
    """GitHub Actions workflow commands: each finding becomes an annotation on the pull request diff."""
    lines = []
    for d in diags:
        props = [f"file={_github_escape_property(d.path)}"]
        if d.line:
            props += [f"line={d.line}", f"col={d.column}"]
        props.append(f"title={_github_escape_property(d.rule_id)}")
        body = d.message + (f" (hint: {d.hint})" if d.hint else "")
        lines.append(f"::{_GITHUB_LEVEL[d.severity]} {','.join(props)}::{_github_escape_data(body)}")
    return "\n".join(lines) + ("\n" if lines else "")


# XML 1.0 cannot carry most control characters, not even escaped; a finding quoting hostile input
# (an engine's reply, a corrupt file) must still give a well-formed report.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_text(text: str) -> str:
    return _XML_ILLEGAL.sub("\ufffd", str(text))


def render_junit(diags: list[Diagnostic], *, suite: str = "oespec") -> str:
    """JUnit XML valid against the Jenkins xunit schema (junit-10.xsd): one testcase per finding,
    named by rule and place. Errors and warnings are failures (their `type` is the severity),
    infos pass with the message as output, so a CI test view shows exactly what `--fail-on
    warning` would fail. No findings: one passing testcase, so the report is never empty."""
    failing = [d for d in diags if d.severity >= Severity.WARNING]
    root = ET.Element("testsuite", {"name": suite, "tests": str(max(1, len(diags))),
                                    "failures": str(len(failing)), "errors": "0", "skipped": "0", "time": "0"})
    for d in diags:
        tc = ET.SubElement(root, "testcase", {"classname": xml_text(d.rule_id),
                                              "name": xml_text(f"{d.rule_id} {_position(d)}"), "time": "0"})
        body = d.message + (f"\nhint: {d.hint}" if d.hint else "") + \
            "".join(f"\n{key}: {value}" for key, value in d.details.items())
        if d.severity >= Severity.WARNING:
            ET.SubElement(tc, "failure", {"message": xml_text(d.message), "type": str(d.severity)}).text = \
                xml_text(f"{_position(d)}: {body}")
        else:
            ET.SubElement(tc, "system-out").text = xml_text(f"{_position(d)}: {str(d.severity)}: {body}")
    if not diags:
        ET.SubElement(root, "testcase", {"classname": suite, "name": "no findings", "time": "0"})
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


PRINTERS: dict[str, Callable[[list[Diagnostic]], str]] = {
    "text": render_text,
    "json": render_json,
    "github": render_github,
    "junit": render_junit,
}


def exit_code(diags: Iterable[Diagnostic], fail_on: Severity = Severity.ERROR) -> int:
    """0 when nothing reaches `fail_on`, 1 otherwise (2 is reserved for unusable input)."""
    return 1 if any(d.severity >= fail_on for d in diags) else 0
