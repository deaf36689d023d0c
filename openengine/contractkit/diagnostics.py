"""One diagnostic record for every finding, and the printers (`text`, `json`, `github`, `junit`,
`sarif`) that render a list of them, so a terminal line, a CI annotation and a report never
disagree. What a command says around its findings travels in one `Context`. It sits in the lower
layer so the conformance runner and the toolkit share it.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import quote

from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import RuleSpec, Severity


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
        out = {"path": self.path, "line": self.line, "column": self.column, "rule_id": self.rule_id,
               "severity": str(self.severity), "message": self.message, "hint": self.hint}
        if self.details:
            out["details"] = self.details
        return out


def sorted_diagnostics(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    return sorted(diags, key=Diagnostic.sort_key)


@dataclass(frozen=True)
class Context:
    """What a command says around its findings. Every field is optional: a printer uses the ones
    its format can carry and ignores the rest."""

    tool: str = "oespec"
    version: str = ""
    # The catalogue entry of an emitted id (SARIF describes the rules a run used from it).
    describe: Callable[[str], RuleSpec | None] | None = None
    preamble: tuple[str, ...] = ()             # text: lines before the findings
    trailer: tuple[str, ...] = ()              # text: lines after the count of findings
    facts: Mapping[str, Any] = field(default_factory=dict)   # json: more top-level keys
    properties: tuple[tuple[str, str], ...] = ()             # junit: suite properties
    passed: tuple[str, ...] = ()               # junit: checks that ran and found nothing
    suite: str = "oespec"                      # junit: the suite's name
    information_uri: str = ""                  # sarif: where the tool is documented
    # sarif: the location of a finding whose path is no file (a conformance case's requirement
    # in the spec, or a logical location); None keeps the finding's own path and line.
    sarif_location: Callable[[Diagnostic], dict | None] | None = None


NO_CONTEXT = Context()


# C0 and C1 control characters (DEL included), and the code points XML 1.0 cannot carry.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def printable(text: str, *, keep: str = "") -> str:
    """`text` with every control character but those in `keep` shown as an escape (`\\x1b`), so a
    finding that quotes hostile input (an engine's reply, a corrupt file) never runs an ESC
    sequence on a terminal and keeps an XML report well-formed."""
    def escape(m: re.Match) -> str:
        char = m.group()
        if char in keep:
            return char
        return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"

    return _CONTROL.sub(escape, str(text))


def _detail_text(value: Any) -> str:
    """A detail as text: a list reads as its items joined by commas."""
    return ", ".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def _sarif_property(value: Any) -> Any:
    """A detail as a SARIF property: scalars and lists of scalars as they are, the rest as text."""
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return list(value)
    return str(value)


def _position(d: Diagnostic) -> str:
    if d.line:
        return f"{d.path}:{d.line}:{d.column}"
    return d.path


def render_text(diags: list[Diagnostic], context: Context = NO_CONTEXT) -> str:
    lines = [printable(line) for line in context.preamble]
    for d in diags:
        lines.append(printable(f"{_position(d)}: {d.severity} {d.rule_id}: {d.message}", keep="\n"))
        if d.hint:
            lines.append(printable(f"    hint: {d.hint}", keep="\n"))
        for key, value in d.details.items():
            lines.append(printable(f"    {key}: {_detail_text(value)}", keep="\n"))
    counts = {s: sum(1 for d in diags if d.severity == s) for s in Severity}
    summary = ", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}"
                        for s in (Severity.ERROR, Severity.WARNING, Severity.INFO))
    lines.append(f"{len(diags)} finding{'s' if len(diags) != 1 else ''} ({summary})")
    lines += [printable(line) for line in context.trailer]
    return "\n".join(lines) + "\n"


def render_json(diags: list[Diagnostic], context: Context = NO_CONTEXT) -> str:
    """`{"diagnostics": [...]}`, plus the command's own facts as further top-level keys."""
    doc = {"diagnostics": [d.as_dict() for d in diags]}
    doc.update((key, value) for key, value in context.facts.items() if key != "diagnostics")
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def _github_escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _github_escape_property(text: str) -> str:
    return _github_escape_data(text).replace(":", "%3A").replace(",", "%2C")


_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render_github(diags: list[Diagnostic], context: Context = NO_CONTEXT) -> str:
    """GitHub Actions workflow commands: each finding becomes an annotation on the pull request diff."""
    lines = []
    for d in diags:
        props = [f"file={_github_escape_property(printable(d.path))}"]
        if d.line:
            props += [f"line={d.line}", f"col={d.column}"]
        props.append(f"title={_github_escape_property(printable(d.rule_id))}")
        body = printable(d.message + (f" (hint: {d.hint})" if d.hint else ""), keep="\r\n")
        lines.append(f"::{_GITHUB_LEVEL[d.severity]} {','.join(props)}::{_github_escape_data(body)}")
    return "\n".join(lines) + ("\n" if lines else "")


# XML 1.0 cannot carry most control characters, not even escaped; a finding quoting hostile input
# (an engine's reply, a corrupt file) must still give a well-formed report.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_text(text: str) -> str:
    return _XML_ILLEGAL.sub("\ufffd", str(text))


def render_junit(diags: list[Diagnostic], context: Context = NO_CONTEXT) -> str:
    """JUnit XML valid against the Jenkins xunit schema (junit-10.xsd): one testcase per finding,
    named by rule and place. Errors and warnings are failures (their `type` is the severity),
    infos pass with the message as output, so a CI test view shows exactly what `--fail-on
    warning` would fail; each check the context names as passed is a passing testcase. Nothing
    at all: one passing testcase, so the report is never empty."""
    suite = context.suite
    failing = [d for d in diags if d.severity >= Severity.WARNING]
    tests = len(diags) + len(context.passed)
    root = ET.Element("testsuite", {"name": xml_text(suite), "tests": str(max(1, tests)),
                                    "failures": str(len(failing)), "errors": "0", "skipped": "0", "time": "0"})
    if context.properties:
        props = ET.SubElement(root, "properties")
        for name, value in context.properties:
            ET.SubElement(props, "property", {"name": xml_text(name), "value": xml_text(value)})
    for d in diags:
        tc = ET.SubElement(root, "testcase", {"classname": xml_text(d.rule_id),
                                              "name": xml_text(f"{d.rule_id} {_position(d)}"), "time": "0"})
        body = d.message + (f"\nhint: {d.hint}" if d.hint else "") + \
            "".join(f"\n{key}: {_detail_text(value)}" for key, value in d.details.items())
        if d.severity >= Severity.WARNING:
            ET.SubElement(tc, "failure", {"message": xml_text(d.message), "type": str(d.severity)}).text = \
                xml_text(f"{_position(d)}: {body}")
        else:
            ET.SubElement(tc, "system-out").text = xml_text(f"{_position(d)}: {str(d.severity)}: {body}")
    for name in context.passed:
        ET.SubElement(root, "testcase", {"classname": xml_text(suite), "name": xml_text(name), "time": "0"})
    if not tests:
        ET.SubElement(root, "testcase", {"classname": xml_text(suite), "name": "no findings", "time": "0"})
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
# An absolute URI starts with a scheme (RFC 3986); anything else is a path relative to the run.
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[^0-9]")


def _sarif_uri(path: str) -> str:
    if _URI_SCHEME.match(path) and not re.match(r"^[A-Za-z]:[\\/]", path):
        return path
    if path.startswith("/"):
        return "file://" + quote(path)
    return quote(path.replace("\\", "/"))


def _sarif_rule(rule_id: str, spec: RuleSpec | None) -> dict:
    """A reportingDescriptor: the catalogue's entry for the id, or the bare id when it has none."""
    if spec is None:
        return {"id": rule_id}
    rule: dict[str, Any] = {"id": rule_id, "name": spec.name, "shortDescription": {"text": spec.purpose}}
    if spec.severity is not None:
        rule["defaultConfiguration"] = {"level": _SARIF_LEVEL[spec.severity]}
    props: dict[str, Any] = {"family": spec.family, "category": spec.category}
    if spec.bump:
        props["bump"] = spec.bump
    if spec.requirements:
        props["requirements"] = list(spec.requirements)
    rule["properties"] = props
    return rule


def render_sarif(diags: list[Diagnostic], context: Context = NO_CONTEXT) -> str:
    """A SARIF 2.1.0 log with one run: the tool, the rules the findings name (described from the
    catalogue), and one result per finding with its level, message and location (the region
    only when the line is known)."""
    describe = context.describe or (lambda rule_id: None)
    index: dict[str, int] = {}
    rules: list[dict] = []
    results: list[dict] = []
    for d in diags:
        if d.rule_id not in index:
            index[d.rule_id] = len(rules)
            rules.append(_sarif_rule(d.rule_id, describe(d.rule_id)))
        text = d.message + (f" (hint: {d.hint})" if d.hint else "")
        result: dict[str, Any] = {"ruleId": d.rule_id, "ruleIndex": index[d.rule_id],
                                  "level": _SARIF_LEVEL[d.severity], "message": {"text": printable(text, keep="\n")}}
        located = context.sarif_location(d) if context.sarif_location is not None else None
        if located is not None:
            result["locations"] = [located]
        elif d.path:
            physical: dict[str, Any] = {"artifactLocation": {"uri": _sarif_uri(d.path)}}
            if d.line:
                physical["region"] = {"startLine": d.line, "startColumn": max(1, d.column)}
            result["locations"] = [{"physicalLocation": physical}]
        if d.details:
            result["properties"] = {key: _sarif_property(value) for key, value in d.details.items()}
        results.append(result)
    driver: dict[str, Any] = {"name": context.tool}
    if context.version:
        driver["version"] = context.version
    if context.information_uri:
        driver["informationUri"] = context.information_uri
    driver["rules"] = rules
    log = {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION,
           "runs": [{"tool": {"driver": driver}, "results": results}]}
    return json.dumps(log, indent=2) + "\n"


PRINTERS: dict[str, Callable[..., str]] = {"text": render_text, "json": render_json, "github": render_github,
                                           "junit": render_junit, "sarif": render_sarif}


def render(fmt: str, diags: list[Diagnostic], context: Context = NO_CONTEXT) -> str:
    """`diags` printed by the printer called `fmt`; ValueError naming the printers otherwise."""
    try:
        printer = PRINTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; use one of: {', '.join(PRINTERS)}") from None
    return printer(diags, context)


def exit_code(diags: Iterable[Diagnostic], fail_on: Severity = Severity.ERROR) -> int:
    """0 when nothing reaches `fail_on`, 1 otherwise (2 is reserved for unusable input)."""
    return 1 if any(d.severity >= fail_on for d in diags) else 0
