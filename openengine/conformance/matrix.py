"""The requirement-to-case matrix and the coverage of the spec's `wire` requirements."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from openengine.conformance.cases.base import Case


@dataclass(frozen=True)
class Coverage:
    """Which wire requirements have a case. `wire` maps id -> requirement text."""

    wire: dict[str, str]
    cases_by_requirement: dict[str, list[str]]
    spec_dir: str | None
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
        out = {"spec": self.spec_dir, "wire_requirements": len(self.wire),
               "covered": len(self.covered), "percent": round(self.percent, 1),
               "uncovered": self.uncovered, "unknown_citations": self.unknown}
        if exercised is not None:
            out["exercised"] = len([r for r in self.wire if r in exercised])
        return out


def find_spec_dir(spec_dir=None) -> Path | None:
    """The spec folder: the given one, `./spec`, or the one next to this package's checkout."""
    candidates = [Path(spec_dir)] if spec_dir else [
        Path("spec"), Path(__file__).resolve().parents[2] / "spec"]
    for c in candidates:
        if c.is_dir() and any(c.glob("*.md")):
            return c
    if spec_dir:
        raise FileNotFoundError(f"{spec_dir}: no spec folder")
    return None


def coverage(cases: list[Case], *, spec_dir=None) -> Coverage:
    by_req: dict[str, list[str]] = {}
    for c in cases:
        if not c.observes:
            continue
        for req in c.requirements:
            by_req.setdefault(req, []).append(c.id)
    root = find_spec_dir(spec_dir)
    if root is None:
        return Coverage({}, by_req, None)
    from codegen.spec import load_requirements

    reqs = load_requirements(root)
    wire = {r.id: r.text for r in reqs if r.tag == "wire"}
    known = {r.id for r in reqs}
    unknown = sorted(r for r in by_req if r not in known)
    return Coverage(wire, by_req, root.as_posix(), unknown)


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
