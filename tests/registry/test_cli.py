"""`oespec check` end to end: formats, --fail-on, exit statuses 0/1/2, --list-rules, unusable input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oespec.check import catalogue
from oespec.cli import run
from tests.fixture_cases import invalid_registry

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "registry"
VALID = DATA / "valid" / "minimal" / "profiles.yaml"
ERRORS = invalid_registry("duplicate-rpc-across")      # one error
WARNING_ONLY = invalid_registry("summary-one-line")    # one warning
SCHEMA_ERROR = invalid_registry("schema-unknown-key")
OESPEC = ROOT / ".venv" / "bin" / "oespec"


def check(capsys, *args: str) -> tuple[int, str]:
    code = run(["check", "--no-contract", *map(str, args)])
    return code, capsys.readouterr().out


def test_valid_registry_exits_0(capsys):
    code, out = check(capsys, VALID)
    assert code == 0
    assert out.strip().endswith("0 findings (0 errors, 0 warnings, 0 infos)")


def test_errors_exit_1_and_are_located(capsys):
    code, out = check(capsys, ERRORS)
    assert code == 1
    assert f"{ERRORS}:57:15: error OE018:" in out
    assert "    hint: " in out


def test_schema_errors_are_findings_not_unusable_input(capsys):
    code, out = check(capsys, SCHEMA_ERROR)
    assert code == 1
    assert ":10:5: error OE001:" in out


@pytest.mark.parametrize("fail_on, expected", [("error", 0), ("warning", 1), ("info", 1)])
def test_fail_on_sets_the_threshold(capsys, fail_on, expected):
    code, out = check(capsys, WARNING_ONLY, "--fail-on", fail_on)
    assert code == expected
    assert "warning OE006" in out


def test_fail_on_rejects_unknown_severities(capsys):
    with pytest.raises(SystemExit) as exc:
        run(["check", str(VALID), "--fail-on", "fatal"])
    assert exc.value.code == 2


def test_json_format(capsys):
    code, out = check(capsys, ERRORS, "--format", "json")
    assert code == 1
    report = json.loads(out)
    [finding] = report["diagnostics"]
    assert (finding["rule_id"], finding["line"], finding["column"], finding["severity"]) == ("OE018", 57, 15, "error")
    assert finding["path"] == str(ERRORS) and finding["hint"]


def test_json_format_of_a_clean_registry_is_an_empty_list(capsys):
    code, out = check(capsys, VALID, "--format", "json")
    assert code == 0 and json.loads(out) == {"diagnostics": []}


def test_github_format(capsys):
    code, out = check(capsys, WARNING_ONLY, "--format", "github")
    assert code == 0
    [line] = out.splitlines()
    assert line.startswith(f"::warning file={str(WARNING_ONLY).replace(':', '%3A')},line=49,col=14,title=OE006::")


def test_list_rules_prints_every_rule(capsys):
    code = run(["check", "--list-rules"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [s.id for s in catalogue().specs()]
    assert {"OE000", "OE100"} <= {line.split()[0] for line in lines}   # stage ids are catalogued too
    assert any(line.split()[:2] == ["OE006", "warning"] for line in lines)
    assert any(line.split()[:2] == ["OE018", "error"] for line in lines)


def test_default_registry_is_profiles_yaml_in_the_working_directory(capsys, tmp_path, monkeypatch):
    shutil.copy(ERRORS, tmp_path / "profiles.yaml")
    monkeypatch.chdir(tmp_path)
    code = run(["check"])   # no proto/ here, so the contract rules are skipped
    out = capsys.readouterr().out
    assert code == 1 and "profiles.yaml:57:15: error OE018" in out


def test_missing_file_exits_2_with_a_record(capsys, tmp_path):
    missing = tmp_path / "nope.yaml"
    code, out = check(capsys, missing)
    assert code == 2
    assert out.startswith(f"{missing}: error OE000: no such file")


def test_missing_file_in_json_is_still_json(capsys, tmp_path):
    code, out = check(capsys, tmp_path / "nope.yaml", "--format", "json")
    assert code == 2
    [finding] = json.loads(out)["diagnostics"]
    assert finding["rule_id"] == "OE000" and finding["line"] == 0


def test_a_directory_exits_2(capsys, tmp_path):
    code, out = check(capsys, tmp_path)
    assert code == 2 and "OE000" in out


@pytest.mark.parametrize("text, line, column", [
    ("registry: [unclosed\n", 2, 1),
    ("registry:\n  revision: 1\n package: x\n", 3, 2),
    ("a: b: c\n", 1, 5),
    ("registry: 1\n---\nprofiles: []\n", 3, 1),
])
def test_unparsable_yaml_exits_2_with_a_located_record(capsys, tmp_path, text, line, column):
    path = tmp_path / "profiles.yaml"
    path.write_text(text)
    code, out = check(capsys, path, "--format", "json")
    assert code == 2
    [finding] = json.loads(out)["diagnostics"]
    assert (finding["rule_id"], finding["line"], finding["column"]) == ("OE000", line, column)
    assert finding["hint"]


def test_invalid_utf8_is_located(capsys, tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_bytes(b"registry:\n  package: op\xffen\n")
    code, out = check(capsys, path)
    assert code == 2
    assert f"{path}:2:14: error OE000: the file is not valid UTF-8" in out


@pytest.mark.slow
@pytest.mark.skipif(not OESPEC.exists(), reason="the project is not installed into .venv")
def test_installed_command_never_prints_a_traceback(tmp_path):
    broken = tmp_path / "profiles.yaml"
    broken.write_text("registry:\n  revision: [1\nprofiles:\n")
    for args, expected in ([str(broken)], 2), ([str(tmp_path / "missing.yaml")], 2), \
                          ([str(VALID)], 0), ([str(ERRORS)], 1):
        result = subprocess.run([str(OESPEC), "check", "--no-contract", *args],
                                capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert result.returncode == expected, result.stdout + result.stderr
        assert "Traceback" not in result.stdout + result.stderr
    result = subprocess.run([str(OESPEC), "check", "--no-contract", str(broken)],
                            capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert f"{broken}:" in result.stdout and "OE000" in result.stdout


def test_module_entry_point_matches(tmp_path):
    result = subprocess.run([sys.executable, "-m", "oespec.cli", "check", "--no-contract", str(WARNING_ONLY),
                             "--fail-on", "warning"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 1 and "OE006" in result.stdout


def test_without_protos_beside_the_registry_the_check_says_the_proto_checks_did_not_run(tmp_path, capsys):
    registry = tmp_path / "profiles.yaml"
    shutil.copy2(ROOT / "profiles.yaml", registry)
    code = run(["check", str(registry), "--no-head"])
    captured = capsys.readouterr()
    assert code == 0 and captured.out.strip().endswith("0 findings (0 errors, 0 warnings, 0 infos)")
    assert f"no {tmp_path.as_posix()}/proto/ beside {registry}" in captured.err
    assert "did not run" in captured.err and "--proto-root" in captured.err
    # Given a proto root, the cross-checks run: the checkout's protos agree with its registry.
    code = run(["check", str(registry), "--no-head", "--proto-root", str(ROOT / "proto")])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    # ... and a stale proto is found through it.
    protos = tmp_path / "protos"
    shutil.copytree(ROOT / "proto", protos)
    caps = protos / "openengine/v1/capabilities.proto"
    caps.write_text(caps.read_text().replace("CoreCapabilities core = 10", "CoreCapabilities core = 9"))
    code = run(["check", str(registry), "--no-head", "--proto-root", str(protos)])
    assert code == 1 and "OE105" in capsys.readouterr().out
    # A proto root that does not exist is unusable input.
    assert run(["check", str(registry), "--proto-root", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_a_misspelled_rpc_gets_a_did_you_mean(tmp_path, capsys):
    registry = tmp_path / "profiles.yaml"
    registry.write_text((ROOT / "profiles.yaml").read_text().replace(
        "name: grpc.health.v1.Health/Watch", "name: grpc.health.v1.Health/Wacth"))
    code = run(["check", str(registry), "--no-head", "--proto-root", str(ROOT / "proto"), "--format", "json"])
    diags = json.loads(capsys.readouterr().out)["diagnostics"]
    misspelled = [d for d in diags if d["rule_id"] == "OE101"]
    assert code == 1 and len(misspelled) == 1
    assert misspelled[0]["hint"].startswith("did you mean grpc.health.v1.Health/Watch?")


def test_a_limit_removed_while_a_request_limit_option_names_it_is_found(tmp_path, capsys):
    """The limit leaves the registry, `oespec generate` would drop its capability field, but the
    hand-written request message still bounds a field by it."""
    text = (ROOT / "profiles.yaml").read_text()
    start, end = text.index("      - name: max_logprobs\n"), text.index("      - name: max_sequences\n")
    registry = tmp_path / "profiles.yaml"
    registry.write_text(text[:start] + text[end:])
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    code = run(["check", str(registry), "--no-head", "--format", "json"])
    diags = [d for d in json.loads(capsys.readouterr().out)["diagnostics"] if d["rule_id"] == "OE107"]
    generation = (tmp_path / "proto/openengine/v1/generation.proto").read_text().splitlines()
    # Each finding sits at the option that names the limit.
    starts = [n for n, line in enumerate(generation, 1) if "option (openengine.v1.request_limit)" in line]
    lines = [max(s for s in starts if s < n) for n, line in enumerate(generation, 1) if 'limit: "max_logprobs"' in line]
    assert code == 1 and [d["line"] for d in diags] == lines and len(lines) == 2
    assert all(d["path"].endswith("proto/openengine/v1/generation.proto") for d in diags)
    assert "openengine.core.max_logprobs" in diags[0]["message"] and "restore the limit" in diags[0]["hint"]
