"""`oespec spec`: findings with locations, the requirement list, and citation checks."""

from __future__ import annotations

import json
from pathlib import Path

from oespec.cli import run

ROOT = Path(__file__).resolve().parents[2]


def make_spec(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "page.md").write_text(text, encoding="utf-8")
    return spec


def test_real_spec_is_clean(capsys):
    assert run(["spec", "--spec-dir", str(ROOT / "spec"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["diagnostics"] == []


def test_problems_are_printed_with_rule_and_location(tmp_path, capsys):
    spec = make_spec(tmp_path, "**REQ-A-001** *(registry)* One MUST.\n\n**REQ-A-1** *(registry)* Two MUST.\n\n"
                               "**REQ-A-001** *(registry)* Three MUST.\n")
    assert run(["spec", "--spec-dir", str(spec), "--format", "json"]) == 1
    found = [(Path(d["path"]).name, d["line"], d["rule_id"]) for d in json.loads(capsys.readouterr().out)["diagnostics"]]
    assert found == [("page.md", 3, "SPEC001"), ("page.md", 5, "SPEC003")]


def test_unknown_citations_in_the_spec_and_in_given_paths(tmp_path, capsys):
    spec = make_spec(tmp_path, "**REQ-A-001** *(client)* It MUST; see REQ-A-002.\n")
    cases = tmp_path / "cases.py"
    cases.write_text("# covers REQ-A-001\n\ndef test_x():  # REQ-B-007\n    pass\n", encoding="utf-8")
    assert run(["spec", "--spec-dir", str(spec), "--format", "json", str(cases)]) == 1
    found = [(Path(d["path"]).name, d["line"], d["column"], d["rule_id"])
             for d in json.loads(capsys.readouterr().out)["diagnostics"]]
    assert found == [("cases.py", 3, 18, "SPEC005"), ("page.md", 1, 39, "SPEC005")]


def test_list_as_json(tmp_path, capsys):
    spec = make_spec(tmp_path, "- **REQ-LOAD-001** *(client)* A client MUST poll.\n")
    assert run(["spec", "--spec-dir", str(spec), "--list", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["id"], row["tag"], row["area"], row["line"], row["text"]) == \
        ("REQ-LOAD-001", "client", "LOAD", 1, "A client MUST poll.")


def test_missing_spec_folder_is_unusable_input(tmp_path, capsys):
    assert run(["spec", "--spec-dir", str(tmp_path / "none")]) == 2
    assert "no spec directory" in capsys.readouterr().err


def test_a_wire_requirement_without_a_case_is_located_with_where_cases_are_written(tmp_path, capsys):
    spec = make_spec(tmp_path, "# Structured output\n\n**REQ-CORE-001** *(wire)* Covered MUST.\n\n"
                               "**REQ-SO-001** *(wire)* The engine MUST answer with JSON.\n\n"
                               "**REQ-SO-002** *(client)* A client SHOULD check.\n")
    assert run(["spec", "--spec-dir", str(spec), "--format", "json"]) == 1
    [finding] = json.loads(capsys.readouterr().out)["diagnostics"]
    assert (Path(finding["path"]).name, finding["line"], finding["rule_id"]) == ("page.md", 5, "SPEC006")
    assert "REQ-SO-001" in finding["message"] and "openengine/conformance/cases/" in finding["hint"]
    assert run(["spec", "--spec-dir", str(spec), "--no-cases"]) == 0
