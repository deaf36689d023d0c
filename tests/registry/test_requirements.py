"""Every requirement of the spec tagged `registry` is enforced by a rule whose catalogue entry cites
it, and each such rule has a fixture on which it fails (issue: close the registry loop)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from oespec.breaking import catalogue as breaking_catalogue
from oespec.check import RULES as CHECK_RULES
from oespec.cli import run
from oespec.spec import scan_requirements

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
REQUIREMENTS = scan_requirements(ROOT / "spec")[0]
REGISTRY_REQS = sorted(r.id for r in REQUIREMENTS if r.tag == "registry")


def _citing() -> dict[str, set[str]]:
    cited: dict[str, set[str]] = {}
    for r in CHECK_RULES:
        for req in r.requirements:
            cited.setdefault(req, set()).add(r.id)
    for spec in breaking_catalogue().specs():   # the upstream gate's ids among them
        for req in spec.requirements:
            cited.setdefault(req, set()).add(spec.id)
    return cited


def _failing_rules() -> set[str]:
    """Rule ids some fixture expects as a failure (check: any listed finding; breaking: warning or error)."""
    failing = set()
    yaml = YAML(typ="safe")
    for folder in ("registry/invalid", "contract"):
        for expected in (DATA / folder).glob("*/expected.yaml"):
            failing |= {entry["rule"] for entry in yaml.load(expected.read_text())}
    for expected in (DATA / "breaking").glob("*/expected.yaml"):
        for entry in yaml.load(expected.read_text())["findings"] or []:
            if entry["severity"] in ("warning", "error"):
                failing.add("buf:*" if entry["rule"].startswith("buf:") else entry["rule"])
    # The upstream gate's cases are edits of upstream's own files, kept beside its tests.
    from tests.upstream.test_pin_and_gate import CHANGES
    failing |= {change[4] for change in CHANGES.values()}
    return failing


def test_the_spec_has_registry_requirements():
    assert len(REGISTRY_REQS) >= 20
    assert "REQ-ADD-004" in REGISTRY_REQS and "REQ-ADD-009" in REGISTRY_REQS


@pytest.mark.parametrize("req", REGISTRY_REQS)
def test_every_registry_requirement_has_a_rule_that_cites_it(req):
    assert _citing().get(req), f"{req} is tagged registry but no check or breaking rule cites it"


@pytest.mark.parametrize("req", REGISTRY_REQS)
def test_every_registry_requirement_has_a_failing_fixture(req):
    rules = _citing().get(req, set())
    assert rules & _failing_rules(), f"no fixture makes a rule citing {req} fail ({sorted(rules)})"


def test_rules_cite_only_registry_requirements():
    tags = {r.id: r.tag for r in REQUIREMENTS}
    for r in CHECK_RULES:
        for req in r.requirements:
            assert tags.get(req) == "registry", f"{r.id} cites {req}, which is not a registry requirement"


def test_the_missing_minimum_and_the_current_state_have_rules():
    cited = _citing()
    by_id = {r.id: r for r in CHECK_RULES}
    assert any(by_id[i].name == "limit-minimum" for i in cited["REQ-ADD-004"] if i in by_id)
    state = [by_id[i] for i in cited["REQ-ADD-009"] if i in by_id]
    assert state and all(str(r.severity) == "warning" for r in state)


def test_list_rules_shows_the_cited_requirements(capsys):
    assert run(["check", "--list-rules"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("OE049"))
    assert "REQ-ADD-004" in line


# --- OE053: a change since the last commit without a revision bump --------------------------------

def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@e", "PATH": "/usr/bin:/bin", "HOME": str(cwd)})


@pytest.fixture
def repo(tmp_path):
    shutil.copy(DATA / "registry" / "valid" / "minimal" / "profiles.yaml", tmp_path / "profiles.yaml")
    (tmp_path / "proto").mkdir()
    (tmp_path / "proto" / "x.proto").write_text('syntax = "proto3";\n')
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def _oe053(repo: Path, capsys) -> list[dict]:
    run(["check", str(repo / "profiles.yaml"), "--no-contract", "--proto-root", str(repo / "proto"),
         "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    findings = doc if isinstance(doc, list) else doc.get("findings", doc.get("diagnostics", []))
    return [f for f in findings if f["rule_id"] == "OE053"]


def test_unchanged_checkout_has_no_revision_warning(repo, capsys):
    assert _oe053(repo, capsys) == []


def test_registry_edit_without_revision_bump_warns_at_the_revision(repo, capsys):
    path = repo / "profiles.yaml"
    path.write_text(path.read_text().replace("description: Longest queue.", "description: The longest queue."))
    hits = _oe053(repo, capsys)
    assert [(f["line"], f["severity"]) for f in hits] == [(2, "warning")]
    path.write_text(path.read_text().replace("revision: 1", "revision: 2"))
    assert _oe053(repo, capsys) == []


def test_proto_edit_without_revision_bump_warns(repo, capsys):
    (repo / "proto" / "y.proto").write_text('syntax = "proto3";\n')
    assert _oe053(repo, capsys)


def test_outside_git_there_is_no_last_commit_state(tmp_path):
    from oespec.check.last_commit import last_commit_state

    shutil.copy(DATA / "registry" / "valid" / "minimal" / "profiles.yaml", tmp_path / "profiles.yaml")
    assert last_commit_state(tmp_path / "profiles.yaml") is None
