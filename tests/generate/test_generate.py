"""The generate stage: deterministic, atomic, headed, and cross-checked against the descriptors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from oespec.check import run_rules
from oespec.check.proto_crosscheck import Contract, load_contract
from oespec.cli import run
from oespec.generate import GENERATORS, HEADER_TEXT, write_outputs
from oespec.generate_with_catalogues import plan
from oespec.registry import load_registry

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "generate" / "minimal"


def _minimal_tree(root: Path) -> Path:
    shutil.copytree(DATA, root)
    shutil.copy(REPO / "proto" / "openengine" / "v1" / "options.proto", root / "proto" / "openengine" / "v1")
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small registry with its hand-written protos, plus the project's real options.proto."""
    return _minimal_tree(tmp_path / "repo")


def _generate(root: Path) -> int:
    return run(["generate", str(root / "profiles.yaml"), "--root", str(root)])


@pytest.fixture(scope="module")
def generated_once(tmp_path_factory) -> Path:
    root = _minimal_tree(tmp_path_factory.mktemp("generated") / "repo")
    assert _generate(root) == 0
    return root


@pytest.fixture
def generated(generated_once: Path, tmp_path: Path) -> Path:
    """`tree` after a successful `oespec generate`, for the tests that start from a generated tree
    rather than test generating it: a copy of one generation per module."""
    root = tmp_path / "repo"
    shutil.copytree(generated_once, root)
    return root


def _check(root: Path, capsys) -> tuple[int, list[dict]]:
    import json

    capsys.readouterr()
    code = run(["check", str(root / "profiles.yaml"), "--proto-root", str(root / "proto"), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["diagnostics"]


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_generate_writes_services_capabilities_and_bindings(tree: Path):
    assert _generate(tree) == 0
    protos = tree / "proto" / "openengine" / "v1"
    for name in ("capabilities.proto", "inference_service.proto", "control_service.proto", "discovery_service.proto",
                 "observability_service.proto", "adapters_service.proto"):
        assert HEADER_TEXT in (protos / name).read_text().splitlines()[0]
    assert "rpc WatchLoad(WatchLoadRequest) returns (stream WatchLoadResponse)" in \
        (protos / "observability_service.proto").read_text()
    caps = (protos / "capabilities.proto").read_text()
    assert "optional uint32 max_lora_rank = 2" in caps
    assert "AdapterCapabilities adapters = 13;" in caps.split("message ModelCapabilities")[1].split("}")[0]
    assert (tree / "openengine" / "v1" / "observability_service_pb2_grpc.py").is_file()
    assert (tree / "openengine" / "v1" / "capabilities_pb2.pyi").is_file()


def test_generation_is_deterministic_and_check_sees_it_fresh(tree: Path):
    assert _generate(tree) == 0
    first = {p: p.read_bytes() for p in (tree / "proto").rglob("*.proto")}
    assert _generate(tree) == 0
    assert first == {p: p.read_bytes() for p in (tree / "proto").rglob("*.proto")}
    assert run(["generate", str(tree / "profiles.yaml"), "--root", str(tree), "--check"]) == 0


def test_check_reports_a_stale_generated_file(generated: Path, capsys):
    target = generated / "proto" / "openengine" / "v1" / "capabilities.proto"
    target.write_text(target.read_text() + "\n// edited by hand\n")
    capsys.readouterr()
    assert run(["generate", str(generated / "profiles.yaml"), "--root", str(generated), "--check"]) == 1
    assert "capabilities.proto" in capsys.readouterr().out


def test_removed_service_leaves_no_orphan(generated: Path, capsys):
    registry = generated / "profiles.yaml"
    text = registry.read_text()
    start = text.index("  - name: openengine.adapters")
    registry.write_text(text[:start])
    capsys.readouterr()
    assert run(["generate", str(registry), "--root", str(generated), "--check"]) == 1
    assert "adapters_service.proto" in capsys.readouterr().out
    assert _generate(generated) == 0
    assert not (generated / "proto" / "openengine" / "v1" / "adapters_service.proto").exists()
    assert not (generated / "openengine" / "v1" / "adapters_service_pb2.py").exists()


def test_a_failing_generator_writes_nothing(tree: Path, monkeypatch):
    monkeypatch.setitem(GENERATORS, "explodes", "tests_generate_failing:explode")
    import sys
    import types

    module = types.ModuleType("tests_generate_failing")

    def explode(ctx):
        raise RuntimeError("boom")

    module.explode = explode
    monkeypatch.setitem(sys.modules, "tests_generate_failing", module)
    assert _generate(tree) == 1
    assert not (tree / "proto" / "openengine" / "v1" / "capabilities.proto").exists()
    assert not (tree / "openengine").exists()


def test_a_failing_write_restores_previous_files(tree: Path, monkeypatch):
    assert _generate(tree) == 0
    resolved = load_registry(tree / "profiles.yaml")
    outputs = plan(resolved.registry, tree, only=["proto"])
    before = {o.path: (tree / o.path).read_bytes() for o in outputs}
    changed = [o.__class__(o.path, o.data() + b"// changed\n") for o in outputs]
    import os

    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky_replace)
    with pytest.raises(OSError):
        write_outputs(tree, changed)
    assert {o.path: (tree / o.path).read_bytes() for o in outputs} == before
    assert not list(tree.rglob("*.tmp"))


def test_registry_errors_stop_generation(tree: Path):
    registry = tree / "profiles.yaml"
    registry.write_text(registry.read_text().replace("scope: model", "scope: planet"))
    assert _generate(tree) == 1
    assert not (tree / "proto" / "openengine" / "v1" / "capabilities.proto").exists()


def test_missing_request_message_is_named_with_its_registry_line(tree: Path, capsys):
    common = tree / "proto" / "openengine" / "v1" / "common.proto"
    common.write_text(common.read_text().replace("message WatchLoadRequest {}\n", ""))
    capsys.readouterr()
    assert _generate(tree) == 1
    out = capsys.readouterr().out
    line = _line_of(tree / "profiles.yaml", "request: WatchLoadRequest")
    assert f"profiles.yaml:{line}:" in out and "WatchLoadRequest" in out


# --- the cross-check between registry and compiled descriptors ---------------------------------

def test_crosscheck_passes_on_fresh_generation(generated: Path, capsys):
    code, diags = _check(generated, capsys)
    assert (code, diags) == (0, [])


def test_crosscheck_fails_when_a_registry_rpc_is_missing_from_the_proto(generated: Path, capsys):
    service = generated / "proto" / "openengine" / "v1" / "observability_service.proto"
    text = service.read_text()
    start = text.index("  rpc GetLoad(")
    end = text.index("  }\n", start) + 4
    service.write_text(text[:start] + text[end:])
    code, diags = _check(generated, capsys)
    assert code == 1
    line = _line_of(generated / "profiles.yaml", "name: openengine.v1.Observability/GetLoad")
    assert [(d["rule_id"], d["line"]) for d in diags] == [("OE101", line)]


def test_crosscheck_fails_when_an_rpc_belongs_to_no_profile(generated: Path, capsys):
    common = generated / "proto" / "openengine" / "v1" / "common.proto"
    common.write_text(common.read_text() + "\nservice Rogue {\n  rpc Probe(AbortRequest) returns (AbortResponse);\n}\n")
    code, diags = _check(generated, capsys)
    assert code == 1
    assert [(d["rule_id"], Path(d["path"]).name, d["line"]) for d in diags] == [
        ("OE103", "common.proto", _line_of(common, "rpc Probe"))]


def test_crosscheck_fails_on_wrong_streaming_shape_and_limit_type(generated: Path, capsys):
    protos = generated / "proto" / "openengine" / "v1"
    inference = protos / "inference_service.proto"
    inference.write_text(inference.read_text().replace("returns (stream GenerateResponse)", "returns (GenerateResponse)"))
    caps = protos / "capabilities.proto"
    caps.write_text(caps.read_text().replace("optional uint32 max_lora_rank = 2", "optional uint64 max_lora_rank = 2"))
    code, diags = _check(generated, capsys)
    registry = generated / "profiles.yaml"
    assert code == 1
    assert sorted((d["rule_id"], d["line"]) for d in diags) == sorted([
        ("OE102", _line_of(registry, "streaming: server")),
        ("OE106", _line_of(registry, "name: max_lora_rank")),
    ])


def test_crosscheck_reports_protoc_errors_at_their_source_line(tree: Path):
    common = tree / "proto" / "openengine" / "v1" / "common.proto"
    common.write_text(common.read_text() + "message Broken { int y = 1; }\n")
    result = load_contract(tree / "proto")
    assert not isinstance(result, Contract)
    assert [(Path(d.path).name, d.line, d.rule_id) for d in result] == [
        ("common.proto", _line_of(common, "message Broken"), "OE100")]


def test_standard_health_is_referenced_from_grpcio_health_checking(generated: Path):
    contract = load_contract(generated / "proto")
    assert isinstance(contract, Contract)
    watch = contract.methods["grpc.health.v1.Health/Watch"]
    assert watch.server_streaming and not watch.client_streaming
    resolved = load_registry(generated / "profiles.yaml")
    assert [d for d in run_rules(resolved, contract=contract) if d.rule_id.startswith("OE10")] == []


def test_every_missing_message_is_reported_at_once_location_first(tree: Path, capsys):
    common = tree / "proto" / "openengine" / "v1" / "common.proto"
    text = common.read_text()
    assert "message WatchLoadRequest {}\n" in text and "message GetLoadRequest {}\n" in text
    common.write_text(text.replace("message WatchLoadRequest {}\n", "").replace("message GetLoadRequest {}\n", ""))
    capsys.readouterr()
    assert _generate(tree) == 1
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "OE900" in ln]
    registry = tree / "profiles.yaml"
    wanted = {_line_of(registry, "request: WatchLoadRequest"), _line_of(registry, "request: GetLoadRequest")}
    got = {int(ln.split(":")[1]) for ln in lines}
    assert got == wanted, lines
    assert all(ln.startswith(f"{registry}:") for ln in lines)


def test_a_role_the_contract_lacks_is_a_located_finding_not_a_crash():
    """Renaming a value of upstream's EngineRole enum used to end `oespec generate` in KeyError."""
    from oespec.generate import GenerationError
    from oespec.generate.jsonschemas import check_roles
    from oespec.protoc import compile_descriptor_set

    proto = REPO / "proto"
    sources = {p.relative_to(proto).as_posix(): p.read_text() for p in proto.rglob("*.proto")}
    server = "openengine/v1/server.proto"
    assert "ENGINE_ROLE_ENCODER = 100;" in sources[server]
    sources[server] = sources[server].replace("ENGINE_ROLE_ENCODER = 100;", "ENGINE_ROLE_VISION = 100;")
    registry = load_registry(REPO / "profiles.yaml", display_path="profiles.yaml").registry
    with pytest.raises(GenerationError) as exc:
        check_roles(registry, compile_descriptor_set(sources, source_info=False))
    [problem] = exc.value.problems
    encoder = next(p for p in registry.profiles if "encoder" in p.scope.roles)
    assert problem.path == "profiles.yaml"
    assert problem.loc == encoder.locs["roles[0]"] and "ROLE_ENCODER" in problem.message and problem.hint


def test_generation_diagnostics_put_each_location_first():
    from oespec.commands.generate import generation_diagnostics
    from openengine.contractkit.locations import Loc
    from oespec.generate import GenerationError, Problem

    err = GenerationError("proto", "two problems", problems=[Problem("profiles.yaml", Loc(3, 5), "a", "h"),
                                                             Problem("proto/x.proto", Loc(9, 1), "b")])
    diags = generation_diagnostics(err, "profiles.yaml")
    assert [(d.path, d.line, d.column, d.rule_id) for d in diags] == \
        [("profiles.yaml", 3, 5, "OE900"), ("proto/x.proto", 9, 1, "OE900")]


def test_generated_and_hand_written_protos_are_laid_out_as_buf_format_lays_them_out(generated: Path):
    """`make check` runs `buf format -d --exit-code proto`: the generator writes what buf format
    writes (options one field per line, several field options one per line), and the checkout's
    hand-written protos are formatted."""
    import subprocess
    import sys

    buf = Path(sys.executable).parent / "buf"
    written = sorted(str(p.relative_to(generated)) for p in (generated / "proto").rglob("*.proto")
                     if HEADER_TEXT in p.read_text().splitlines()[0])
    assert written
    only = [arg for path in written for arg in ("--path", path)]
    for root, paths in ((generated, ["proto", *only]), (REPO, ["proto"])):
        done = subprocess.run([str(buf), "format", "-d", "--exit-code", *paths], cwd=root,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout[:3000] + done.stderr


def test_a_deprecated_limit_puts_its_options_one_per_line():
    from oespec.generate.proto import LIMIT_OPTION, field_options
    from oespec.generate.protodoc import Option

    limit = Option(LIMIT_OPTION, (("default", '"1"'), ("since", '"1.0"')))
    assert field_options((limit,), False, "  ") == \
        ' [(openengine.v1.limit) = {\n    default: "1"\n    since: "1.0"\n  }]'
    assert field_options((limit,), True, "  ") == (
        ' [\n    deprecated = true,\n    (openengine.v1.limit) = {\n      default: "1"\n      since: "1.0"\n    }\n  ]')
    assert field_options((Option(LIMIT_OPTION, (("default", '"1"'),)),), False) == \
        ' [(openengine.v1.limit) = {default: "1"}]'
