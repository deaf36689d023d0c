"""Every registry fixture, checked: valid ones have no finding at all, invalid ones have exactly
the findings their expected.yaml lists (rule id and position; never message wording). An invalid
case is an edit of the minimal valid registry (tests/data/registry/invalid/README.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from oespec.check import RULES, catalogue, run_rules
from oespec.registry.resolve import SCHEMA_RULE
from oespec.registry import load_registry
from tests.fixture_cases import invalid_registry

DATA = Path(__file__).resolve().parents[1] / "data" / "registry"
VALID = sorted(p.parent for p in (DATA / "valid").glob("*/profiles.yaml"))
INVALID = sorted(p.parent for p in (DATA / "invalid").glob("*/expected.yaml"))
REPO_REGISTRY = Path(__file__).resolve().parents[2] / "profiles.yaml"


def _expected(case: Path) -> list[dict]:
    entries = YAML(typ="safe").load((case / "expected.yaml").read_text())
    assert isinstance(entries, list) and entries, f"{case.name}/expected.yaml lists no finding"
    return entries


def _findings(path: Path):
    return run_rules(load_registry(path))


@pytest.mark.parametrize("case", VALID, ids=[c.name for c in VALID])
def test_valid_fixture_has_no_findings(case):
    findings = _findings(case / "profiles.yaml")
    assert [(d.rule_id, d.line, d.message) for d in findings] == []


@pytest.mark.parametrize("case", INVALID, ids=[c.name for c in INVALID])
def test_invalid_fixture_has_exactly_the_expected_findings(case):
    expected = _expected(case)
    findings = _findings(invalid_registry(case.name))
    with_column = all("column" in e for e in expected)
    got = Counter((d.rule_id, d.line, d.column) if with_column else (d.rule_id, d.line) for d in findings)
    want = Counter((e["rule"], e["line"], e["column"]) if with_column else (e["rule"], e["line"])
                   for e in expected)
    assert got == want, "\n".join(f"{d.rule_id} {d.line}:{d.column} {d.message}" for d in findings)


def test_fixtures_are_discovered():
    assert len(VALID) >= 3 and len(INVALID) >= 40


def test_every_registry_rule_fails_on_some_fixture():
    shown = {e["rule"] for case in INVALID for e in _expected(case)}
    registry_rules = {r.id for r in RULES if not r.needs_contract and not r.needs_last_commit}
    registry_rules.add(SCHEMA_RULE)   # the schema stage's findings, catalogued without a handler
    assert registry_rules - shown == set()


def test_expected_files_name_known_rules():
    known = {spec.id for spec in catalogue().specs()}
    for case in INVALID:
        for entry in _expected(case):
            assert entry["rule"] in known, f"{case.name}: unknown rule {entry['rule']}"
            assert isinstance(entry["line"], int) and entry["line"] >= 1


def test_every_finding_has_a_position_and_a_hint():
    for case in INVALID:
        for d in _findings(invalid_registry(case.name)):
            assert d.line >= 1 and d.column >= 1, (case.name, d)
            assert d.hint, (case.name, d.rule_id)


def test_rule_ids_are_stable_and_well_formed():
    rules = list(RULES)
    ids = [r.id for r in rules]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    names = [r.name for r in rules]
    assert len(names) == len(set(names))
    for r in rules:
        assert r.id.startswith("OE") and len(r.id) == 5 and r.id[2:].isdigit()
        assert r.purpose and "\n" not in r.purpose


def test_the_repository_registry_has_no_registry_findings():
    rules = [r for r in RULES if not r.needs_contract]
    findings = run_rules(load_registry(REPO_REGISTRY), rules=rules)
    assert [(d.rule_id, d.line, d.message) for d in findings] == []


def test_the_repository_registry_names_its_schema():
    first = REPO_REGISTRY.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=oespec/registry/profiles.schema.json"
