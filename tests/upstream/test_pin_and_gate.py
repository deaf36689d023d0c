"""The pinned upstream image, the maintainer step that builds it, the gate and the reverse reading.

The fixture tree is upstream's protos rendered back from the committed image (tests/upstream/
protorender.py): nothing here reads an upstream checkout. That the rendering is faithful is a test
of its own: pinning the rendered tree reproduces the committed image byte for byte."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from oespec.breaking.buf_breaking import find_buf
from oespec.cli import run
from oespec.upstream import (
    BUF_SECOND_OPINION, FIELD_CHANGED, IMAGE, METHOD_CHANGED, MISSING, PIN, PIN_MISMATCH, UNUSABLE, VALUE_CHANGED,
    build_image, buf_findings, check, diff, read_pin,
)
from tests.upstream.protorender import render

ROOT = Path(__file__).resolve().parents[2]
IMAGE_PATH = ROOT / IMAGE
PIN_PATH = ROOT / PIN
SHOWN = "proto"


def _image() -> descriptor_pb2.FileDescriptorSet:
    return descriptor_pb2.FileDescriptorSet.FromString(IMAGE_PATH.read_bytes())


@pytest.fixture(scope="module")
def rendered() -> tuple[dict[str, str], dict[str, tuple[str, int, int]]]:
    """Upstream's files as text, and where each element is declared: name -> (file, line, col)."""
    texts, where = {}, {}
    for fdp in _image().file:
        if fdp.name.startswith("google/"):
            continue
        texts[fdp.name], places = render(fdp)
        where.update({name: (fdp.name, line, col) for name, (line, col) in places.items()})
    return texts, where


class Tree:
    """An upstream checkout's layout in a temporary folder: `root/proto/openengine/v1/*.proto`."""

    def __init__(self, root: Path, texts: dict[str, str]):
        self.root = root
        self.proto = root / "proto"
        for name, text in texts.items():
            self.write(name, text)

    def write(self, name: str, text: str) -> None:
        path = self.proto / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def edit(self, name: str, old: str, new: str) -> None:
        path = self.proto / name
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} is not once in {name}"
        path.write_text(text.replace(old, new), encoding="utf-8")

    def check(self, **kwargs):
        return check(self.proto, IMAGE_PATH, PIN_PATH, display=SHOWN, **kwargs)


@pytest.fixture
def tree(tmp_path, rendered) -> Tree:
    return Tree(tmp_path / "upstream", rendered[0])


def test_the_image_is_upstream_without_source_info_and_matches_its_pin_record():
    fds = _image()
    names = [f.name for f in fds.file]
    assert "google/protobuf/struct.proto" in names          # imports included: a whole buf image
    assert {n for n in names if n.startswith("openengine/")} == {
        f"openengine/v1/{n}.proto" for n in
        ("error", "generation", "kv", "lifecycle", "lora", "model", "openengine", "server")}
    assert not any(f.HasField("source_code_info") for f in fds.file)
    pin = read_pin(PIN_PATH)
    assert (pin.commit, pin.date, pin.schema_revision) == ("4def7c5", "2026-07-23", 1)
    assert pin.image_sha256 == hashlib.sha256(IMAGE_PATH.read_bytes()).hexdigest()


def test_pinning_the_same_sources_gives_the_same_bytes(tree):
    first, sources = build_image(tree.root)
    second, _ = build_image(tree.root)
    assert first == second == IMAGE_PATH.read_bytes()
    assert [name for name, _ in sources] == sorted(f"openengine/v1/{p.name}" for p in
                                                   (tree.proto / "openengine/v1").glob("*.proto"))


def test_the_maintainer_step_writes_the_committed_image_and_record(tree, tmp_path, capsys):
    out = tmp_path / "out"
    code = run(["upstream", "pin", "--from", str(tree.root), "--commit", "4def7c5", "--date", "2026-07-23",
                "--schema-revision", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr()
    assert (out / "openengine-v1.binpb").read_bytes() == IMAGE_PATH.read_bytes()
    # The same record, but for the sources' digests: these sources are a rendering of upstream's.
    def record(text: str) -> str:
        return text.split("## Sources compiled")[0]

    assert record((out / "PIN.md").read_text()) == record(PIN_PATH.read_text())


def test_pin_refuses_a_folder_without_upstream_protos(tmp_path, capsys):
    code = run(["upstream", "pin", "--from", str(tmp_path), "--commit", "abc", "--date", "2026-01-01",
                "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and UNUSABLE in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_the_gate_passes_on_upstream_unchanged(tree):
    assert tree.check() == []


def _at(where, name: str, line_shift: int = 0, col: int | None = None) -> tuple[str, int, int]:
    file, line, column = where[name]
    return f"{SHOWN}/{file}", line + line_shift, column if col is None else col


# (file, old text, new text, element, rule, words the message has, line shift, column)
CHANGES = {
    "field-number": ("openengine/v1/generation.proto", "optional double temperature = 1;",
                     "optional double temperature = 10;", "openengine.v1.SamplingParams.temperature",
                     FIELD_CHANGED, ("number differs", "= 1`", "= 10`"), 0, None),
    "field-type": ("openengine/v1/generation.proto", "optional double temperature = 1;",
                   "optional uint32 temperature = 1;", "openengine.v1.SamplingParams.temperature",
                   FIELD_CHANGED, ("type differs", "optional double temperature = 1", "optional uint32"), 0, None),
    "field-name": ("openengine/v1/generation.proto", "optional double temperature = 1;",
                   "optional double temp = 1;", "openengine.v1.SamplingParams.temperature",
                   FIELD_CHANGED, ("(name, json_name differ)", "temp = 1"), 0, None),
    "field-label": ("openengine/v1/generation.proto", "optional uint32 max_tokens = 1;", "uint32 max_tokens = 1;",
                    "openengine.v1.StoppingOptions.max_tokens", FIELD_CHANGED, ("label differs",), 0, None),
    "field-message-type": ("openengine/v1/generation.proto", "  .openengine.v1.Usage usage = 10;",
                           "  .openengine.v1.TokenIds usage = 10;", "openengine.v1.GenerateResponse.usage",
                           FIELD_CHANGED, ("type differs", "openengine.v1.TokenIds"), 0, None),
    "field-out-of-oneof": ("openengine/v1/generation.proto", "  oneof source {\n    string url = 2;\n",
                           "  string url = 2;\n  oneof source {\n", "openengine.v1.MediaItem.url",
                           FIELD_CHANGED, ("oneof differs", "(in oneof source)"), -1, 3),
    "field-json-name": ("openengine/v1/generation.proto", "optional double top_p = 2;",
                        'optional double top_p = 2 [json_name = "topP2"];', "openengine.v1.SamplingParams.top_p",
                        FIELD_CHANGED, ("json_name differs",), 0, None),
    "field-removed": ("openengine/v1/generation.proto", "  string lora_name = 11;\n", "",
                      "openengine.v1.GenerateRequest", MISSING,
                      ("openengine.v1.GenerateRequest.lora_name", "string lora_name = 11", "missing here"), 0, None),
    "value-renumbered": ("openengine/v1/generation.proto", "FINISH_REASON_LENGTH = 2;", "FINISH_REASON_LENGTH = 5;",
                         "openengine.v1.FinishReason.FINISH_REASON_LENGTH", VALUE_CHANGED,
                         ("FINISH_REASON_LENGTH = 2`", "FINISH_REASON_LENGTH = 5`"), 0, None),
    "value-renamed": ("openengine/v1/generation.proto", "FINISH_REASON_LENGTH = 2;",
                      "FINISH_REASON_MAX_TOKENS = 2;", "openengine.v1.FinishReason.FINISH_REASON_LENGTH",
                      VALUE_CHANGED, ("FINISH_REASON_MAX_TOKENS = 2",), 0, None),
    "method-streaming": ("openengine/v1/openengine.proto", "returns (stream .openengine.v1.GenerateResponse)",
                         "returns (.openengine.v1.GenerateResponse)", "openengine.v1.Inference/Generate",
                         METHOD_CHANGED, ("returns (stream openengine.v1.GenerateResponse)",), 0, None),
    "method-request": ("openengine/v1/openengine.proto", "Abort(.openengine.v1.AbortRequest)",
                       "Abort(.openengine.v1.HealthRequest)", "openengine.v1.Control/Abort", METHOD_CHANGED,
                       ("rpc Abort(openengine.v1.AbortRequest)", "rpc Abort(openengine.v1.HealthRequest)"), 0, None),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_gate_names_each_change_to_an_upstream_element_where_it_is(tree, rendered, change):
    file, old, new, element, rule, words, shift, col = CHANGES[change]
    tree.edit(file, old, new)
    diags = tree.check(use_buf=False)
    mine = [d for d in diags if d.rule_id == rule and d.message.startswith(element.split("/")[0]) and
            (element in d.message)]
    assert len(mine) == 1, [d.message for d in diags]
    d = mine[0]
    assert (d.path, d.line, d.column) == _at(rendered[1], element, shift, col)
    for word in words:
        assert word in d.message, d.message
    assert d.hint and str(d.severity) == "error"


def test_a_missing_message_and_service_are_reported_in_the_file_upstream_keeps_them_in(tree, rendered):
    tree.edit("openengine/v1/openengine.proto", "service Control {", "service Controller {")
    tree.edit("openengine/v1/lifecycle.proto", "message AllRequests {", "message AllTargets {")
    tree.edit("openengine/v1/lifecycle.proto", ".openengine.v1.AllRequests all_requests",
              ".openengine.v1.AllTargets all_requests")
    found = {(d.rule_id, d.path, d.line, d.message.split(":")[0]) for d in tree.check(use_buf=False)}
    assert found == {
        (MISSING, f"{SHOWN}/openengine/v1/openengine.proto", 0, "openengine.v1.Control"),
        (MISSING, f"{SHOWN}/openengine/v1/lifecycle.proto", 0, "openengine.v1.AllRequests"),
        (FIELD_CHANGED, f"{SHOWN}/openengine/v1/lifecycle.proto",
         rendered[1]["openengine.v1.AbortRequest.all_requests"][1], "openengine.v1.AbortRequest.all_requests"),
    }


ADDED_FILE = """syntax = "proto3";
package openengine.v1;
import "openengine/v1/server.proto";
service Discovery {
  rpc GetCapabilities(GetCapabilitiesRequest) returns (Capabilities);
}
message GetCapabilitiesRequest {
}
message Capabilities {
  uint64 capability_revision = 1;
  EngineRole role = 2;
}
"""


def _add_everything(tree: Tree) -> None:
    tree.edit("openengine/v1/server.proto", "  .google.protobuf.Struct extra = 12;\n",
              "  .google.protobuf.Struct extra = 12;\n  uint64 capability_revision = 100;\n"
              "  map<string, string> labels = 101;\n")
    tree.edit("openengine/v1/server.proto", "  ENGINE_ROLE_DECODE = 3;\n",
              "  ENGINE_ROLE_DECODE = 3;\n  ENGINE_ROLE_ENCODER = 100;\n")
    tree.edit("openengine/v1/generation.proto", "  .google.protobuf.Struct extra = 12;\n",
              "  .google.protobuf.Struct extra = 12;\n  optional string session_id = 100;\n")
    tree.write("openengine/v1/discovery.proto", ADDED_FILE)


def test_additions_pass_the_gate_and_are_what_diff_lists(tree):
    _add_everything(tree)
    assert tree.check() == []
    found, errors = diff(tree.proto, IMAGE_PATH, display=SHOWN)
    assert errors == []
    listed = {(a.kind, a.name, a.extends_upstream, a.definition) for a in found}
    assert listed == {
        ("field", "openengine.v1.ServerInfo.capability_revision", True, "uint64 capability_revision = 100"),
        ("field", "openengine.v1.ServerInfo.labels", True, "map<string, string> labels = 101"),   # no entry type
        ("enum_value", "openengine.v1.EngineRole.ENGINE_ROLE_ENCODER", True, "ENGINE_ROLE_ENCODER = 100"),
        ("field", "openengine.v1.GenerateRequest.session_id", True, "optional string session_id = 100"),
        ("service", "openengine.v1.Discovery", False, "service openengine.v1.Discovery"),
        ("rpc", "openengine.v1.Discovery/GetCapabilities", False,
         "rpc GetCapabilities(openengine.v1.GetCapabilitiesRequest) returns (openengine.v1.Capabilities)"),
        ("message", "openengine.v1.GetCapabilitiesRequest", False, "message openengine.v1.GetCapabilitiesRequest"),
        ("message", "openengine.v1.Capabilities", False, "message openengine.v1.Capabilities"),
    }
    rpc = next(a for a in found if a.kind == "rpc")
    assert (rpc.file, rpc.line) == (f"{SHOWN}/openengine/v1/discovery.proto", 5)


def test_the_commands_print_findings_and_additions_as_json(tree, capsys):
    _add_everything(tree)
    paths = ["--proto", str(tree.proto), "--image", str(IMAGE_PATH)]
    assert run(["upstream", "diff", *paths, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["upstream"] == {"commit": "4def7c5", "date": "2026-07-23"}
    rpc = next(a for a in doc["additions"] if a["kind"] == "rpc")
    assert rpc == {"kind": "rpc", "name": "openengine.v1.Discovery/GetCapabilities", "parent": "openengine.v1.Discovery",
                   "extends_upstream": False, "file": f"{tree.proto.as_posix()}/openengine/v1/discovery.proto",
                   "line": 5, "definition": "rpc GetCapabilities(openengine.v1.GetCapabilitiesRequest) returns "
                                            "(openengine.v1.Capabilities)"}
    assert run(["upstream", "check", *paths, "--pin", str(PIN_PATH)]) == 0
    capsys.readouterr()
    tree.edit("openengine/v1/generation.proto", "optional double temperature = 1;", "optional uint32 temperature = 1;")
    assert run(["upstream", "check", *paths, "--pin", str(PIN_PATH), "--format", "json"]) == 1
    diags = json.loads(capsys.readouterr().out)["diagnostics"]
    assert [(d["rule_id"], d["path"].endswith("openengine/v1/generation.proto")) for d in diags] == \
        [(FIELD_CHANGED, True)]
    assert diags[0]["message"].startswith("openengine.v1.SamplingParams.temperature: upstream has")


def test_an_image_that_does_not_match_its_record_fails_the_gate(tree, tmp_path):
    image = tmp_path / "openengine-v1.binpb"
    image.write_bytes(IMAGE_PATH.read_bytes())
    pin = tmp_path / "PIN.md"
    pin.write_text(PIN_PATH.read_text().replace(read_pin(PIN_PATH).image_sha256, "0" * 64))
    diags = check(tree.proto, image, pin, display=SHOWN, use_buf=False)
    assert [(d.rule_id, d.path) for d in diags] == [(PIN_MISMATCH, str(pin))]


def test_a_missing_image_is_unusable_input_not_a_traceback(tree, tmp_path, capsys):
    code = run(["upstream", "check", "--proto", str(tree.proto), "--image", str(tmp_path / "none.binpb"),
                "--pin", str(PIN_PATH)])
    out = capsys.readouterr().out
    assert code == 2 and UNUSABLE in out and "rebuild it with" in out and "Traceback" not in out


def test_protos_that_do_not_compile_are_located(tree):
    tree.edit("openengine/v1/lora.proto", "  string source_path = 3;\n", "  strin source_path = 3;\n")
    diags = tree.check(use_buf=False)
    assert diags and {d.rule_id for d in diags} == {"OE100"}
    assert diags[0].path == f"{SHOWN}/openengine/v1/lora.proto" and diags[0].line > 0


@pytest.mark.skipif(find_buf() is None, reason="buf is not installed")
def test_buf_agrees_with_the_element_comparison(tree):
    """buf's PACKAGE rules, the second opinion, see the same change at the same line and accept
    the same additions; the gate reports that change once."""
    _add_everything(tree)
    assert buf_findings(tree.proto, IMAGE_PATH, SHOWN) == []
    tree.edit("openengine/v1/generation.proto", "optional double temperature = 1;", "optional uint32 temperature = 1;")
    by_buf = buf_findings(tree.proto, IMAGE_PATH, SHOWN)
    ours = tree.check()
    assert len(ours) == 1 and ours[0].rule_id == FIELD_CHANGED
    assert [(d.path, d.line) for d in by_buf] == [(ours[0].path, ours[0].line)]
    assert "FIELD_SAME_TYPE" in by_buf[0].message


@pytest.mark.skipif(find_buf() is None, reason="buf is not installed")
def test_buf_reports_what_the_element_comparison_leaves_out_and_no_code_generation_option(tree, rendered):
    tree.edit("openengine/v1/generation.proto", "package openengine.v1;\n",
              'package openengine.v1;\noption go_package = "example.com/openengine/v1";\n'
              'option java_package = "com.example.openengine.v1";\n')
    assert tree.check() == []
    tree.edit("openengine/v1/openengine.proto", "returns (.openengine.v1.ServerInfo);",
              "returns (.openengine.v1.ServerInfo) { option idempotency_level = NO_SIDE_EFFECTS; }")
    diags = tree.check()
    assert [(d.rule_id, d.path, d.line) for d in diags] == [
        (BUF_SECOND_OPINION, *_at(rendered[1], "openengine.v1.Control/GetServerInfo")[:2])]
    assert "RPC_SAME_IDEMPOTENCY_LEVEL" in diags[0].message
