"""The case catalogue against the real spec: every wire requirement has a case, every citation
names a requirement that exists, ids are stable and unique."""

from __future__ import annotations

from pathlib import Path

from openengine.conformance import all_cases, coverage, render_matrix

SPEC = Path(__file__).resolve().parents[2] / "spec"


def test_every_wire_requirement_has_a_case():
    cov = coverage(all_cases(), spec_dir=SPEC)
    assert cov.wire, "the spec defines no wire requirement"
    assert cov.uncovered == [], f"wire requirements without a case: {cov.uncovered}"
    assert cov.percent == 100.0


def test_every_citation_names_a_spec_requirement():
    cov = coverage(all_cases(), spec_dir=SPEC)
    assert cov.unknown == []


def test_case_ids_are_unique_and_dotted():
    ids = [c.id for c in all_cases()]
    assert len(ids) == len(set(ids))
    assert all(i == i.lower() and "." in i for i in ids)


def test_every_profile_has_a_served_and_an_absent_case():
    from openengine.conformance.contract import CORE, load_contract

    ids = {c.id for c in all_cases()}
    for info in load_contract().profiles.values():
        assert f"{info.short_name}.rpcs.served" in ids
        if info.name != CORE:
            assert f"{info.short_name}.absent.unimplemented" in ids


def test_matrix_lists_each_wire_requirement(capsys):
    from codegen.cli import run

    assert run(["conformance", "--matrix", "--spec", str(SPEC)]) == 0
    out = capsys.readouterr().out
    cov = coverage(all_cases(), spec_dir=SPEC)
    for req in cov.wire:
        assert any(line.startswith(req + " ") for line in out.splitlines()), req
    assert "(100%)" in out
    assert render_matrix(cov) == out
