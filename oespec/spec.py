"""Numbered requirements of the normative spec (`spec/*.md`), as data.

A requirement is a paragraph or a list item whose first words are `**REQ-<AREA>-<NNN>** *(tag)*`:

    **REQ-LOAD-004** *(wire)* The first message of every `WatchLoad` stream MUST be `settings`, ...

Its clauses may be marked `[.1]`, `[.2]`, ...: each is an assertion with its own id
(`REQ-CORE-010.2`) a conformance case can cite. The tag says who checks it: `wire` (the
conformance runner), `registry` (`oespec check` / `breaking`) or `client`. Everything cites
requirements by id, so the loader is strict: a malformed marker, an unknown tag or an id defined
twice is an error with a file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from oespec.markdown_blocks import paragraphs
from openengine.contractkit.rules import RuleCatalogue, RuleSpec

TAGS = ("wire", "registry", "client")

# Rule ids of the findings this module reports.
MALFORMED_ID = "SPEC001"
UNKNOWN_TAG = "SPEC002"
DUPLICATE_ID = "SPEC003"
MISSING_TAG = "SPEC004"
UNKNOWN_REFERENCE = "SPEC005"
WIRE_WITHOUT_CASE = "SPEC006"
CLAUSE_MARKERS = "SPEC007"
AREA_UNCLAIMED = "SPEC008"
# The areas of the spec as a whole, each with the one page that states its requirements; every
# other area is a profile's (`requirement_areas` in profiles.yaml).
SPEC_WIDE_AREAS = {"SVC": "services.md", "ADD": "additions.md", "VER": "versioning.md"}
# The README step a maintainer follows to give an area to its profile, for the hint of SPEC008.
ADD_A_PROFILE_STEP = "README.md, \"Add a profile\", the `profiles.yaml` row"
# Where the conformance runner's cases are written, for the hint of SPEC006.
CASES_DIR = "openengine/conformance/cases/"
SPEC_RULES = RuleCatalogue("spec", (RuleSpec(rule_id, name, "spec", category, purpose, Severity.ERROR)
                                    for rule_id, name, category, purpose in (
    (MALFORMED_ID, "requirement-id", "requirements", "a requirement marker is a well-formed id such as REQ-LOAD-004"),
    (UNKNOWN_TAG, "requirement-tag", "requirements", f"a requirement's tag is one of {', '.join(TAGS)}"),
    (DUPLICATE_ID, "requirement-unique", "requirements", "each requirement id is defined once across spec/"),
    (MISSING_TAG, "requirement-tagged", "requirements",
     "every requirement carries its tag in parentheses after the id"),
    (UNKNOWN_REFERENCE, "requirement-reference", "references",
     "every requirement id cited by code, cases or pages is defined in spec/"),
    (WIRE_WITHOUT_CASE, "wire-requirement-has-case", "coverage",
     "every wire requirement is cited by at least one conformance case"),
    (CLAUSE_MARKERS, "clause-markers", "requirements",
     "the clause markers of a requirement are numbered [.1], [.2], ... in order"),
    (AREA_UNCLAIMED, "area-claimed", "coverage",
     "every requirement area belongs to a profile (its `requirement_areas` in profiles.yaml) or is an area of "
     "the spec as a whole, stated on its own page"))))

ID_PATTERN = r"REQ-[A-Z][A-Z0-9]*-[0-9]{3}"
_ID_RE = re.compile(rf"^{ID_PATTERN}$")
# A requirement id, or the id of one of its clauses (`REQ-CORE-010.2`): used to find references.
_REFERENCE_RE = re.compile(rf"\b{ID_PATTERN}(?:\.[0-9]+)?\b")
# Where a clause starts inside a requirement's text: `[.2]`.
_CLAUSE_RE = re.compile(r"\[\.([0-9]+)\]")
# The start of a requirement: bold marker, then the italic tag in parentheses.
_MARKER_RE = re.compile(r"^\*\*(?P<id>[^*]*)\*\*(?P<rest>.*)$")
_TAG_RE = re.compile(r"^\s*\*\((?P<tag>[^)]*)\)\*(?P<text>.*)$")
# What a requirement marker looks like to a careless writer: `**REQ-...`, `**req_...`, `**REQ ...`.
# (`**REQUIRED**` and other bold words are not candidates.)
_CANDIDATE_RE = re.compile(r"^\*\*\s*req[-_ ]", re.IGNORECASE)
_LINK_RE = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_EMPHASIS_RE = re.compile(r"\*+")


@dataclass(frozen=True)
class Assertion:
    """One marked clause of a requirement: `REQ-CORE-010.2` and the words of that clause."""

    id: str
    text: str

    @property
    def requirement(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class Requirement:
    """One numbered requirement. `text` is its sentence(s) without the id, tag and clause
    markup; `assertions` are its marked clauses (none when it is stated as one)."""

    id: str
    tag: str
    text: str
    file: str
    line: int
    assertions: tuple[Assertion, ...] = ()

    @property
    def ids(self) -> tuple[str, ...]:
        """The requirement's id and the ids of its clauses: everything that may cite it."""
        return (self.id,) + tuple(a.id for a in self.assertions)

    @property
    def area(self) -> str:
        """`REQ-LOAD-003` -> `LOAD`."""
        return self.id.split("-")[1]

    @property
    def anchor(self) -> str:
        """The id of the anchor the site puts on the requirement (site/hooks.py)."""
        return self.id.lower()

    @property
    def number(self) -> int:
        return int(self.id.rsplit("-", 1)[1])

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


class SpecError(Exception):
    """The spec has malformed, mis-tagged or duplicate requirements; `diagnostics` lists them all."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(_one_line(d) for d in self.diagnostics))


def _one_line(d: Diagnostic) -> str:
    where = f"{d.path}:{d.line}" if d.line else d.path
    text = f"{where}: {d.rule_id}: {d.message}"
    return f"{text} (hint: {d.hint})" if d.hint else text


def spec_files(spec_dir: str | Path = "spec") -> list[Path]:
    """The markdown files of the spec, in a stable order."""
    root = Path(spec_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no spec directory")
    return sorted(p for p in root.rglob("*.md") if p.is_file())


def scan_requirements(spec_dir: str | Path = "spec") -> tuple[list[Requirement], list[Diagnostic]]:
    """Every well-formed requirement of the spec, and a finding for every problem.

    Unlike `load_requirements` this never raises for content problems, so a checker can report
    them all at once.
    """
    requirements: list[Requirement] = []
    diagnostics: list[Diagnostic] = []
    for path in spec_files(spec_dir):
        found, problems = parse_markdown(path.read_text(encoding="utf-8"), path.as_posix())
        requirements.extend(found)
        diagnostics.extend(problems)

    first: dict[str, Requirement] = {}
    for req in requirements:
        earlier = first.setdefault(req.id, req)
        if earlier is not req:
            diagnostics.append(Diagnostic.at(
                req.file, Loc(req.line, 1), DUPLICATE_ID, Severity.ERROR,
                f"{req.id} is already defined at {earlier.location}",
                "give this requirement the next free number of its area", first=earlier.location))
    diagnostics.sort(key=Diagnostic.sort_key)
    return list(first.values()), diagnostics


def load_requirements(spec_dir: str | Path = "spec") -> list[Requirement]:
    """The spec's requirements in file and line order; raises `SpecError` on any problem."""
    requirements, diagnostics = scan_requirements(spec_dir)
    if diagnostics:
        raise SpecError(diagnostics)
    return requirements


def referenced_ids(text: str) -> list[str]:
    """Requirement ids mentioned in `text`, in first-seen order, without repeats."""
    return list(dict.fromkeys(_REFERENCE_RE.findall(text)))


def parse_markdown(text: str, file: str) -> tuple[list[Requirement], list[Diagnostic]]:
    """Requirements and problems of one markdown document. `file` is used in locations."""
    lines = text.splitlines()
    found: list[Requirement] = []
    problems: list[Diagnostic] = []
    for start, block in paragraphs(text):
        if not _CANDIDATE_RE.match(block):
            continue
        column = lines[start].find(block.split(" ", 1)[0]) + 1
        req, problem = _parse_block(block, file, start + 1, column)
        if req:
            found.append(req)
        if problem:
            problems.append(problem)
    return found, problems


def _parse_block(block: str, file: str, line: int, column: int
                 ) -> tuple[Requirement | None, Diagnostic | None]:
    def refused(rule_id: str, message: str, hint: str) -> tuple[None, Diagnostic]:
        return None, Diagnostic.at(file, Loc(line, column), rule_id, Severity.ERROR, message, hint)

    marker = _MARKER_RE.match(block)
    if not marker or not _ID_RE.match(marker.group("id")):
        shown = marker.group("id") if marker else block.split()[0]
        return refused(MALFORMED_ID, f"malformed requirement id {shown!r}",
                       "write the id in bold as **REQ-<AREA>-<NNN>**: an upper-case area and three digits")
    req_id = marker.group("id")
    if req_id.endswith("-000"):
        return refused(MALFORMED_ID, f"malformed requirement id {req_id!r}: numbers start at 001",
                       "give this requirement the next free number of its area")
    tagged = _TAG_RE.match(marker.group("rest"))
    if not tagged:
        return refused(MISSING_TAG, f"{req_id} has no tag",
                       f"follow the id with one of {', '.join(f'*({t})*' for t in TAGS)}")
    tag = tagged.group("tag").strip()
    if tag not in TAGS:
        return refused(UNKNOWN_TAG, f"{req_id} has unknown tag {tag!r}", f"use one of: {', '.join(TAGS)}")
    text = _plain(tagged.group("text"))
    if not text:
        return refused(MALFORMED_ID, f"{req_id} has no text", "state the requirement after the tag")
    text, clauses = _clauses(text)
    numbers = [n for n, _ in clauses]
    if numbers and numbers != list(range(1, len(numbers) + 1)):
        return refused(CLAUSE_MARKERS, f"{req_id} marks its clauses {', '.join(f'[.{n}]' for n in numbers)}",
                       "number the clauses [.1], [.2], ... in the order they are written, each once")
    if len(numbers) == 1:
        return refused(CLAUSE_MARKERS, f"{req_id} marks a single clause",
                       "mark every clause of a requirement that has several, or none when it states one")
    empty = [n for n, words in clauses if not words]
    if empty:
        return refused(CLAUSE_MARKERS, f"{req_id} clause [.{empty[0]}] has no text",
                       "write the clause after its marker")
    assertions = tuple(Assertion(f"{req_id}.{n}", words) for n, words in clauses)
    return Requirement(req_id, tag, text, file, line, assertions), None


def _clauses(text: str) -> tuple[str, list[tuple[int, str]]]:
    """The text without clause markers, and each marked clause (number, words) up to the next
    marker. Markers inside `code` spans are not markers."""
    marked = [_CLAUSE_RE.sub(lambda m: f"\x00{m.group(1)}\x00", part) if i % 2 == 0 else part
              for i, part in enumerate(text.split("`"))]
    pieces = "`".join(marked).split("\x00")
    clauses = [(int(pieces[k]), " ".join(pieces[k + 1].split())) for k in range(1, len(pieces) - 1, 2)]
    return " ".join("".join(pieces[0::2]).split()), clauses


def _plain(text: str) -> str:
    """The words of a requirement: links reduced to their text, bold and italic markers dropped,
    whitespace collapsed. `code` spans are kept as written (they name fields and RPCs)."""
    parts = _LINK_RE.sub(r"\1", text).split("`")
    # Even-numbered parts are outside code spans.
    for i in range(0, len(parts), 2):
        parts[i] = _EMPHASIS_RE.sub("", parts[i])
    return " ".join("`".join(parts).split())


def unclaimed_areas(requirements: Iterable[Requirement], profile_areas: Iterable[str]) -> list[Diagnostic]:
    """One finding per requirement area no profile claims and the spec as a whole does not own, at
    its first requirement; and one per spec-wide area stated outside its page."""
    claimed = set(profile_areas)
    first: dict[str, Requirement] = {}
    diags = []
    for r in requirements:
        page = SPEC_WIDE_AREAS.get(r.area)
        if page is not None and Path(r.file).name != page:
            diags.append(Diagnostic(r.file, r.line, 1, AREA_UNCLAIMED, Severity.ERROR,
                                    f"{r.id} is in {r.area}, an area of the spec as a whole, which {page} states",
                                    f"move it to {page}, or number it in an area of this page's profile"))
        if page is None and r.area not in claimed:
            first.setdefault(r.area, r)
    for area, r in first.items():
        diags.append(Diagnostic(r.file, r.line, 1, AREA_UNCLAIMED, Severity.ERROR,
                                f"no profile claims the requirement area {area} ({r.id} and the rest of "
                                f"REQ-{area}-*): their profile's page cannot list them",
                                f"add {area} to the `requirement_areas` of the profile in profiles.yaml "
                                f"({ADD_A_PROFILE_STEP})"))
    return diags
