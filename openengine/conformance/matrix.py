"""The requirement-to-case matrix and the coverage of the spec's `wire` requirements.

The requirements come from the index `oespec generate` writes next to this module
(`requirements.json`, package data), so an installed runner knows the spec without a checkout.
A caller holding a spec folder (the CLI's `--spec`) passes its requirements instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Mapping, Sequence

from openengine.conformance.cases.base import Case

INDEX = "requirements.json"
PACKAGED = f"packaged index ({INDEX})"


@dataclass(frozen=True)
class SpecRequirement:
    """One numbered requirement of the spec: id, how it is checked (tag), its text and its page,
    and its marked clauses (`assertions`: id and words), none when it is stated as one."""

    id: str
    tag: str
    text: str
    page: str
    line: int = 0     # where on its page the requirement is written; 0 when the index does not say
    assertions: tuple[tuple[str, str], ...] = ()

    @property
    def clauses(self) -> tuple[tuple[str, str], ...]:
        """What a case observes and a defect breaks: each marked clause, or the requirement
        itself when it is stated as one."""
        return self.assertions or ((self.id, self.text),)


def requirement_of(cited: str) -> str:
    """`REQ-CORE-010.2` -> `REQ-CORE-010`; a requirement id is its own."""
    return cited.split(".", 1)[0]


@lru_cache(maxsize=1)
def packaged_requirements() -> tuple[SpecRequirement, ...]:
    """The requirement index generated from spec/ and shipped in this package; empty when the
    package was built without it."""
    try:
        text = resources.files(__package__).joinpath(INDEX).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        return ()
    return tuple(SpecRequirement(r["id"], r["tag"], r["text"], r["page"], r.get("line", 0),
                                 tuple((a["id"], a["text"]) for a in r.get("assertions", ())))
                 for r in json.loads(text)["requirements"])


@dataclass(frozen=True)
class Coverage:
    """Which wire requirements, and which of their clauses (assertions), have a case. `wire` maps
    requirement id -> text, `assertions` assertion id -> text (a requirement stated as one is
    its own single assertion)."""

    wire: dict[str, str]
    cases_by_requirement: dict[str, list[str]]
    source: str | None            # where the requirements came from; None when none were known
    # Ids cited by cases that no requirement of the spec defines (stale citations).
    unknown: list[str] = field(default_factory=list)
    assertions: dict[str, str] = field(default_factory=dict)
    cases_by_assertion: dict[str, list[str]] = field(default_factory=dict)
    # (case, requirement) where a case cites a requirement with marked clauses as a whole, so
    # it is not known which clause the case observes.
    whole: list[tuple[str, str]] = field(default_factory=list)

    @property
    def covered(self) -> list[str]:
        return [r for r in self.wire if self.cases_by_requirement.get(r)]

    @property
    def uncovered(self) -> list[str]:
        return [r for r in self.wire if not self.cases_by_requirement.get(r)]

    @property
    def assertions_uncovered(self) -> list[str]:
        return [a for a in self.assertions if not self.cases_by_assertion.get(a)]

    @property
    def percent(self) -> float:
        return 100.0 * len(self.covered) / len(self.wire) if self.wire else 100.0

    def as_dict(self, exercised: set[str] | None = None) -> dict:
        out = {"spec": self.source, "wire_requirements": len(self.wire),
               "covered": len(self.covered), "percent": round(self.percent, 1),
               "uncovered": self.uncovered, "unknown_citations": self.unknown,
               "wire_assertions": len(self.assertions),
               "assertions_uncovered": self.assertions_uncovered}
        if exercised is not None:
            out["exercised"] = len([r for r in self.wire if r in {requirement_of(e) for e in exercised}])
        return out


def coverage(cases: list[Case], requirements: Sequence[SpecRequirement] | None = None, *,
             source: str | None = None) -> Coverage:
    """Which `wire` requirements and clauses the cases cite. `requirements` defaults to the
    packaged index; `source` says where given requirements came from (a spec folder). A case
    that cites a clause (`REQ-CORE-010.2`) covers that clause and its requirement."""
    by_req: dict[str, list[str]] = {}
    by_assertion: dict[str, list[str]] = {}
    for c in cases:
        if not c.observes:
            continue
        for cited in c.requirements:
            by_req.setdefault(requirement_of(cited), []).append(c.id)
            by_assertion.setdefault(cited, []).append(c.id)
    if requirements is None:
        requirements, source = packaged_requirements(), PACKAGED
    if not requirements:
        return Coverage({}, by_req, None)
    wire = {r.id: r.text for r in requirements if r.tag == "wire"}
    known = {i for r in requirements for i in (r.id, *(a for a, _ in r.assertions))}
    unknown = sorted({cited for c in cases for cited in c.requirements if cited not in known})
    assertions = {a: text for r in requirements if r.tag == "wire" for a, text in r.clauses}
    split = {r.id for r in requirements if r.assertions}
    whole = [(c.id, cited) for c in cases if c.observes for cited in c.requirements if cited in split]
    return Coverage(wire, {r: sorted(set(v), key=v.index) for r, v in by_req.items()}, source, unknown,
                    assertions, by_assertion, whole)


def breaking(assertion: str, defects: Mapping[str, Sequence[str]] | None) -> list[str] | None:
    """The defects (test-engine variants or reference faults: name -> the ids each breaks) that
    break `assertion`; None when none are known here. A defect that names a requirement with
    marked clauses as a whole breaks none of them: which clause it breaks is not said."""
    if defects is None:
        return None
    return [name for name, ids in defects.items() if assertion in ids]


def render_matrix(cov: Coverage, *, variants: Mapping[str, Sequence[str]] | None = None,
                  faults: Mapping[str, Sequence[str]] | None = None, width: int = 100) -> str:
    """One line per wire requirement with the cases that cite it; then, with variants or faults
    given, one line per clause (assertion) with the case that observes it, the test-engine
    variant and the reference-engine fault that break it, the figures, and what each missing
    defect must break."""
    lines = []
    ids = list(cov.wire) or sorted(cov.cases_by_requirement)
    for req in ids:
        cases = cov.cases_by_requirement.get(req, [])
        shown = ", ".join(cases) if cases else "-- NO CASE --"
        lines.append(f"{req:<16} {shown}")
    if cov.wire:
        lines.append("")
        lines.append(f"wire requirements with a case: {len(cov.covered)}/{len(cov.wire)} "
                     f"({cov.percent:.0f}%)")
        if cov.uncovered:
            lines.append("without a case: " + ", ".join(cov.uncovered))
    if cov.unknown:
        lines.append("cited but not in the spec: " + ", ".join(cov.unknown))
    if cov.assertions and (variants is not None or faults is not None):
        lines += ["", "Assertions (each clause of a wire requirement): case | test-engine variant | "
                      "reference fault"]
        for assertion in cov.assertions:
            columns = [cov.cases_by_assertion.get(assertion) or [], breaking(assertion, variants),
                       breaking(assertion, faults)]
            shown = [", ".join(col) if col else ("?" if col is None else "--") for col in columns]
            lines.append(f"{assertion:<18} " + " | ".join(shown))
        lines.append("")
        total = len(cov.assertions)
        lines.append(f"wire assertions with a case: {total - len(cov.assertions_uncovered)}/{total}")
        for label, defects in (("a test-engine variant", variants), ("a reference fault", faults)):
            if defects is None:
                lines.append(f"wire assertions with {label}: not known here")
            else:
                have = sum(1 for a in cov.assertions if breaking(a, defects))
                lines.append(f"wire assertions with {label}: {have}/{total}")
        if cov.whole:
            lines.append("cited as a whole though its clauses are marked: " +
                         ", ".join(f"{case} ({req})" for case, req in cov.whole))
        if faults is not None:
            missing = [a for a in cov.assertions if not breaking(a, faults)]
            if missing:
                lines += ["", "Reference faults still to write, each breaking one clause only (a "
                              "fault that names the clause's requirement as a whole is shown: it "
                              "says which clause it breaks by naming the clause's id):"]
                for a in missing:
                    whole = [name for name, ids in faults.items() if "." in a and requirement_of(a) in ids]
                    lines.append(f"{a:<18} {cov.assertions[a]}" +
                                 (f" [{', '.join(whole)} names {requirement_of(a)}]" if whole else ""))
    return "\n".join(lines) + "\n"
