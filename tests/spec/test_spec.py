"""The requirement loader, on the real spec and on small made-up ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oespec.spec import (
    AREA_UNCLAIMED,
    CLAUSE_MARKERS,
    DUPLICATE_ID,
    MALFORMED_ID,
    MISSING_TAG,
    SPEC_WIDE_AREAS,
    TAGS,
    UNKNOWN_TAG,
    SpecError,
    load_requirements,
    referenced_ids,
    scan_requirements,
    unclaimed_areas,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"

RFC2119 = re.compile(r"\b(MUST|MUST NOT|REQUIRED|SHALL|SHALL NOT|SHOULD|SHOULD NOT|MAY|OPTIONAL)\b")


@pytest.fixture(scope="module")
def real():
    return load_requirements(SPEC)


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.write_text(text, encoding="utf-8")
    return path


# --- the real spec ------------------------------------------------------------------------------

def test_real_spec_loads_without_problems(real):
    assert real, "the spec defines no requirements"
    assert all(r.tag in TAGS for r in real)


def test_real_ids_are_unique(real):
    ids = [r.id for r in real]
    assert len(ids) == len(set(ids))


def _profile_areas() -> dict[str, str]:
    from oespec.registry import load_registry

    registry = load_registry(ROOT / "profiles.yaml").registry
    assert registry is not None
    return {area: p.name for p in registry.profiles for area in p.requirement_areas}


def test_every_area_belongs_to_a_profile_or_to_the_spec_as_a_whole(real, tmp_path):
    by_area = {r.area for r in real}
    profile_areas = _profile_areas()
    assert set(SPEC_WIDE_AREAS) <= by_area and {"CORE", "LOAD"} <= by_area & set(profile_areas)   # not vacuous
    assert unclaimed_areas(real, profile_areas) == []
    # A page whose area no profile claims: one finding, at its first requirement, naming the step.
    assert "NEWAREA" not in profile_areas
    page = write(tmp_path, "new.md", "# New\n\n**REQ-NEWAREA-001** *(wire)* It MUST.\n\n"
                                     "**REQ-NEWAREA-002** *(wire)* It MUST.\n")
    [found] = unclaimed_areas(load_requirements(page.parent), profile_areas)
    assert (found.rule_id, Path(found.path).name, found.line) == (AREA_UNCLAIMED, "new.md", 3)
    assert "requirement_areas" in found.hint and "README.md" in found.hint and "Add a profile" in found.hint


def test_every_requirement_states_a_keyword(real):
    lacking = [r.id for r in real if not RFC2119.search(r.text)]
    assert lacking == []


def test_every_tag_is_used(real):
    assert {r.tag for r in real} == set(TAGS)


def test_text_has_no_markup_and_location_points_at_the_id(real):
    for r in real:
        assert "**" not in r.text and not r.text.startswith("*(")
        line = Path(r.file).read_text(encoding="utf-8").splitlines()[r.line - 1]
        assert f"**{r.id}**" in line


def test_spec_cites_only_defined_requirements(real):
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(SPEC.rglob("*.md")))
    assert unknown_references(text, real) == []


def test_project_cites_only_defined_requirements(real):
    """Tests, checks and the conformance runner cite ids; every cited id must exist."""
    cited: dict[str, list[str]] = {}
    # The profile the add-a-profile test adds brings its own spec page: its ids count as defined.
    real = list(real) + load_requirements(ROOT / "tests" / "data" / "add_a_profile")
    for folder in ("oespec", "openengine", "tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".md", ".yaml", ".yml", ".json", ".proto", ".txt"):
                continue
            if "spec" in path.relative_to(ROOT).parts[:2] or "__pycache__" in path.parts:
                continue  # this test's own made-up ids
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for rid in unknown_references(text, real):
                cited.setdefault(rid, []).append(str(path.relative_to(ROOT)))
    assert cited == {}


# --- made-up specs: what is found ---------------------------------------------------------------

def test_paragraphs_and_list_items_are_requirements(tmp_path):
    write(tmp_path, "a.md", """# Title

**REQ-LOAD-001** *(wire)* The server MUST send the
settings first.

- **REQ-LOAD-002** *(client)* A client MUST read
  them.
1. **REQ-ADD-001** *(registry)* **Core.** Say which, and see [Load](load.md).

Some prose with **REQ-LOAD-009** in the middle is a reference, not a definition.
**REQUIRED** words in bold are not requirements either.
""")
    reqs = load_requirements(tmp_path)
    assert [(r.id, r.tag, r.line) for r in reqs] == [
        ("REQ-LOAD-001", "wire", 3), ("REQ-LOAD-002", "client", 6), ("REQ-ADD-001", "registry", 8)]
    assert reqs[0].text == "The server MUST send the settings first."
    assert reqs[1].text == "A client MUST read them."
    assert reqs[2].text == "Core. Say which, and see Load."
    assert reqs[0].file.endswith("a.md") and reqs[0].area == "LOAD" and reqs[0].number == 1


def test_code_spans_keep_their_characters(tmp_path):
    write(tmp_path, "a.md", "**REQ-CAP-001** *(wire)* Names like `a*b` and `**x**` MUST stay.\n")
    (req,) = load_requirements(tmp_path)
    assert req.text == "Names like `a*b` and `**x**` MUST stay."


def test_code_fences_are_skipped(tmp_path):
    write(tmp_path, "a.md", """Example:

```markdown
**REQ-LOAD-1** *(nonsense)* not parsed
```

**REQ-LOAD-001** *(wire)* Real, and it MUST count.
""")
    reqs = load_requirements(tmp_path)
    assert [(r.id, r.line) for r in reqs] == [("REQ-LOAD-001", 7)]


def test_files_in_subfolders_are_read_in_order(tmp_path):
    (tmp_path / "b").mkdir()
    write(tmp_path / "b", "z.md", "**REQ-B-001** *(wire)* It MUST.\n")
    write(tmp_path, "a.md", "**REQ-A-001** *(wire)* It MUST.\n")
    assert [r.id for r in load_requirements(tmp_path)] == ["REQ-A-001", "REQ-B-001"]


def test_marked_clauses_are_assertions_with_their_own_ids(tmp_path):
    write(tmp_path, "a.md", """**REQ-LOAD-001** *(wire)* For every stream: [.1] the server MUST
send `[.9]` the settings first, [.2] and MUST number
them.
""")
    (req,) = load_requirements(tmp_path)
    assert req.text == "For every stream: the server MUST send `[.9]` the settings first, and MUST number them."
    assert [(a.id, a.text, a.requirement) for a in req.assertions] == [
        ("REQ-LOAD-001.1", "the server MUST send `[.9]` the settings first,", "REQ-LOAD-001"),
        ("REQ-LOAD-001.2", "and MUST number them.", "REQ-LOAD-001")]
    assert req.ids == ("REQ-LOAD-001", "REQ-LOAD-001.1", "REQ-LOAD-001.2")
    assert unknown_references("see REQ-LOAD-001.2 and REQ-LOAD-001.3", [req]) == ["REQ-LOAD-001.3"]


@pytest.mark.parametrize("text, says", [
    ("**REQ-LOAD-001** *(wire)* [.2] It MUST. [.1] It MUST.", "marks its clauses [.2], [.1]"),
    ("**REQ-LOAD-001** *(wire)* [.1] It MUST. [.1] It MUST.", "marks its clauses [.1], [.1]"),
    ("**REQ-LOAD-001** *(wire)* [.1] It MUST.", "marks a single clause"),
    ("**REQ-LOAD-001** *(wire)* It MUST. [.1] [.2] It MUST.", "clause [.1] has no text"),
])
def test_misnumbered_clause_markers_are_reported_at_the_requirement(tmp_path, text, says):
    write(tmp_path, "a.md", "# T\n\n" + text + "\n")
    found, problems = scan_requirements(tmp_path)
    assert found == []
    assert [(d.rule_id, d.line) for d in problems] == [(CLAUSE_MARKERS, 3)]
    assert says in problems[0].message and problems[0].hint


# --- made-up specs: what is reported ------------------------------------------------------------

@pytest.mark.parametrize("text, rule", [
    ("**REQ-LOAD-3** *(wire)* It MUST.", MALFORMED_ID),
    ("**REQ-load-003** *(wire)* It MUST.", MALFORMED_ID),
    ("**REQ_LOAD_003** *(wire)* It MUST.", MALFORMED_ID),
    ("**REQ-LOAD-0003** *(wire)* It MUST.", MALFORMED_ID),
    ("**REQ-LOAD-000** *(wire)* It MUST.", MALFORMED_ID),
    ("**REQ-LOAD** *(wire)* It MUST.", MALFORMED_ID),
    ("**REQ-LOAD-003** *(server)* It MUST.", UNKNOWN_TAG),
    ("**REQ-LOAD-003** (wire) It MUST.", MISSING_TAG),
    ("**REQ-LOAD-003** It MUST.", MISSING_TAG),
    ("**REQ-LOAD-003** *(wire)*", MALFORMED_ID),  # no text after the tag
])
def test_bad_markers_are_reported_with_their_line(tmp_path, text, rule):
    write(tmp_path, "page.md", f"# Page\n\nIntro.\n\n{text}\n")
    found, problems = scan_requirements(tmp_path)
    assert found == []
    assert [(Path(d.path).name, d.line, d.rule_id) for d in problems] == [("page.md", 5, rule)]
    with pytest.raises(SpecError) as err:
        load_requirements(tmp_path)
    assert "page.md:5:" in str(err.value)
    assert err.value.diagnostics[0].rule_id == rule


def test_bad_marker_in_a_list_item_is_located(tmp_path):
    write(tmp_path, "page.md", "Items:\n\n- fine\n- **REQ-ADD-01** *(registry)* It MUST.\n")
    _, problems = scan_requirements(tmp_path)
    assert [(d.line, d.column, d.rule_id) for d in problems] == [(4, 3, MALFORMED_ID)]


def test_duplicate_ids_are_reported_at_the_second_definition(tmp_path):
    write(tmp_path, "a.md", "**REQ-LOAD-001** *(wire)* First MUST.\n")
    write(tmp_path, "b.md", "Intro.\n\n**REQ-LOAD-001** *(client)* Second MUST.\n")
    found, problems = scan_requirements(tmp_path)
    assert [r.file for r in found] == [(tmp_path / "a.md").as_posix()]
    assert [(Path(d.path).name, d.line, d.rule_id) for d in problems] == [("b.md", 3, DUPLICATE_ID)]
    assert problems[0].details["first"].endswith("a.md:1")
    with pytest.raises(SpecError, match=r"b\.md:3: SPEC003"):
        load_requirements(tmp_path)


def test_duplicate_within_one_file(tmp_path):
    write(tmp_path, "a.md", "**REQ-X-001** *(wire)* A MUST.\n\n**REQ-X-001** *(wire)* B MUST.\n")
    _, problems = scan_requirements(tmp_path)
    assert [(d.line, d.rule_id) for d in problems] == [(3, DUPLICATE_ID)]


def test_every_problem_is_reported_at_once(tmp_path):
    write(tmp_path, "a.md", "**REQ-X-1** *(wire)* A.\n\n**REQ-X-002** *(bogus)* B.\n\n"
                            "**REQ-X-003** *(wire)* Fine MUST.\n")
    found, problems = scan_requirements(tmp_path)
    assert [r.id for r in found] == ["REQ-X-003"]
    assert [(d.line, d.rule_id) for d in problems] == [(1, MALFORMED_ID), (3, UNKNOWN_TAG)]


def test_missing_spec_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_requirements(tmp_path / "nowhere")


# --- references ---------------------------------------------------------------------------------

def test_unknown_references_in_text(tmp_path):
    write(tmp_path, "a.md", "**REQ-LOAD-001** *(wire)* A MUST.\n\n**REQ-LOAD-002** *(wire)* B MUST.\n")
    reqs = load_requirements(tmp_path)
    text = "covers REQ-LOAD-001 and REQ-LOAD-007, again REQ-LOAD-007, and REQ-CAP-010."
    assert referenced_ids(text) == ["REQ-LOAD-001", "REQ-LOAD-007", "REQ-CAP-010"]
    assert unknown_references(text, reqs) == ["REQ-CAP-010", "REQ-LOAD-007"]
    assert unknown_references("", reqs) == []


def unknown_references(text: str, requirements) -> list[str]:
    """The ids cited in `text` that no requirement (or clause) defines, sorted."""
    known = {i for r in requirements for i in r.ids}
    return sorted({i for i in referenced_ids(text) if i not in known})
