"""End to end: a real git history in a temporary repository, and the `oespec breaking` command."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from oespec.cli import run
from tests.fixture_cases import breaking_side

BASE_REGISTRY = (breaking_side("wire-field-deleted", "baseline") / "profiles.yaml").read_text()
BASE_PROTO = breaking_side("wire-field-deleted", "baseline") / "proto"
CURRENT_PROTO = breaking_side("wire-field-deleted", "current") / "proto"
# A repository-level buf.yaml the baseline does not have: the check must not depend on either.
BUF_YAML = "version: v2\nmodules:\n  - path: proto\n"


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.invalid",
                          "-c", "commit.gpgsign=false", *args],
                         cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "profiles.yaml").write_text(BASE_REGISTRY)
    shutil.copytree(BASE_PROTO, root / "proto")
    commit(root, "baseline")
    monkeypatch.chdir(root)
    return root


def oespec(capsys, *args: str) -> tuple[int, list[dict]]:
    code = run(["breaking", *args, "--format", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out)["diagnostics"]


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_unchanged_tree_is_clean(repo, capsys):
    code, diags = oespec(capsys, "--against", "HEAD")
    assert code == 0 and diags == []


def test_buf_catches_a_deleted_proto_field_against_head_1(repo, capsys):
    shutil.rmtree(repo / "proto")
    shutil.copytree(CURRENT_PROTO, repo / "proto")
    (repo / "buf.yaml").write_text(BUF_YAML)
    commit(repo, "drop LoadInfo.queued")
    code, diags = oespec(capsys, "--against", "HEAD~1")
    assert code == 1
    [d] = diags
    assert d["rule_id"] == "buf:FIELD_NO_DELETE"
    assert d["path"] == "proto/openengine/v1/load.proto"
    assert d["line"] == line_of(repo / "proto/openengine/v1/load.proto", "message LoadInfo")
    assert d["severity"] == "error" and d["details"]["profile"] == "openengine.load"


def test_registry_break_against_a_branch_name(repo, capsys):
    registry = repo / "profiles.yaml"
    registry.write_text(registry.read_text().replace("default: 20", "default: 5").replace("revision: 3", "revision: 4"))
    code, diags = oespec(capsys, "--against", "main")
    assert code == 1
    [d] = diags
    assert (d["rule_id"], d["path"], d["line"]) == ("OEB055", "profiles.yaml", line_of(registry, "default: 5"))
    assert d["details"]["baseline"] == f"profiles.yaml:{line_of(registry, 'default: 5')}:18 at main"
    assert d["details"]["breaks"] == "both" and d["details"]["bump"] == "major"


def test_a_major_bump_acknowledges_the_break(repo, capsys):
    registry = repo / "profiles.yaml"
    text = registry.read_text().replace("default: 20", "default: 5").replace("revision: 3", "revision: 4")
    text = text.replace('    version: "1.0"\n    mandatory: true', '    version: "2.0"\n    mandatory: true')
    text = text.replace("        changes: First version.\n",
                        '        changes: First version.\n      - version: "2.0"\n        changes: Default 5.\n', 1)
    registry.write_text(text)
    code, diags = oespec(capsys, "--against", "main")
    assert code == 0
    assert [(d["rule_id"], d["severity"]) for d in diags] == [("OEB055", "info")]


def test_github_format_annotates_the_line(repo, capsys):
    registry = repo / "profiles.yaml"
    registry.write_text(registry.read_text().replace("maximum: 1024", "maximum: 512").replace("revision: 3", "revision: 4"))
    code = run(["breaking", "--against", "main", "--format", "github"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith(f"::error file=profiles.yaml,line={line_of(registry, 'maximum: 512')},")
    assert "title=OEB056" in out


def test_baseline_without_registry_or_protos(tmp_path, monkeypatch, capsys):
    root = tmp_path / "fresh"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("nothing yet\n")
    commit(root, "start")
    (root / "profiles.yaml").write_text(BASE_REGISTRY)
    shutil.copytree(BASE_PROTO, root / "proto")
    monkeypatch.chdir(root)
    code, diags = oespec(capsys, "--against", "main")
    assert code == 0
    assert {d["rule_id"] for d in diags} == {"OEB011"}


def test_unknown_ref_is_unusable_input(repo, capsys):
    code, diags = oespec(capsys, "--against", "no-such-branch")
    assert code == 2
    assert diags[0]["rule_id"] == "OEB000" and "no-such-branch" in diags[0]["message"]


def test_unreadable_registry_is_unusable_input(repo, capsys):
    (repo / "profiles.yaml").write_text("registry: [unclosed\n")
    code, diags = oespec(capsys, "--against", "main")
    assert code == 2 and diags[0]["rule_id"] == "OEB000" and diags[0]["line"] == 2


def test_unusable_baseline_registry(repo, capsys):
    (repo / "profiles.yaml").write_text("registry: {revision: 1}\n")
    commit(repo, "broken registry")
    (repo / "profiles.yaml").write_text(BASE_REGISTRY)
    code, diags = oespec(capsys, "--against", "HEAD")
    assert code == 2
    assert diags[0]["rule_id"] == "OEB000" and "baseline" in diags[0]["message"]


def test_protos_removed_entirely(repo, capsys):
    shutil.rmtree(repo / "proto")
    code, diags = oespec(capsys, "--against", "main")
    assert code == 1
    assert [d["rule_id"] for d in diags] == ["buf:FILE_NO_DELETE"]


def test_missing_against_is_a_usage_error(repo, capsys):
    assert run(["breaking"]) == 2


def test_baseline_under_an_older_schema_is_still_compared(repo, capsys):
    registry = repo / "profiles.yaml"
    registry.write_text(BASE_REGISTRY.replace("    scope: model\n", "    scope: model\n    retired_key: true\n", 1))
    commit(repo, "a key the current schema no longer knows")
    registry.write_text(BASE_REGISTRY.replace("default: 20", "default: 5").replace("revision: 3", "revision: 4"))
    code, diags = oespec(capsys, "--against", "HEAD")
    assert code == 1
    assert sorted((d["rule_id"], d["severity"]) for d in diags) == [("OEB000", "warning"), ("OEB055", "error")]


def test_baseline_protos_that_do_not_build(repo, capsys):
    proto = repo / "proto/openengine/v1/load.proto"
    good = proto.read_text()
    proto.write_text(good.replace("uint32 queued = 2;", "Missing queued = 2;"))
    commit(repo, "a proto that does not compile")
    proto.write_text(good)
    code, diags = oespec(capsys, "--against", "HEAD")
    assert code == 2
    assert diags[0]["rule_id"] == "OEB000" and diags[0]["path"] == "proto" and "buf" in diags[0]["message"]


def _major(text: str, profile: str, changes: str) -> str:
    """Raise `profile` of the real registry to its next major, with the history entry for it."""
    start = text.index(f"  - name: {profile}\n")
    head, block = text[:start], text[start:]
    major = int(block.split('version: "', 1)[1].split(".", 1)[0])
    block = block.replace(f'version: "{major}.', f'version: "{major + 1}.', 1)
    old_minor = block.split(f'version: "{major + 1}.', 1)[1].split('"', 1)[0]
    block = block.replace(f'version: "{major + 1}.{old_minor}"', f'version: "{major + 1}.0"', 1)
    entry = f'      - version: "{major + 1}.0"\n        changes: {changes}\n'
    history_end = block.index("    rpcs:")
    return head + block[:history_end] + entry + block[history_end:]


@pytest.mark.slow
def test_ownership_on_the_real_contract_and_upstream_left_to_its_gate(tmp_path, monkeypatch, capsys):
    """EncoderCacheHandle is the proposal's, listed by openengine.encoder and reached through core's
    GenerateRequest.encoder_inputs: a major of encoder alone does not make deleting one of its
    fields legal; majors of both do. A change to a field upstream defines is the upstream gate's
    finding, whatever the bumps."""
    repo_root = Path(__file__).resolve().parents[2]
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shutil.copy(repo_root / "profiles.yaml", root / "profiles.yaml")
    shutil.copytree(repo_root / "proto", root / "proto")
    shutil.copytree(repo_root / "upstream", root / "upstream")
    commit(root, "baseline")
    monkeypatch.chdir(root)
    common = root / "proto" / "openengine" / "v1" / "common.proto"
    text = common.read_text()
    assert "  string transfer_address = 3;\n" in text
    common.write_text(text.replace("  string transfer_address = 3;\n", "  reserved 3;\n"))
    generation = root / "proto" / "openengine" / "v1" / "generation.proto"
    upstream_field = "optional double temperature = 1 "
    assert upstream_field in generation.read_text()
    generation.write_text(generation.read_text().replace(upstream_field, "optional float temperature = 1 "))
    registry = root / "profiles.yaml"
    base = registry.read_text()
    revision = int(base.split("revision: ", 1)[1].split("\n", 1)[0])
    bumped = base.replace(f"revision: {revision}", f"revision: {revision + 1}", 1)
    registry.write_text(_major(bumped, "openengine.encoder", "EncoderCacheHandle loses transfer_address."))
    code, diags = oespec(capsys, "--against", "HEAD")
    wire = [d for d in diags if d["rule_id"].startswith("buf:") and d["path"].endswith("common.proto")]
    assert code == 1 and wire
    assert all(d["severity"] == "error" for d in wire)
    assert all("openengine.core" in d["details"]["profile"] and "openengine.encoder" in d["details"]["profile"]
               for d in wire)
    registry.write_text(_major(_major(bumped, "openengine.encoder", "EncoderCacheHandle loses transfer_address."),
                               "openengine.core", "GenerateRequest.encoder_inputs loses transfer_address."))
    code, diags = oespec(capsys, "--against", "HEAD")
    wire = [d for d in diags if d["rule_id"].startswith("buf:") and d["path"].endswith("common.proto")]
    assert wire and all(d["severity"] == "info" for d in wire)
    # The upstream field: one error, the gate's, at its line; never a buf finding a bump accepts.
    upstream = [d for d in diags if d["path"].endswith("generation.proto")]
    assert [(d["rule_id"], d["severity"], d["line"]) for d in upstream] == [
        ("OEB101", "error", line_of(generation, "optional float temperature = 1 "))]
    assert code == 1