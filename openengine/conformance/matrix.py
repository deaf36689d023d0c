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
from typing import Sequence

from openengine.conformance.cases.base import Case

INDEX = "requirements.json"
PACKAGED = f"packaged index ({INDEX})"


@dataclass(frozen=True)
class SpecRequirement:
    """One numbered requirement of the spec: id, how it is checked (tag), its text and its page."""

    id: str
    tag: str
    text: str
    page: str
    line: int = 0     # where on its page the requirement is written; 0 when the index does not say


@lru_cache(maxsize=1)
def packaged_requirements() -> tuple[SpecRequirement, ...]:
    """The requirement index generated from spec/ and shipped in this package; empty when the
    package was built without it."""
    try:
        text = resources.files(__package__).joinpath(INDEX).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        return ()
    return tuple(SpecRequirement(r["id"], r["tag"], r["text"], r["page"], r.get("line", 0))
                 for r in json.loads(text)["requirements"])


@dataclass(frozen=True)
class Coverage:
    """Which wire requirements have a case. `wire` maps id -> requirement text."""

    wire: dict[str, str]
    cases_by_requirement: dict[str, list[str]]
    source: str | None            # where the requirements came from; None when none were known
    # Ids cited by cases that no requirement of the spec defines (stale citations).
    unknown: list[str] = field(default_factory=list)

    @property
    def covered(self) -> list[str]:
        return [r for r in self.wire if self.cases_by_requirement.get(r)]

    @property
    def uncovered(self) -> list[str]:
        return [r for r in self.wire if not self.cases_by_requirement.get(r)]

    @property
    def percent(self) -> float:
        return 100.0 * len(self.covered) / len(self.wire) if self.wire else 100.0

    def as_dict(self, exercised: set[str] | None = None) -> dict:
        out = {"spec": self.source, "wire_requirements": len(self.wire),
               "covered": len(self.covered), "percent": round(self.percent, 1),
               "uncovered": self.uncovered, "unknown_citations": self.unknown}
        if exercised is not None:
            out["exercised"] = len([r for r in self.wire if r in exercised])
        return out


def coverage(cases: list[Case], requirements: Sequence[SpecRequirement] | None = None, *,
             source: str | None = None) -> Coverage:
    """Which `wire` requirements the cases cite. `requirements` defaults to the packaged index;
    `source` says where given requirements came from (a spec folder)."""
    by_req: dict[str, list[str]] = {}
    for c in cases:
        if not c.observes:
            continue
        for req in c.requirements:
            by_req.setdefault(req, []).append(c.id)
    if requirements is None:
        requirements, source = packaged_requirements(), PACKAGED
    if not requirements:
        return Coverage({}, by_req, None)
    wire = {r.id: r.text for r in requirements if r.tag == "wire"}
    known = {r.id for r in requirements}
    unknown = sorted(r for r in by_req if r not in known)
    return Coverage(wire, by_req, source, unknown)


def render_matrix(cov: Coverage, *, width: int = 100) -> str:
    """One line per wire requirement with the cases that check it, then the coverage figure."""
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
