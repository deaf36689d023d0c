"""The build caches on the command path: a compile or a plan is reused only while every input is
unchanged, and any edit makes the next run compute afresh and see it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import oespec.commands.generate as generate_command
import oespec.protoc as protoc
from oespec.cli import run
from oespec.buildcache import BuildCache, _pack, _unpack, for_checkout

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


def test_entries_round_trip_and_a_damaged_entry_is_a_miss(tmp_path: Path):
    cache = BuildCache(tmp_path / "c")
    assert cache.put("k", {"a": b"one", "b": b""})
    assert cache.get("k") == {"a": b"one", "b": b""}
    blob = cache.path("k").read_bytes()
    cache.path("k").write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))   # one flipped bit
    assert cache.get("k") is None
    cache.path("k").write_bytes(blob[: len(blob) // 2])               # truncated
    assert cache.get("k") is None
    assert cache.get("missing") is None
    assert _unpack(_pack({"x": b"1"})) == {"x": b"1"}


def test_the_cache_can_be_turned_off(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("OESPEC_NO_CACHE", "1")
    assert for_checkout(tmp_path, "protoc") is None
    monkeypatch.delenv("OESPEC_NO_CACHE")
    assert for_checkout(tmp_path, "protoc").folder == tmp_path / "build" / "oespec-cache" / "protoc"


def test_a_compile_is_reused_only_for_the_same_sources(tree: Path, monkeypatch):
    cache = BuildCache(tree / "build" / "oespec-cache" / "protoc")
    sources = {p.relative_to(tree / "proto").as_posix(): p.read_text() for p in (tree / "proto").rglob("*.proto")}
    first = protoc.compile_descriptor_set(sources, cache=cache)

    def no_protoc(*args, **kwargs):
        raise AssertionError("protoc ran although the same sources were compiled before")

    monkeypatch.setattr(protoc, "_compile_descriptor_set", no_protoc)
    assert protoc.compile_descriptor_set(sources, cache=cache) == first

    monkeypatch.undo()
    edited = dict(sources)
    rel = COMMON[len("proto/"):]
    edited[rel] = edited[rel].replace("message EngineError { string message = 1; }",
                                      "message EngineError { string message = 1; uint32 code = 2; }")
    fds = protoc.compile_descriptor_set(edited, cache=cache)
    common = next(f for f in fds.file if f.name == rel)
    error = next(m for m in common.message_type if m.name == "EngineError")
    assert [f.name for f in error.field] == ["message", "code"]
    assert len(list(cache.folder.glob("*.bin"))) == 2


def test_a_failed_compile_is_never_cached(tree: Path):
    cache = BuildCache(tree / "build" / "oespec-cache" / "protoc")
    with pytest.raises(protoc.ProtocError):
        protoc.compile_descriptor_set({"broken.proto": 'syntax = "proto3"; message {'}, cache=cache)
    assert not list(cache.folder.glob("*.bin")) if cache.folder.is_dir() else True


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


def test_the_recorder_sees_reads_failed_opens_and_listings_but_not_its_scratch(tmp_path: Path):
    import os
    import tempfile

    from oespec.generate.plancache import recording, snapshot

    data = tmp_path / "input.txt"
    data.write_text("one")
    (tmp_path / "folder").mkdir()
    with recording() as seen:
        data.read_text()
        (tmp_path / "missing.txt").exists()          # a stat: not an open
        with pytest.raises(FileNotFoundError):
            (tmp_path / "absent.txt").read_text()
        os.listdir(tmp_path / "folder")
        with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
            (Path(scratch) / "x").write_text("scratch")
            (Path(scratch) / "x").read_text()
    inputs = snapshot(seen, [], lambda path: True, ())
    assert inputs.files[str(data)][0] == "sha"
    assert inputs.files[str(tmp_path / "absent.txt")] == ["absent"]
    assert not any("scratch" in path or path.endswith("/x") for path in inputs.files)
    assert str(tmp_path / "folder") in inputs.folders
    assert inputs.unchanged(lambda path: True)

    data.write_text("two")
    assert not inputs.unchanged(lambda path: True)
    data.write_text("one")
    (tmp_path / "absent.txt").write_text("now here")
    assert not inputs.unchanged(lambda path: True)
    (tmp_path / "absent.txt").unlink()
    (tmp_path / "folder" / "new").write_text("")
    assert not inputs.unchanged(lambda path: True)


def test_only_the_latest_entries_are_kept(tmp_path: Path):
    import os

    cache = BuildCache(tmp_path / "c", max_entries=3)
    for n in range(5):
        assert cache.put(f"k{n}", {"n": str(n).encode()})
        os.utime(cache.path(f"k{n}"), ns=(n * 10**9, n * 10**9))   # a strictly increasing write order
    cache.put("k5", {"n": b"5"})
    kept = sorted(p.stem for p in cache.folder.glob("*.bin"))
    assert len(kept) == 3 and "k5" in kept and "k0" not in kept and "k1" not in kept


def test_a_file_that_appears_where_the_plan_only_looked_is_seen(tree: Path, plans: list[int], capsys):
    """The minimal tree has no runtime input schemas; the plan tries to open them and the failed
    open is recorded. Adding one must make the next run plan afresh and publish it."""
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
