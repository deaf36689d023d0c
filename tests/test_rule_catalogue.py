"""One catalogue holds every id any command can emit.

Statically: every string literal in the toolkit and the runtime that has the shape of a rule id
(OE, OEB, OEV, SPEC, DOC and three digits) must be a catalogue entry, so an id cannot be emitted
from anywhere without being listed. Dynamically: the ids real commands print on the repository's
bad fixtures are all in the catalogue. And `oespec rules` prints every family in every format.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from codegen.cli import run
from codegen.commands.rules import all_specs, family_specs
from contractkit.rules import FAMILIES, RuleCatalogue, RuleSpec, Severity

ROOT = Path(__file__).resolve().parents[1]
ID_SHAPE = re.compile(r"\b(?:OEB|OEV|OE|SPEC|DOC)[0-9]{3}\b")
SOURCES = ("codegen", "contractkit", "openengine")


def _literal_ids() -> dict[str, list[str]]:
    """id -> where it appears as (part of) a string literal in the sources."""
    found: dict[str, list[str]] = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "v1" in path.relative_to(ROOT).parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    for rid in ID_SHAPE.findall(node.value):
                        found.setdefault(rid, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_id_written_in_the_sources_is_catalogued():
    known = all_specs()
    missing = {rid: where[:3] for rid, where in _literal_ids().items() if rid not in known}
    assert not missing, f"ids emitted or named but not in the catalogue: {missing}"


def test_every_family_is_present_and_ids_are_unique():
    families = family_specs()
    assert set(families) == set(FAMILIES)
    assert all(families[f] for f in FAMILIES)
    total = sum(len(v) for v in families.values())
    assert len(all_specs()) == total      # merged() refuses an id claimed twice
    for rid in ("OE000", "OE100", "OE900", "OE901", "OEB000", "SPEC001", "SPEC005", "DOC001", "DOC007"):
        assert rid in all_specs(), rid


def test_a_catalogue_refuses_duplicates_and_foreign_families():
    cat: RuleCatalogue[None] = RuleCatalogue("spec")
    spec = RuleSpec("SPEC999", "x", "spec", "c", "p", Severity.ERROR)
    cat.add(spec)
    with pytest.raises(ValueError, match="twice"):
        cat.add(spec)
    with pytest.raises(ValueError, match="family"):
        cat.add(RuleSpec("OE999", "x", "check", "c", "p", Severity.ERROR))
    with pytest.raises(ValueError, match="malformed requirement"):
        RuleSpec("OE998", "x", "check", "c", "p", Severity.ERROR, requirements=("REQ-x",))


def _emitted(argv: list[str], capsys) -> set[str]:
    run(argv)
    out = capsys.readouterr().out
    return {d["rule_id"] for d in json.loads(out)["diagnostics"]} if out.strip() else set()


def test_ids_real_commands_emit_are_catalogued(capsys):
    known = all_specs()
    emitted: set[str] = set()
    for fixture in sorted((ROOT / "tests" / "data").rglob("*.yaml"))[:40]:
        emitted |= _emitted(["check", str(fixture), "--no-contract", "--no-head", "--format", "json"], capsys)
    for doc in sorted((ROOT / "tests" / "data" / "validate" / "corpus").glob("invalid-*.json")):
        emitted |= _emitted(["validate", str(doc), "--format", "json"], capsys)
    emitted |= _emitted(["check", str(ROOT / "no-such-registry.yaml"), "--format", "json"], capsys)
    assert emitted, "the fixtures produced no findings at all"
    assert {"OE000", "OEV101"} <= emitted
    assert not emitted - set(known), sorted(emitted - set(known))


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_oespec_rules_prints_every_family(fmt, capsys):
    assert run(["rules", "--format", fmt]) == 0
    out = capsys.readouterr().out
    for rid in ("OE003", "OEB055", "OEV101", "SPEC002", "DOC003", "OE901", "load.watch.settings-first"):
        assert rid in out, (fmt, rid)
    if fmt == "json":
        rows = json.loads(out)
        assert {r["family"] for r in rows} == set(FAMILIES)
        assert len(rows) == len(all_specs())


def test_oespec_rules_filters_by_family(capsys):
    assert run(["rules", "--family", "spec", "--family", "docs"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert ids and all(i.startswith(("SPEC", "DOC")) for i in ids)
