"""The rule catalogue: what the docs site and `--list-rules` publish, and its link to the spec."""

from __future__ import annotations

import re
from pathlib import Path

from oespec import upstream
from oespec.breaking import BREAKS, BUMPS, catalogue, iter_rules
from oespec.cli import run
from oespec.spec import scan_requirements

SPEC = Path(__file__).resolve().parents[2] / "spec"


def test_rules_are_data_with_stable_ids():
    rules = list(iter_rules())
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids))
    assert ids[-1] == "buf:*"
    for r in rules:
        assert re.fullmatch(r"OEB\d{3}|buf:\*", r.id)
        assert r.name and r.purpose and r.category
        assert r.breaks in BREAKS and r.bump in BUMPS


def test_every_rule_cites_a_versioning_requirement_and_is_in_the_table():
    known = {req.id for req in scan_requirements(SPEC)[0]}
    table = (SPEC / "versioning.md").read_text()
    for r in iter_rules():
        assert r.requirement in known, f"{r.id} cites {r.requirement!r}"
        row = re.search(rf"^\| {re.escape(r.id)} \| {r.name} \|.*\| {r.breaks} \| {r.bump} \| {r.requirement} \|$",
                        table, re.M)
        assert row, f"spec/versioning.md has no matching row for {r.id} {r.name}"


def test_list_rules(capsys):
    assert run(["breaking", "--list-rules"]) == 0
    out = capsys.readouterr().out
    # the rules, OEB000 and the upstream gate's ids
    assert out.count("\n") == len(catalogue()) == len(list(iter_rules())) + 1 + len(upstream.RULES)
    assert "OEB055" in out and "buf:*" in out and "OEB000" in out
