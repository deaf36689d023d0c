"""The toolkit's one cache: a compile or a plan is reused only while every input is unchanged, and
any edit makes the next run compute afresh and see it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import oespec.commands.generate as generate_command
import oespec.protoc as protoc
from oespec.buildcache import KEPT, BuildCache, for_checkout, inputs_digest
from oespec.cli import run

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "generate" / "minimal"
COMMON = "proto/openengine/v1/common.proto"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(DATA, root)
    shutil.copy(REPO / "proto" / "openengine" / "v1" / "options.proto", root / "proto" / "openengine" / "v1")
    return root


@pytest.fixture
def plans(monkeypatch) -> list[int]:
    """Counts the plans `oespec generate` computes (a reused plan is not computed)."""
    computed: list[int] = []
    real = generate_command.plan

    def counting(*args, **kwargs):
        computed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_command, "plan", counting)
    monkeypatch.delenv("OESPEC_NO_CACHE", raising=False)
    return computed


def _generate_check(root: Path, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = run(["generate", str(root / "profiles.yaml"), "--root", str(root), "--check", "--format", "json"])
    return code, [d["path"] for d in json.loads(capsys.readouterr().out)["diagnostics"]]


def test_an_entry_round_trips_and_the_cache_can_be_turned_off(tree: Path, monkeypatch):
    cache = BuildCache(tree, tree / "profiles.yaml")
    assert cache.get("plan-all") is None
    cache.put("plan-all", b"one")
    assert cache.get("plan-all") == b"one"
    assert cache.folder.parent == tree / "build" / "oespec-cache"
    monkeypatch.setenv("OESPEC_NO_CACHE", "1")
    assert for_checkout(tree, tree / "profiles.yaml") is None


@pytest.mark.parametrize("edit", ["profiles.yaml", "proto/openengine/v1/extra.proto", "spec/new.md",
                                  "openengine/engine/engine_config.schema.json",
                                  "conformance/reports/engine.json"])
def test_every_listed_input_is_part_of_the_key(tree: Path, edit: str):
    before = inputs_digest(tree, tree / "profiles.yaml")
    path = tree / edit
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text() if path.exists() else "") + "\n")
    assert inputs_digest(tree, tree / "profiles.yaml") != before


def test_a_compile_is_reused_only_for_the_same_checkout(tree: Path, monkeypatch):
    sources = {p.relative_to(tree / "proto").as_posix(): p.read_text() for p in (tree / "proto").rglob("*.proto")}
    first = protoc.compile_descriptor_set(sources, cache=BuildCache(tree, tree / "profiles.yaml"))

    def no_protoc(*args, **kwargs):
        raise AssertionError("protoc ran although the same sources were compiled before")

    monkeypatch.setattr(protoc, "_compile_descriptor_set", no_protoc)
    assert protoc.compile_descriptor_set(sources, cache=BuildCache(tree, tree / "profiles.yaml")) == first

    monkeypatch.undo()
    common = tree / COMMON
    common.write_text(common.read_text().replace("message EngineError { string message = 1; }",
                                                 "message EngineError { string message = 1; uint32 code = 2; }"))
    edited = {p.relative_to(tree / "proto").as_posix(): p.read_text() for p in (tree / "proto").rglob("*.proto")}
    fds = protoc.compile_descriptor_set(edited, cache=BuildCache(tree, tree / "profiles.yaml"))
    rel = COMMON[len("proto/"):]
    error = next(m for f in fds.file if f.name == rel for m in f.message_type if m.name == "EngineError")
    assert [f.name for f in error.field] == ["message", "code"]


def test_a_failed_compile_is_never_kept(tree: Path):
    cache = BuildCache(tree, tree / "profiles.yaml")
    with pytest.raises(protoc.ProtocError):
        protoc.compile_descriptor_set({"broken.proto": 'syntax = "proto3"; message {'}, cache=cache)
    assert not cache.folder.exists()


def test_only_the_latest_keys_are_kept(tree: Path):
    import os

    registry = tree / "profiles.yaml"
    for n in range(KEPT + 2):
        registry.write_text(registry.read_text() + "\n")
        cache = BuildCache(tree, registry)
        cache.put("entry", str(n).encode())
        os.utime(cache.folder, ns=(n * 10**9, n * 10**9))   # a strictly increasing write order
    BuildCache(tree, registry).put("other", b"")
    kept = list((tree / "build" / "oespec-cache").iterdir())
    assert len(kept) == KEPT and cache.folder in kept


def test_a_plan_is_reused_until_a_proto_changes(tree: Path, plans: list[int], capsys):
    assert run(["generate", str(tree / "profiles.yaml"), "--root", str(tree)]) == 0
    assert _generate_check(tree, capsys) == (0, [])
    computed = len(plans)
    assert _generate_check(tree, capsys) == (0, [])
    assert len(plans) == computed, "nothing changed, yet the plan was computed again"

    common = tree / COMMON
    common.write_text(common.read_text().replace("message EngineError { string message = 1; }",
                                                 "message EngineError { string message = 1; uint32 code = 2; }"))
    code, stale = _generate_check(tree, capsys)
    assert len(plans) == computed + 1
    assert code == 1 and stale, "the edited proto must make the generated pages stale"
    assert any("common" in path for path in stale)


def test_a_plan_is_computed_again_when_a_file_appears_in_a_folder_it_read(tree: Path, plans: list[int], capsys):
    assert run(["generate", str(tree / "profiles.yaml"), "--root", str(tree)]) == 0
    assert _generate_check(tree, capsys) == (0, [])
    computed = len(plans)
    extra = tree / "proto" / "openengine" / "v1" / "extra.proto"
    extra.write_text('syntax = "proto3";\npackage openengine.v1;\nmessage Extra { string note = 1; }\n')
    code, stale = _generate_check(tree, capsys)
    assert len(plans) == computed + 1
    assert code == 1 and any("extra" in path for path in stale)
    extra.unlink()
    assert _generate_check(tree, capsys) == (0, [])


def test_a_registry_edit_is_seen(tree: Path, plans: list[int], capsys):
    assert run(["generate", str(tree / "profiles.yaml"), "--root", str(tree)]) == 0
    assert _generate_check(tree, capsys) == (0, [])
    registry = tree / "profiles.yaml"
    text = registry.read_text()
    assert "revision:" in text
    registry.write_text(text.replace("# ", "#  ", 1) if "# " in text else text + "\n# a comment\n")
    computed = len(plans)
    _generate_check(tree, capsys)
    assert len(plans) == computed + 1


def test_a_file_that_appears_where_the_plan_only_looked_is_seen(tree: Path, plans: list[int], capsys):
    """The minimal tree has no runtime input schemas; adding one must make the next run plan afresh
    and publish it."""
    assert run(["generate", str(tree / "profiles.yaml"), "--root", str(tree)]) == 0
    assert _generate_check(tree, capsys) == (0, [])
    computed = len(plans)
    source = tree / "openengine" / "engine" / "engine_config.schema.json"
    assert not source.exists()
    source.parent.mkdir(parents=True)
    source.write_text('{"type": "object"}\n')
    code, stale = _generate_check(tree, capsys)
    assert len(plans) == computed + 1
    assert code == 1 and "schemas/engine_config.schema.json" in stale


def test_check_reports_the_same_findings_from_the_kept_registry(tree: Path, capsys, monkeypatch):
    monkeypatch.delenv("OESPEC_NO_CACHE", raising=False)
    registry = tree / "profiles.yaml"
    registry.write_text(registry.read_text().replace("scope: engine", "scope: engnie", 1))

    def check() -> list[dict]:
        capsys.readouterr()
        run(["check", str(registry), "--proto-root", str(tree / "proto"), "--no-head", "--format", "json"])
        return json.loads(capsys.readouterr().out)["diagnostics"]

    first = check()
    assert any(d["rule_id"] == "OE001" for d in first)
    assert BuildCache(tree, registry).load("resolved-registry") is not None
    assert check() == first
