"""One output layer: every command that reports findings prints through the same named printers
(text, json, github, junit), and each printer is exercised on each command. JUnit output is
validated against the Jenkins xunit schema (tests/data/junit-10.xsd)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codegen.cli import run
from codegen.diagnostics import PRINTERS, Diagnostic, Severity

ROOT = Path(__file__).resolve().parents[1]
XSD = ROOT / "tests" / "data" / "junit-10.xsd"
BAD_REGISTRY = ROOT / "tests" / "data" / "registry" / "invalid" / "canonical-name-undotted" / "profiles.yaml"
BAD_CAPABILITIES = ROOT / "tests" / "data" / "validate" / "corpus" / "invalid-OEV111-max-logprobs.json"

# command -> (argv before --format, an id the findings must contain, or None for a clean run)
COMMANDS = {
    "check": (["check", str(BAD_REGISTRY), "--no-contract", "--no-head"], "OE003"),
    "validate": (["validate", str(BAD_CAPABILITIES)], "OEV111"),
    "check-missing-file": (["check", str(ROOT / "no-such.yaml")], "OE000"),
    "spec": (["spec"], None),
}


def assert_valid_junit(text: str):
    from lxml import etree

    schema = etree.XMLSchema(etree.parse(str(XSD)))
    doc = etree.fromstring(text.encode("utf-8"))
    schema.assertValid(doc)
    return doc


def check_output(fmt: str, out: str, rule_id: str | None) -> None:
    if fmt == "json":
        ids = [d["rule_id"] for d in json.loads(out)["diagnostics"]]
        assert (rule_id in ids) if rule_id else ids == []
    elif fmt == "junit":
        doc = assert_valid_junit(out)
        names = [tc.get("name") for tc in doc.iter("testcase")]
        assert any(n.startswith(rule_id + " ") for n in names) if rule_id else names == ["no findings"]
    elif fmt == "github":
        lines = out.splitlines()
        assert all(ln.startswith("::") for ln in lines)
        assert any(f"title={rule_id}::" in ln for ln in lines) if rule_id else lines == []
    else:
        assert out.rstrip().splitlines()[-1].endswith(")")         # the summary line
        assert (f" {rule_id}: " in out) if rule_id else out.startswith("0 findings")


def test_every_printer_is_registered():
    assert set(PRINTERS) == {"text", "json", "github", "junit"}


@pytest.mark.parametrize("fmt", sorted(PRINTERS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_printer_on_each_command(command, fmt, capsys):
    argv, rule_id = COMMANDS[command]
    run(argv + ["--format", fmt])
    check_output(fmt, capsys.readouterr().out, rule_id)


@pytest.mark.parametrize("fmt", sorted(PRINTERS))
def test_each_printer_on_generate_check(fmt, capsys):
    assert run(["generate", "--check", "--format", fmt]) == 0
    check_output(fmt, capsys.readouterr().out, None)


def test_junit_counts_and_escapes_hostile_text():
    diags = [Diagnostic("a.yaml", 3, 4, "OE003", Severity.ERROR, "bad \x1b[31m\x00 name", "fix it"),
             Diagnostic("a.yaml", 5, 1, "OE006", Severity.WARNING, "odd"),
             Diagnostic("a.yaml", 7, 1, "OEV315", Severity.INFO, "fyi")]
    doc = assert_valid_junit(PRINTERS["junit"](diags))
    assert doc.get("tests") == "3" and doc.get("failures") == "2"
    failures = [f.get("type") for f in doc.iter("failure")]
    assert failures == ["error", "warning"]


# -- conformance: case results through the adapter -------------------------------------------------

def _report():
    from openengine.conformance.runner import CaseResult, Outcome, Report

    results = [CaseResult(f"x.case-{o.value}", "openengine.core", ("REQ-CORE-001",), "the title", o,
                          reason="" if o is Outcome.PASS else f"because {o.value}") for o in Outcome]
    return Report("127.0.0.1:1", {}, ["openengine.core"], results, None, 0.1)


def test_case_results_become_records_passes_excluded():
    from openengine.conformance.report import report_diagnostics
    from openengine.conformance.runner import Outcome

    by_id = {d.rule_id: d for d in report_diagnostics(_report())}
    assert "x.case-pass" not in by_id
    for o in (Outcome.FAIL, Outcome.ERROR, Outcome.STALE):
        assert by_id[f"x.case-{o.value}"].severity is Severity.ERROR
    for o in (Outcome.SKIP, Outcome.UNCHECKED, Outcome.XFAIL):
        assert by_id[f"x.case-{o.value}"].severity is Severity.INFO
    assert by_id["x.case-fail"].details["requirements"] == "REQ-CORE-001"


@pytest.mark.parametrize("fmt", sorted(PRINTERS))
def test_each_printer_on_conformance_results(fmt):
    from openengine.conformance.report import report_diagnostics

    out = PRINTERS[fmt](report_diagnostics(_report()))
    check_output(fmt, out, "x.case-fail")
