"""The traceability matrix of the checkout: every wire clause (assertion) of the complete areas
has a case that observes it and a test-engine variant that breaks it; the matrix says what each
clause lacks, and which reference faults are still to be written. It lives here, not in
`oespec conformance --matrix`: the variants and faults are the checkout's test engines."""

from __future__ import annotations

from typing import Mapping, Sequence

from openengine.conformance import all_cases, coverage, render_matrix
from openengine.conformance.matrix import SpecRequirement, packaged_requirements, requirement_of
from tests.conformance.otherengine.variants import breaks_by_variant

# The areas whose every clause has a case and a test-engine variant: every area of the spec.
COMPLETE_AREAS = ("CORE", "CAP", "LOAD", "REV", "SVC", "ADMIN", "HEALTH", "EVENTS", "SESS", "TASKS")


def _faults() -> dict[str, tuple[str, ...]]:
    """Reference-engine fault name -> the clauses it breaks."""
    from tests.faults.table import FAULTS

    return {name: f.requirements for name, f in FAULTS.items()}


def _breaking(assertion: str, defects: Mapping[str, Sequence[str]] | None) -> list[str] | None:
    """The defects (name -> the ids each breaks) that break `assertion`; None when none are known.
    A defect naming a requirement with marked clauses as a whole breaks none of them."""
    if defects is None:
        return None
    return [name for name, ids in defects.items() if assertion in ids]


def clause_matrix(cov, *, variants: Mapping[str, Sequence[str]] | None = None,
                  faults: Mapping[str, Sequence[str]] | None = None) -> str:
    """The runner's matrix, then one line per clause (assertion) with the case that observes it,
    the test-engine variant and the reference-engine fault that break it, the figures, and what
    each missing defect must break."""
    lines = render_matrix(cov).splitlines()
    lines += ["", "Assertions (each clause of a wire requirement): case | test-engine variant | "
                  "reference fault"]
    for assertion in cov.assertions:
        columns = [cov.cases_by_assertion.get(assertion) or [], _breaking(assertion, variants),
                   _breaking(assertion, faults)]
        shown = [", ".join(col) if col else ("?" if col is None else "--") for col in columns]
        lines.append(f"{assertion:<18} " + " | ".join(shown))
    lines.append("")
    total = len(cov.assertions)
    lines.append(f"wire assertions with a case: {total - len(cov.assertions_uncovered)}/{total}")
    for label, defects in (("a test-engine variant", variants), ("a reference fault", faults)):
        if defects is None:
            lines.append(f"wire assertions with {label}: not known here")
        else:
            have = sum(1 for a in cov.assertions if _breaking(a, defects))
            lines.append(f"wire assertions with {label}: {have}/{total}")
    if cov.whole:
        lines.append("cited as a whole though its clauses are marked: " +
                     ", ".join(f"{case} ({req})" for case, req in cov.whole))
    if faults is not None:
        missing = [a for a in cov.assertions if not _breaking(a, faults)]
        if missing:
            lines += ["", "Reference faults still to write, each breaking one clause only (a "
                          "fault that names the clause's requirement as a whole is shown: it "
                          "says which clause it breaks by naming the clause's id):"]
            for a in missing:
                whole = [name for name, ids in faults.items() if "." in a and requirement_of(a) in ids]
                lines.append(f"{a:<18} {cov.assertions[a]}" +
                             (f" [{', '.join(whole)} names {requirement_of(a)}]" if whole else ""))
    return "\n".join(lines) + "\n"


def _in_areas(assertion: str) -> bool:
    return assertion.split("-")[1] in COMPLETE_AREAS


def test_every_clause_of_the_complete_areas_has_a_case_and_a_variant():
    cov = coverage(all_cases())
    variants = breaks_by_variant()
    scoped = [a for a in cov.assertions if _in_areas(a)]
    assert len(scoped) > 50, "the areas have their clauses marked"
    assert [a for a in scoped if not cov.cases_by_assertion.get(a)] == []
    broken = {a for ids in variants.values() for a in ids}
    assert [a for a in scoped if a not in broken] == [], "write a test-engine variant that breaks it"


def test_every_wire_clause_has_a_case_and_no_case_cites_a_marked_requirement_whole():
    cov = coverage(all_cases())
    assert cov.assertions_uncovered == []
    assert cov.whole == [], "name the clauses a case observes (REQ-...-NNN.k), not their requirement"


def test_variants_name_only_clauses_the_spec_defines():
    known = {a for r in packaged_requirements() for a, _ in r.clauses}
    for name, ids in breaks_by_variant().items():
        assert set(ids) <= known, f"{name} breaks {ids}: not a clause of the spec"


def test_the_matrix_gives_each_clause_its_case_variant_and_fault():
    one, two = "REQ-" + "TINY-001", "REQ-" + "TINY-002"   # split: the project's citation check skips them
    requirements = [
        SpecRequirement(one, "wire", "An engine MUST answer and MUST count.", "tiny.md", 3,
                        ((f"{one}.1", "An engine MUST answer"), (f"{one}.2", "and MUST count."))),
        SpecRequirement(two, "wire", "An engine MUST stop.", "tiny.md", 5),
    ]
    cases = [c for c in all_cases() if c.id == "core.abort.by-id"]
    cov = coverage(cases, requirements, source="tiny")
    assert list(cov.assertions) == [f"{one}.1", f"{one}.2", two]
    assert cov.assertions_uncovered == list(cov.assertions)   # the real case cites none of them
    out = clause_matrix(cov, variants={"mute": (f"{one}.1",)},
                        faults={"whole": (one,), "stops-late": (two,)})
    lines = out.splitlines()
    assert f"{one}.1     -- | mute | --" in lines
    assert f"{two}       -- | -- | stops-late" in lines
    assert "wire assertions with a test-engine variant: 1/3" in lines
    # A fault naming a requirement with marked clauses as a whole is shown, not counted.
    assert f"{one}.2     and MUST count. [whole names {one}]" in lines
    # Without a checkout's test engine the variant column is unknown, not empty.
    assert "wire assertions with a test-engine variant: not known here" in clause_matrix(cov, faults={})


def test_the_command_prints_the_requirement_matrix_without_the_checkouts_test_engines(capsys):
    from oespec.cli import run

    assert run(["conformance", "--matrix"]) == 0
    out = capsys.readouterr().out
    assert "wire requirements with a case: " in out
    assert "test-engine variant" not in out


def test_the_matrix_lists_the_reference_faults_still_to_write():
    # With a fault left out, its clause is listed with the clause's words.
    cov = coverage(all_cases())
    faults = {name: ids for name, ids in _faults().items() if "REQ-CORE-010.7" not in ids}
    out = clause_matrix(cov, faults=faults)
    missing = out.split("Reference faults still to write", 1)[1].splitlines()[1:]
    assert missing and all(requirement_of(line.split()[0]).startswith("REQ-") for line in missing)
    assert [line for line in missing if line.startswith("REQ-CORE-010.7 ") and "queued request" in line]


def test_every_wire_clause_has_a_reference_fault_that_names_it():
    """Each clause is broken by a fault of the reference engine that names the clause itself
    (a fault naming the requirement whole does not say which clause it breaks)."""
    cov = coverage(all_cases())
    faults = _faults()
    named = {cited for ids in faults.values() for cited in ids}
    assert [a for a in cov.assertions if a not in named] == [], "write a fault that breaks it"
    out = clause_matrix(cov, variants=breaks_by_variant(), faults=faults)
    assert f"wire assertions with a reference fault: {len(cov.assertions)}/{len(cov.assertions)}" in out
    assert "Reference faults still to write" not in out
