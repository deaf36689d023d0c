"""`oespec validate` on input it cannot judge, or can only partly judge: never a raw Python error,
always located findings in the chosen format, and one root finding where one cause would
otherwise cascade."""

from __future__ import annotations

import json

import pytest

from oespec.cli import run
from openengine.contractkit.diagnostics import PRINTERS


@pytest.fixture(autouse=True)
def _bindings():
    pytest.importorskip("openengine.v1.capabilities_pb2", reason="run `make bindings` first")


def _validate(capsys, *argv) -> tuple[int, list[dict]]:
    code = run(["validate", *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["diagnostics"]


def test_a_missing_core_is_one_root_finding_not_a_cascade(capsys, tmp_path):
    """Every other profile needs openengine.core; the report says core is missing once, and not
    once more per profile whose prerequisite it is."""
    doc = tmp_path / "caps.json"
    doc.write_text(json.dumps({"profiles": [{"name": "openengine.load", "major": 1},
                                            {"name": "openengine.admin", "major": 1},
                                            {"name": "openengine.runtime-events", "major": 1}]}))
    code, diags = _validate(capsys, str(doc))
    assert code == 1
    assert [d["rule_id"] for d in diags] == ["OEV101"]
    assert (diags[0]["line"], diags[0]["column"]) == (1, 2)


UNUSABLE = {
    "missing file": (None, "OEV001", "No such file or directory"),
    "not UTF-8": (b"\xff\xfe{}", "OEV001", "cannot read"),
    "not JSON": (b'{"profiles": [', "OEV001", "not JSON"),
    "empty": (b"", "OEV003", "holds no JSON value"),
}


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_an_unusable_file_is_one_finding_with_exit_status_2(case, capsys, tmp_path):
    content, rule_id, says = UNUSABLE[case]
    path = tmp_path / "input.json"
    if content is not None:
        path.write_bytes(content)
    code, diags = _validate(capsys, str(path))
    assert code == 2
    assert [d["rule_id"] for d in diags] == [rule_id] and says in diags[0]["message"]
    assert diags[0]["path"] == str(path)


@pytest.mark.parametrize("content, says", [
    (None, "No such file or directory"),
    (b"[1, 2]", "expected a capabilities document"),
    (b"", "holds no JSON value"),
])
def test_an_unusable_capabilities_file_for_a_stream_is_a_finding(content, says, capsys, tmp_path):
    stream = tmp_path / "watch.jsonl"
    stream.write_text('{"sequence": "0", "settings": {"interval_ms": 100}}\n')
    caps = tmp_path / "caps.json"
    if content is not None:
        caps.write_bytes(content)
    code, diags = _validate(capsys, str(stream), "--capabilities", str(caps))
    assert code == 2
    assert len(diags) == 1 and diags[0]["path"] == str(caps) and says in diags[0]["message"]


@pytest.mark.parametrize("fmt", sorted(PRINTERS))
def test_an_unusable_file_prints_in_every_format(fmt, capsys, tmp_path):
    code = run(["validate", str(tmp_path / "absent.json"), "--format", fmt])
    out = capsys.readouterr().out
    assert code == 2 and "OEV001" in out and "Traceback" not in out


ODD_VALUES = [
    "null", '"a string"', "1", "[]", "{}", '{"profiles": [null]}', '{"profiles": [{"name": 5}]}',
    '{"settings": 5}', '{"capabilities": []}', '{"server_info": 5}', '{"model_info": [5]}',
    '{"sequence": 1, "snapshot": {"load": 5}}', '{"ranks": [null]}', '{"runningRequests": 1e400}',
    '[[[[[[[[[[[[]]]]]]]]]]]]', '{"a": ' * 40 + "1" + "}" * 40, '"\\u0000\\u001b[2J"',
    '{"capabilities": {}, "server_info": {"engineRole": "ROLE_X"}, "model_info": [{"modelId": "m", "tokenizerModes": [5]}]}',
]


@pytest.mark.parametrize("kind", ["auto", "capabilities", "watchload", "load"])
def test_odd_json_is_judged_never_a_crash(kind, capsys, tmp_path):
    for i, value in enumerate(ODD_VALUES):
        path = tmp_path / f"odd-{i}.json"
        path.write_text(value)
        code = run(["validate", str(path), "--kind", kind, "--format", "json"])
        out = capsys.readouterr().out
        assert code in (0, 1, 2), value
        assert isinstance(json.loads(out)["diagnostics"], list), value


def test_an_unknown_enum_value_lists_the_valid_ones(capsys, tmp_path):
    doc = tmp_path / "caps.json"
    doc.write_text(json.dumps({"profiles": [{"name": "openengine.core", "major": 1}],
                               "core": {"guidedDecodingModes": ["GUIDED_DECODING_MODE_XML"]}}))
    code, diags = _validate(capsys, str(doc))
    assert code == 1 and [d["rule_id"] for d in diags] == ["OEV113"]
    message = diags[0]["message"]
    assert "GUIDED_DECODING_MODE_XML" in message
    assert "valid values: GUIDED_DECODING_MODE_JSON_SCHEMA, " in message and "GUIDED_DECODING_MODE_CHOICE" in message
    assert "UNSPECIFIED" not in message


# -- every discovery answer as grpcurl prints it, from a running reference engine ------------------

@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """The proto3 JSON of each discovery and load answer of a reference engine, one file each."""
    import grpc
    from google.protobuf.json_format import MessageToJson

    from openengine.engine import EngineConfig, RunningEngine
    from openengine.v1 import (
        control_service_pb2_grpc, discovery_pb2, discovery_service_pb2_grpc, load_pb2, model_pb2,
        observability_service_pb2_grpc, server_pb2,
    )

    folder = tmp_path_factory.mktemp("answers")
    with RunningEngine(EngineConfig(port=0, profiles=("all",))) as engine, \
            grpc.insecure_channel(engine.address) as channel:
        control = control_service_pb2_grpc.ControlStub(channel)
        discovery = discovery_service_pb2_grpc.DiscoveryStub(channel)
        observability = observability_service_pb2_grpc.ObservabilityStub(channel)
        info = control.GetServerInfo(server_pb2.GetServerInfoRequest(), timeout=10)
        got = {"server-info": [info],
               "model-info": [control.GetModelInfo(model_pb2.GetModelInfoRequest(model=m), timeout=10)
                              for m in info.supported_models],
               "capabilities": [discovery.GetCapabilities(discovery_pb2.GetCapabilitiesRequest(), timeout=10)],
               "load": [control.GetLoad(server_pb2.GetLoadRequest(), timeout=10)]}
        stream = observability.WatchLoad(load_pb2.WatchLoadRequest(interval_ms=20), timeout=10)
        got["watchload"] = [next(stream) for _ in range(3)]
        stream.cancel()
    files = {}
    for kind, messages in got.items():
        files[kind] = folder / f"{kind}.json"
        files[kind].write_text("\n".join(MessageToJson(m, indent=2 if kind != "watchload" else None)
                                         .replace("\n", "" if kind == "watchload" else "\n") for m in messages))
    return files


@pytest.mark.parametrize("kind", ["capabilities", "server-info", "model-info", "load", "watchload"])
def test_every_answer_is_read_as_its_kind_and_judged_clean(answers, kind, capsys):
    code = run(["validate", str(answers[kind]), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["kind"], doc["diagnostics"]) == (0, kind, [])
    run(["validate", str(answers[kind])])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{answers[kind]}: read as ") and "(detected; --kind chooses)" in first


def test_a_named_kind_is_read_as_named(answers, capsys):
    code = run(["validate", str(answers["server-info"]), "--kind", "capabilities", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["kind"] == "capabilities"
    assert {d["rule_id"] for d in doc["diagnostics"]} >= {"OEV002"}    # ServerInfo's fields are unknown there


def test_a_server_info_answer_is_judged_on_its_own(capsys, tmp_path):
    doc = tmp_path / "info.json"
    doc.write_text(json.dumps({"instanceId": "", "engineName": "e", "engineRole": "ENGINE_ROLE_DECODE",
                               "schemaRevision": 2, "minimumClientRevision": 1,
                               "schemaRelease": "openengine-profiles/registry-6",
                               "capabilityRevision": "0", "supportedModels": ["m"]}, indent=2))
    code, diags = _validate(capsys, str(doc))
    assert code == 1
    assert sorted((d["rule_id"], d["line"]) for d in diags) == [("OEV135", 8), ("OEV136", 2)]


def test_a_model_info_answer_is_read_as_one(capsys, tmp_path):
    doc = tmp_path / "model.json"
    doc.write_text(json.dumps({"modelId": "m", "maxContextLength": 4096, "maxOutputTokens": 64,
                               "generation": {"maxNumSequences": "two"}}, indent=2))
    code, diags = _validate(capsys, str(doc))
    assert code == 1 and [(d["rule_id"], d["line"]) for d in diags] == [("OEV002", 6)]
