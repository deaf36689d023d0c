"""oespec validate: located findings, auto-detection, formats and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from oespec.cli import run

DATA = Path(__file__).resolve().parents[1] / "data" / "validate"


def findings(capsys, *argv):
    code = run(["validate", *map(str, argv), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["diagnostics"]


def test_combined_document_locates_each_violation(capsys):
    code, diags = findings(capsys, DATA / "cli" / "combined.json")
    assert code == 1
    got = {(d["rule_id"], d["line"]) for d in diags}
    assert ("OEV111", 17) in got       # core.maxLogprobs
    assert ("OEV130", 11) in got       # openengine.kv on an aggregated engine: at capabilities.profiles
    assert ("OEV111", 21) in got       # capabilities.models[0].adapters.maxLoras
    assert all(d["path"].endswith("combined.json") for d in diags)


def test_watchload_stream_autodetected_with_message_lines(capsys):
    code, diags = findings(capsys, DATA / "cli" / "stream.jsonl")
    assert code == 1
    got = {(d["rule_id"], d["line"]) for d in diags}
    assert {("OEV305", 3), ("OEV315", 3), ("OEV307", 4), ("OEV309", 4)} <= got
    assert next(d for d in diags if d["rule_id"] == "OEV315")["severity"] == "info"


def test_clean_document_exits_zero(capsys, tmp_path):
    doc = tmp_path / "caps.json"
    doc.write_text(json.dumps({"profiles": [{"name": "openengine.core", "major": 1}]}))
    assert findings(capsys, doc) == (0, [])


def test_warnings_fail_only_with_fail_on_warning(capsys, tmp_path):
    doc = tmp_path / "caps.json"
    doc.write_text(json.dumps({"profiles": [{"name": "openengine.core", "major": 1},
                                            {"name": "openengine.teleport", "major": 1}]}))
    assert run(["validate", str(doc)]) == 0
    assert run(["validate", str(doc), "--fail-on", "warning"]) == 1
    assert "OEV105" in capsys.readouterr().out


def test_not_json_is_unusable_with_location(capsys, tmp_path):
    doc = tmp_path / "bad.json"
    doc.write_text('{\n  "profiles": [,]\n}\n')
    code, diags = findings(capsys, doc)
    assert code == 2
    assert [(d["rule_id"], d["line"]) for d in diags] == [("OEV001", 2)]


def test_forced_kind_and_github_format(capsys):
    code = run(["validate", str(DATA / "cli" / "stream.jsonl"), "--kind", "watchload", "--format", "github"])
    assert code == 1
    assert "::error file=" in capsys.readouterr().out


def test_watchload_settings_judged_against_capabilities(capsys, tmp_path):
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps({"profiles": [{"name": "openengine.core", "major": 1},
                                             {"name": "openengine.load", "major": 1}],
                                "observability": {"maxWatchIntervalMs": 50, "defaultWatchIntervalMs": 20,
                                                  "defaultHeartbeatMs": 40}}))
    code, diags = findings(capsys, DATA / "cli" / "stream.jsonl", "--capabilities", caps)
    assert ("OEV316", 1) in {(d["rule_id"], d["line"]) for d in diags}


def test_getload_answer_autodetected_and_its_ranks_added_up(capsys, tmp_path):
    """REQ-LOAD-023 on a pasted GetLoad answer: the total counts a block its only rank does not."""
    doc = tmp_path / "load.json"
    doc.write_text(json.dumps({
        "instanceId": "ref-1", "timestampUnixNanos": "1796364115000000000", "usedKvBlocks": "1", "totalKvBlocks": "100",
        "ranks": [{"dataParallelRank": 0, "usedKvBlocks": "0", "totalKvBlocks": "100"}]}, indent=2))
    code, diags = findings(capsys, doc)
    assert code == 1
    assert [(d["rule_id"], d["line"], d["details"]["requirement"]) for d in diags] == [("OEV321", 4, "REQ-LOAD-023")]
    doc.write_text(json.dumps({"instanceId": "ref-1", "usedKvBlocks": "1", "timestampUnixNanos": "1_796_364_115",
                               "ranks": [{"usedKvBlocks": 1}]}))
    code, diags = findings(capsys, doc, "--kind", "load")
    assert code == 1 and [d["rule_id"] for d in diags] == ["OEV002"]   # the timestamp is no uint64
