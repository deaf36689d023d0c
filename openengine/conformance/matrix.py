"""The requirement-to-case matrix and the coverage of the spec's `wire` requirements, from the
index `oespec generate` writes beside this module (`requirements.json`, package data) or from the
requirements of a spec folder a caller passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Sequence

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


def coverage(cases: list[Case], requirements: Sequence[SpecRequirement] | None = None, *,
             source: str | None = None) -> Coverage:
    """Which `wire` requirements and clauses the cases cite. `requirements` defaults to the
    packaged index; `source` says where given requirements came from (a spec folder). A case
    that cites a clause (`REQ-CORE-010.2`) covers that clause and its requirement."""
    by_req: dict[str, list[str]] = {}
    by_assertion: dict[str, list[str]] = {}
    for c in cases:
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
    whole = [(c.id, cited) for c in cases for cited in c.requirements if cited in split]
    return Coverage(wire, {r: sorted(set(v), key=v.index) for r, v in by_req.items()}, source, unknown,
                    assertions, by_assertion, whole)


def render_matrix(cov: Coverage) -> str:
    """One line per wire requirement with the cases that cite it, then the coverage figures."""
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
    return "\n".join(lines) + "\n"
