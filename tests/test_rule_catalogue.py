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
from contractkit.rules import FAMILIES, RuleCatalogue, RuleSpec, Severity, find_spec

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
    cat.register(spec)
    with pytest.raises(ValueError, match="twice"):
        cat.register(spec)
    with pytest.raises(ValueError, match="family"):
        cat.register(RuleSpec("OE999", "x", "check", "c", "p", Severity.ERROR))
    with pytest.raises(ValueError, match="malformed requirement"):
        RuleSpec("OE998", "x", "check", "c", "p", Severity.ERROR, requirements=("REQ-x",))
    with pytest.raises(ValueError, match="unknown rule family"):
        RuleCatalogue("lint")


def test_the_registrar_stores_the_familys_payload_and_returns_the_handler():
    cat: RuleCatalogue[tuple] = RuleCatalogue("check")
    spec = RuleSpec("OE990", "x", "check", "c", "p", Severity.ERROR)

    @cat.registrar(spec, lambda fn: ("wrapped", fn))
    def handler():
        return 7

    assert handler() == 7                       # the decorated function is unchanged
    assert cat["OE990"] == ("wrapped", handler) and cat.spec("OE990") is spec
    cat.register(RuleSpec("OE989", "y", "check", "c", "p", Severity.ERROR))   # a spec alone
    assert list(cat) == ["OE990", "OE989"] and cat.payloads() == [("wrapped", handler)]
    assert [s.id for s in cat.specs()] == ["OE989", "OE990"]


def test_every_family_registers_through_the_one_catalogue_type():
    """Check rules, breaking rules, validator rules, conformance cases, faults, and the spec,
    docs and generate ids all live in a `RuleCatalogue`, each payload of its family's own type."""
    from codegen.breaking import Rule as BreakingRule
    from codegen.check import Rule as CheckRule
    from codegen.commands.rules import family_catalogues
    from openengine.conformance.cases import Case
    from openengine.engine.faults import Fault
    from openengine.validate import Rule as ValidatorRule

    cats = family_catalogues()
    assert set(cats) == set(FAMILIES)
    payload_type = {"check": CheckRule, "breaking": BreakingRule, "validator": ValidatorRule,
                    "conformance": Case, "fault": Fault}
    for family, cat in cats.items():
        assert isinstance(cat, RuleCatalogue) and cat.family == family
        for rule_id in cat:
            payload = cat[rule_id]
            if family in payload_type:
                assert payload is None or isinstance(payload, payload_type[family]), rule_id
            else:
                assert payload is None, rule_id     # spec, docs, generate: ids with no handler
    # The handlers the runners call are the registered ones, and a spec alone has none.
    assert all(callable(r.handler) for r in cats["check"].payloads())
    assert cats["check"]["OE000"] is None and cats["breaking"]["OEB000"] is None
    assert all(callable(c.fn) for c in cats["conformance"].payloads())


def test_a_wildcard_entry_stands_for_the_ids_it_names():
    specs = all_specs()
    assert find_spec(specs, "buf:FIELD_NO_DELETE").id == "buf:*"
    assert find_spec(specs, "OE003").id == "OE003"
    assert find_spec(specs, "OE999") is None


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
    emitted |= _emitted(["validate", str(ROOT / "no-such.json"), "--format", "json"], capsys)
    emitted |= _emitted(["breaking", "--against", "no-such-ref-for-the-catalogue", "--format", "json"], capsys)
    emitted |= _emitted(["generate", str(ROOT / "no-such-registry.yaml"), "--check", "--format", "json"], capsys)
    emitted |= _emitted(["generate", "--check", "--format", "json"], capsys)
    emitted |= _emitted(["spec", "--format", "json"], capsys)
    assert emitted, "the fixtures produced no findings at all"
    assert {"OE000", "OEV101", "OEV001", "OEB000"} <= emitted
    assert not {rid for rid in emitted if find_spec(known, rid) is None}, sorted(emitted - set(known))


def test_ids_a_conformance_run_emits_are_catalogued(capsys):
    """Every record a conformance run prints names a catalogued case."""
    pytest.importorskip("openengine.v1.capabilities_pb2", reason="run `make bindings` first")
    from openengine.engine import EngineConfig, RunningEngine

    with RunningEngine(EngineConfig(port=0, faults=("capabilities-missing-core",))) as engine:
        code = run(["conformance", "--target", engine.address, "--case", "capabilities.*", "--case", "core.*",
                    "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    emitted = {d["rule_id"] for d in data["diagnostics"]}
    assert code == 1 and emitted
    assert emitted <= set(all_specs()), sorted(emitted - set(all_specs()))


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
