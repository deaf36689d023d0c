"""Fixture pairs: tests/data/breaking/<case>/ holds the edits that make its baseline and current sides
(see tests/data/breaking/README.md) and expected.yaml.

Each case lists every error and warning it must produce (rule id, file, line, severity) and the
informational findings it must produce; nothing else may reach warning or error.
"""

from __future__ import annotations

import functools

import pytest
from ruamel.yaml import YAML

from oespec.breaking import Context, compare, iter_rules
from oespec.breaking.buf_breaking import compare_protos
from oespec.check import run_rules
from openengine.contractkit.rules import Severity
from oespec.registry import load_registry
from tests.fixture_cases import BREAKING, breaking_side

DATA = BREAKING
CASES = sorted(d.name for d in DATA.iterdir() if (d / "expected.yaml").is_file())
REGISTRY = "profiles.yaml"


def _expected(case: str) -> list[dict]:
    doc = YAML(typ="safe").load((DATA / case / "expected.yaml").read_text())
    return [{"path": REGISTRY, "details": [], **entry} for entry in doc["findings"] or []]


# Each distinct registry text, read once: most cases leave the shared baseline as it is.
_READ: dict[str, object] = {}


def _registry(case: str, side: str):
    path = breaking_side(case, side) / REGISTRY
    text = path.read_text()
    if text not in _READ:
        _READ[text] = load_registry(path, display_path=REGISTRY)
    resolved = _READ[text]
    assert resolved.registry is not None, resolved.diagnostics
    return resolved


@functools.cache
def findings(case: str):
    base = _registry(case, "baseline").registry
    cur = _registry(case, "current").registry
    diags = compare(base, cur, path=REGISTRY, baseline_path=REGISTRY, ref="baseline")
    proto = breaking_side(case, "baseline") / "proto"
    if proto.is_dir():
        diags += compare_protos(Context(base, cur, REGISTRY, "baseline"), breaking_side(case, "current") / "proto",
                                proto, proto_display="proto")
    return diags


def _key(d) -> tuple:
    return (d.rule_id, d.path, d.line, str(d.severity))


@pytest.mark.parametrize("case", CASES)
def test_fixture_findings(case):
    diags = findings(case)
    expected = _expected(case)
    got = {_key(d): d for d in diags}
    for e in expected:
        key = (e["rule"], e["path"], e["line"], e["severity"])
        assert key in got, f"{case}: missing {key}; got {sorted(got)}"
        for detail in e["details"]:  # a detail key, or {key: exact value}
            wanted = detail if isinstance(detail, dict) else {detail: None}
            for name, value in wanted.items():
                assert name in got[key].details, f"{case}: {key} lacks detail {name!r}"
                assert value is None or got[key].details[name] == value, \
                    f"{case}: {key} detail {name!r} is {got[key].details[name]!r}, not {value!r}"
    wanted = {(e["rule"], e["path"], e["line"], e["severity"]) for e in expected}
    unexpected = [k for k, d in got.items() if k not in wanted and d.severity >= Severity.WARNING]
    assert not unexpected, f"{case}: unexpected findings {unexpected}"


@pytest.mark.parametrize("case", CASES)
def test_breaking_findings_carry_who_and_bump(case):
    for d in findings(case):
        assert d.details.get("breaks") in ("clients", "servers", "both", "none")
        assert d.details.get("bump") in ("major", "minor", "none")


@pytest.mark.parametrize("case", [c for c in CASES if "safe" in c])
def test_safe_changes_have_no_error(case):
    assert not [d for d in findings(case) if d.severity == Severity.ERROR]


@pytest.mark.parametrize("case", [c for c in CASES if "safe" in c])
@pytest.mark.parametrize("side", ["baseline", "current"])
def test_safe_fixture_registries_pass_the_registry_checks(case, side):
    errors = [d for d in run_rules(_registry(case, side)) if d.severity == Severity.ERROR]
    assert not errors, errors


def test_every_rule_has_a_fixture_that_triggers_it():
    triggered = {e["rule"] for case in CASES for e in _expected(case)}
    for r in iter_rules():
        if r.id.startswith("OEB"):
            assert any(case.startswith(r.id) for case in CASES), f"{r.id} has no fixture directory"
            assert r.id in triggered, f"no fixture expects {r.id}"
    assert any(rule_id.startswith("buf:") for rule_id in triggered)


def test_removals_point_at_the_parent_and_the_baseline():
    diag = next(d for d in findings("OEB030-rpc-removed") if d.rule_id == "OEB030")
    assert diag.details["baseline"] == "profiles.yaml:61:9 at baseline"
    assert diag.details["breaks"] == "clients" and diag.details["bump"] == "major"


def test_accepted_break_names_the_bump():
    diag = next(d for d in findings("safe-major-breaking") if d.rule_id == "OEB055")
    assert diag.severity == Severity.INFO
    assert "1.0 -> 2.0" in diag.details["accepted"]
