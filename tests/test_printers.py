"""One output layer: every command that reports findings prints through the same named printers
(text, json, github, junit, sarif), and each printer is exercised on each command, conformance
included (end to end through the CLI against a reference engine this test starts). JUnit output
is validated against the Jenkins xunit schema (tests/data/junit-10.xsd); SARIF output against the
structural rules of SARIF 2.1.0 written out below."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oespec.cli import run
from oespec.catalogues import all_specs
from openengine.contractkit.diagnostics import PRINTERS, Diagnostic
from openengine.contractkit.rules import Severity
from openengine.contractkit.diagnostics import Context, render, render_sarif
from openengine.contractkit.rules import RuleSpec, find_spec
from tests.fixture_cases import breaking_side, invalid_registry

ROOT = Path(__file__).resolve().parents[1]
XSD = ROOT / "tests" / "data" / "junit-10.xsd"
BAD_REGISTRY = invalid_registry("canonical-name-undotted")
BAD_CAPABILITIES = ROOT / "tests" / "data" / "validate" / "corpus" / "invalid-OEV111-max-logprobs.json"
FORMATS = ("text", "json", "github", "junit", "sarif")

# command -> (argv before --format, an id the findings must contain, or None for a clean run)
COMMANDS = {
    "check": (["check", str(BAD_REGISTRY), "--no-contract", "--no-head"], "OE003"),
    "check-missing-file": (["check", str(ROOT / "no-such.yaml")], "OE000"),
    "validate": (["validate", str(BAD_CAPABILITIES)], "OEV111"),
    "validate-missing-file": (["validate", str(ROOT / "no-such.json")], "OEV001"),
    "breaking-unknown-ref": (["breaking", "--against", "no-such-ref-for-the-printers"], "OEB000"),
    "generate-unusable": (["generate", str(ROOT / "no-such.yaml"), "--check"], "OE000"),
    "spec": (["spec"], None),
}


# -- the structural rules of SARIF 2.1.0 that matter to a consumer -------------------------------

SARIF_LEVELS = {"none", "note", "warning", "error"}


def sarif_problems(log) -> list[str]:
    """What makes `log` not a SARIF 2.1.0 log a code-scanning consumer can read: the top-level
    version and $schema, one run with a named tool driver whose rules are reportingDescriptors
    with unique ids, and results whose ruleId, ruleIndex, level, message and locations agree with
    them. An empty list means the log is well-formed."""
    problems = []

    def need(condition: bool, what: str) -> bool:
        if not condition:
            problems.append(what)
        return condition

    if not need(isinstance(log, dict), "the log is not an object"):
        return problems
    need(log.get("version") == "2.1.0", "version is not 2.1.0")
    need(isinstance(log.get("$schema"), str) and "sarif-2.1.0" in log["$schema"], "$schema names no SARIF 2.1.0 schema")
    runs = log.get("runs")
    if not need(isinstance(runs, list) and len(runs) == 1, "runs is not a list of one run"):
        return problems
    run_ = runs[0]
    driver = run_.get("tool", {}).get("driver") if isinstance(run_.get("tool"), dict) else None
    if not need(isinstance(driver, dict), "runs[0].tool.driver is missing"):
        return problems
    need(isinstance(driver.get("name"), str) and driver["name"], "the driver has no name")
    need(isinstance(driver.get("version", ""), str), "the driver's version is not a string")
    rules = driver.get("rules", [])
    need(isinstance(rules, list), "driver.rules is not a list")
    ids = []
    for i, rule in enumerate(rules):
        if need(isinstance(rule, dict) and isinstance(rule.get("id"), str) and rule["id"], f"rules[{i}] has no id"):
            ids.append(rule["id"])
            short = rule.get("shortDescription")
            need(short is None or (isinstance(short, dict) and isinstance(short.get("text"), str)),
                 f"rules[{i}].shortDescription has no text")
            level = rule.get("defaultConfiguration", {}).get("level", "warning")
            need(level in SARIF_LEVELS, f"rules[{i}] has default level {level!r}")
    need(len(ids) == len(set(ids)), "rule ids repeat")
    results = run_.get("results")
    if not need(isinstance(results, list), "runs[0].results is not a list"):
        return problems
    for i, result in enumerate(results):
        where = f"results[{i}]"
        if not need(isinstance(result, dict), f"{where} is not an object"):
            continue
        need(isinstance(result.get("message", {}).get("text"), str), f"{where}.message.text is missing")
        need(result.get("level", "warning") in SARIF_LEVELS, f"{where}.level is {result.get('level')!r}")
        index = result.get("ruleIndex")
        if index is not None:
            need(isinstance(index, int) and 0 <= index < len(rules), f"{where}.ruleIndex is out of range")
            if isinstance(index, int) and 0 <= index < len(rules):
                need(rules[index].get("id") == result.get("ruleId"), f"{where}.ruleIndex names another rule")
        for j, loc in enumerate(result.get("locations", [])):
            physical = loc.get("physicalLocation", {})
            uri = physical.get("artifactLocation", {}).get("uri")
            need(isinstance(uri, str) and uri and not re.search(r"\s", uri), f"{where}.locations[{j}] has no uri")
            region = physical.get("region")
            if region is not None:
                line, column = region.get("startLine"), region.get("startColumn", 1)
                need(isinstance(line, int) and line >= 1, f"{where}.locations[{j}].region.startLine < 1")
                need(isinstance(column, int) and column >= 1, f"{where}.locations[{j}].region.startColumn < 1")
    return problems


def assert_valid_sarif(text: str) -> dict:
    log = json.loads(text)
    assert sarif_problems(log) == []
    return log


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
        # A finding is a testcase of its rule; a conformance case is a testcase named by its id.
        failing = [tc for tc in doc.iter("testcase") if tc.find("failure") is not None or tc.find("error") is not None]
        reported = {tc.get("classname") for tc in doc.iter("testcase") if len(tc)} | {tc.get("name") for tc in failing}
        assert (rule_id in reported) if rule_id else not any(len(tc) for tc in doc.iter("testcase"))
    elif fmt == "github":
        lines = out.splitlines()
        assert all(ln.startswith("::") for ln in lines)
        title = (rule_id or "").replace(":", "%3A")     # a property value escapes its colons
        assert any(f"title={title}::" in ln for ln in lines) if rule_id else lines == []
    elif fmt == "sarif":
        log = assert_valid_sarif(out)
        results = log["runs"][0]["results"]
        assert any(r["ruleId"] == rule_id for r in results) if rule_id else results == []
        known = all_specs()
        for rule in log["runs"][0]["tool"]["driver"]["rules"]:   # described from the catalogue
            spec = find_spec(known, rule["id"])
            assert spec is not None, rule["id"]
            assert rule["name"] == spec.name and rule["shortDescription"]["text"] == spec.purpose
    else:
        assert re.search(r"^\d+ findings? \(", out, re.M)          # the summary line
        assert (f" {rule_id}: " in out) if rule_id else "\n0 findings" in "\n" + out


def test_every_printer_is_registered():
    assert tuple(PRINTERS) == FORMATS


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_printer_on_each_command(command, fmt, capsys):
    argv, rule_id = COMMANDS[command]
    run(argv + ["--format", fmt])
    check_output(fmt, capsys.readouterr().out, rule_id)


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_printer_on_generate_check(fmt, capsys):
    assert run(["generate", "--check", "--format", fmt]) == 0
    check_output(fmt, capsys.readouterr().out, None)


def test_an_unknown_format_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown format 'yaml'; use one of: text, json"):
        render("yaml", [])


def test_junit_counts_and_escapes_hostile_text():
    diags = [Diagnostic("a.yaml", 3, 4, "OE003", Severity.ERROR, "bad \x1b[31m\x00 name", "fix it"),
             Diagnostic("a.yaml", 5, 1, "OE006", Severity.WARNING, "odd"),
             Diagnostic("a.yaml", 7, 1, "OEV315", Severity.INFO, "fyi")]
    doc = assert_valid_junit(PRINTERS["junit"](diags))
    assert doc.get("tests") == "3" and doc.get("failures") == "2"
    failures = [f.get("type") for f in doc.iter("failure")]
    assert failures == ["error", "warning"]


def test_text_and_github_never_pass_a_control_character_through():
    d = Diagnostic("a.json", 1, 2, "OEV002", Severity.ERROR, "engine said \x1b[2J\x07 and\nmore", "hint \x9b")
    for fmt in ("text", "github"):
        out = render(fmt, [d])
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out), fmt
        assert "\\x1b[2J\\x07" in out


# -- SARIF ---------------------------------------------------------------------------------------

SPECS = {s.id: s for s in (
    RuleSpec("OE003", "canonical-profile-name", "check", "names", "profile names are dotted", Severity.ERROR,
             requirements=("REQ-ADD-001",)),
    RuleSpec("buf:*", "wire-breaking", "breaking", "wire", "buf's rules", None, bump="major"),
)}


def _sarif(diags, **context) -> dict:
    describe = lambda rule_id: find_spec(SPECS, rule_id)   # noqa: E731
    return assert_valid_sarif(render_sarif(diags, Context(tool="oespec", version="9.9", describe=describe,
                                                          **context)))


def test_sarif_carries_the_tool_the_rules_used_and_located_results():
    diags = [Diagnostic("profiles.yaml", 12, 5, "OE003", Severity.ERROR, "bad name", "use dots"),
             Diagnostic("profiles.yaml", 30, 1, "OE003", Severity.WARNING, "odd name"),
             Diagnostic("proto/openengine/v1/kv.proto", 0, 0, "buf:FIELD_NO_DELETE", Severity.INFO, "gone"),
             Diagnostic("dir with space/x.json", 2, 0, "OEV999", Severity.ERROR, "not catalogued")]
    log = _sarif(diags)
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["name"] == "oespec" and driver["version"] == "9.9"
    assert [r["id"] for r in driver["rules"]] == ["OE003", "buf:FIELD_NO_DELETE", "OEV999"]
    oe003, wire, unknown = driver["rules"]
    assert oe003["name"] == "canonical-profile-name"
    assert oe003["shortDescription"] == {"text": "profile names are dotted"}
    assert oe003["defaultConfiguration"] == {"level": "error"}
    assert oe003["properties"]["requirements"] == ["REQ-ADD-001"]
    assert wire["name"] == "wire-breaking" and "defaultConfiguration" not in wire   # decided per finding
    assert unknown == {"id": "OEV999"}
    first, second, third, fourth = log["runs"][0]["results"]
    assert first["ruleId"] == "OE003" and first["ruleIndex"] == 0 and first["level"] == "error"
    assert first["message"]["text"] == "bad name (hint: use dots)"
    assert first["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "profiles.yaml"}, "region": {"startLine": 12, "startColumn": 5}}
    assert second["level"] == "warning" and second["ruleIndex"] == 0
    assert third["level"] == "note" and "region" not in third["locations"][0]["physicalLocation"]
    assert fourth["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "dir%20with%20space/x.json"
    assert fourth["locations"][0]["physicalLocation"]["region"] == {"startLine": 2, "startColumn": 1}


def test_sarif_of_nothing_is_a_run_without_results():
    log = _sarif([])
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []


@pytest.mark.parametrize("break_it, problem", [
    (lambda log: log.update(version="2.0.0"), "version is not 2.1.0"),
    (lambda log: log.pop("$schema"), "$schema names no SARIF 2.1.0 schema"),
    (lambda log: log["runs"][0]["tool"]["driver"].pop("name"), "the driver has no name"),
    (lambda log: log["runs"][0]["results"][0].update(level="fatal"), "results[0].level is 'fatal'"),
    (lambda log: log["runs"][0]["results"][0].update(ruleIndex=5), "results[0].ruleIndex is out of range"),
    (lambda log: log["runs"][0]["results"][0]["message"].pop("text"), "results[0].message.text is missing"),
    (lambda log: log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"].update(startLine=0),
     "results[0].locations[0].region.startLine < 1"),
    (lambda log: log["runs"][0]["tool"]["driver"]["rules"].append({"id": "OE003"}), "rule ids repeat"),
])
def test_the_sarif_checks_catch_a_broken_log(break_it, problem):
    """The structural checks above must be able to fail, or every SARIF test proves nothing."""
    log = _sarif([Diagnostic("profiles.yaml", 1, 1, "OE003", Severity.ERROR, "bad")])
    break_it(log)
    assert problem in sarif_problems(log)


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
    assert by_id["x.case-fail"].details["requirements"] == ["REQ-CORE-001"]
    assert by_id["x.case-unchecked"].message.startswith("UNCHECKED the title: because unchecked")


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_printer_on_conformance_results(fmt):
    from openengine.conformance.report import render_report

    out = render_report(fmt, _report())
    if fmt == "json":     # the published report document, not the records
        assert {r["case"]: r["outcome"] for r in json.loads(out)["results"]}["x.case-fail"] == "fail"
    elif fmt != "sarif":    # the made-up case ids are not catalogued
        check_output(fmt, out, "x.case-fail")
    else:
        assert [r["ruleId"] for r in assert_valid_sarif(out)["runs"][0]["results"]][0] == "x.case-fail"


def test_conformance_text_and_json_add_the_report_to_the_records():
    from openengine.conformance.report import render_json, render_junit, render_report, render_text

    report = _report()
    text = render_text(report)
    assert text.splitlines()[0].startswith("engine   at 127.0.0.1:1")
    assert "127.0.0.1:1: error x.case-fail: FAIL the title: because fail" in text
    assert text.rstrip().endswith(report.verdict)
    data = json.loads(render_json(report))
    # JSON is the published report document, every case with its outcome.
    assert data["kind"] == "openengine-conformance-report" and data["verdict"]["text"] == report.verdict
    assert [(r["case"], r["outcome"]) for r in data["results"]] == [(r.id, str(r.outcome)) for r in report.results]
    suite = assert_valid_junit(render_report("junit", report))
    assert suite.get("name") == "openengine-conformance" and suite.get("tests") == str(len(report.results))
    assert {p.get("name"): p.get("value") for p in suite.iter("property")}["verdict"] == report.verdict
    assert_valid_junit(render_junit(report))     # the full case report of --junit FILE


# -- conformance end to end: the CLI against a reference engine started here -----------------------

@pytest.fixture(scope="module")
def faulty_engine():
    pytest.importorskip("openengine.v1.capabilities_pb2", reason="run `make bindings` first")
    from openengine.engine import EngineConfig
    from openengine.serve import AdminAccess
    from tests.faults import faulty_engine as committing

    config = EngineConfig(port=0, profiles=("all",), admin=AdminAccess(token="printer-test-token"))
    with committing(config, ["capabilities-limit-out-of-range"]) as engine:
        yield engine


@pytest.mark.parametrize("fmt", FORMATS)
def test_conformance_through_the_cli_in_every_format(faulty_engine, fmt, capsys):
    """A fault the capabilities case observes: one failed case, found in every format."""
    code = run(["conformance", "--target", faulty_engine.address, "--case", "capabilities.limits-in-range",
                "--format", fmt])
    out = capsys.readouterr().out
    assert code == 1
    if fmt == "text":
        assert "error capabilities.limits-in-range: FAIL" in out
        assert out.rstrip().splitlines()[-1].startswith("DOES NOT CONFORM")
        return
    if fmt == "json":     # the published report document, not the records
        data = json.loads(out)
        assert data["verdict"]["text"].startswith("DOES NOT CONFORM") and data["verdict"]["counts"]["fail"] == 1
        assert {r["case"]: r["outcome"] for r in data["results"]}["capabilities.limits-in-range"] == "fail"
        return
    check_output(fmt, out, "capabilities.limits-in-range")
    if fmt == "github":
        [line] = [ln for ln in out.splitlines() if "title=capabilities.limits-in-range" in ln]
        assert line.startswith("::error ") and "REQ" not in line.split("::")[1]
        assert "OEV111" in line
    if fmt == "sarif":
        log = json.loads(out)
        [result] = [r for r in log["runs"][0]["results"] if r["ruleId"] == "capabilities.limits-in-range"]
        assert result["level"] == "error" and result["properties"]["outcome"] == "fail"
        [rule] = [r for r in log["runs"][0]["tool"]["driver"]["rules"] if r["id"] == result["ruleId"]]
        # One type for one property: the requirements are an array in the rule and in the result.
        assert rule["properties"]["requirements"] == result["properties"]["requirements"] == ["REQ-CAP-008"]
        assert log["runs"][0]["tool"]["driver"]["informationUri"].startswith("https://")
        # A place a code-scanning tool can open: the requirement's line in the spec, and the case
        # against the engine as a logical location (the engine's address is no file).
        [location] = result["locations"]
        physical = location["physicalLocation"]
        page = ROOT / physical["artifactLocation"]["uri"]
        assert physical["artifactLocation"]["uri"].startswith("spec/") and page.is_file()
        assert "**REQ-CAP-008**" in page.read_text().splitlines()[physical["region"]["startLine"] - 1]
        assert location["logicalLocations"][0]["fullyQualifiedName"] == \
            f"{faulty_engine.address}/capabilities.limits-in-range"


# -- breaking: a registry change and a wire change, compared and printed ---------------------------

def _breaking_findings(case: str) -> list[Diagnostic]:
    from oespec.breaking import Context as BreakingContext
    from oespec.breaking import compare
    from oespec.breaking.buf_breaking import compare_protos
    from oespec.registry import load_registry

    base, cur = (load_registry(breaking_side(case, side) / "profiles.yaml", display_path="profiles.yaml").registry
                 for side in ("baseline", "current"))
    diags = compare(base, cur, path="profiles.yaml", baseline_path="profiles.yaml", ref="baseline")
    proto = breaking_side(case, "baseline") / "proto"
    if proto.is_dir():
        diags += compare_protos(BreakingContext(base, cur, "profiles.yaml", "baseline"),
                                breaking_side(case, "current") / "proto", proto, proto_display="proto")
    return diags


@pytest.mark.parametrize("case, rule_id", [("OEB030-rpc-removed", "OEB030"), ("wire-field-deleted", "buf:")])
def test_each_printer_on_breaking_findings(case, rule_id):
    from oespec.commands.common import output_context

    diags = _breaking_findings(case)
    emitted = next(d.rule_id for d in diags if d.rule_id.startswith(rule_id))
    for fmt in FORMATS:
        check_output(fmt, render(fmt, diags, output_context()), emitted)
    log = json.loads(render("sarif", diags, output_context()))
    [result] = [r for r in log["runs"][0]["results"] if r["ruleId"] == emitted][:1]
    assert result["properties"]["breaks"] in ("clients", "servers", "both", "none")


def test_conformance_junit_on_stdout_and_in_the_file_is_one_document(faulty_engine, tmp_path, capsys):
    """`--format junit` and `--junit FILE` of one run print the same full case report: every case,
    passes included, skipped and unchecked cases as `skipped`, classname the profile, with times."""
    written = tmp_path / "report.xml"
    code = run(["conformance", "--target", faulty_engine.address, "--case", "capabilities.*", "--case", "core.*",
                "--format", "junit", "--junit", str(written)])
    out = capsys.readouterr().out
    assert code == 1 and out == written.read_text(encoding="utf-8")
    suite = assert_valid_junit(out)
    cases = list(suite.iter("testcase"))
    assert len(cases) == int(suite.get("tests")) and any(tc.find("failure") is not None for tc in cases)
    assert {tc.get("classname") for tc in cases} == {"openengine.core"}    # the cases' profile
    assert int(suite.get("skipped")) == sum(1 for tc in cases if tc.find("skipped") is not None)
