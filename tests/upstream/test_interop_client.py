"""The upstream client (tests/interop/upstream_client.py) against a tiny engine written from the
same generated stubs: clean, it passes every check; with one fault planted at a time, the check
that covers that fault fails and the exit status is 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.interop.stubs import ROOT, upstream_command

SERVICER = Path(__file__).resolve().parent / "upstream_servicer.py"
CHECKS = ("control.get_server_info", "control.get_model_info[counting-model]", "control.get_model_info[unknown]",
          "control.get_load", "control.health", "inference.generate.max_tokens", "inference.generate.stop_text",
          "inference.generate.stop_token", "inference.generate.seed", "inference.generate.num_sequences",
          "inference.generate.output_logprobs", "control.abort.running", "control.abort.unknown", "control.abort.no_target",
          "control.load_lora", "control.unload_lora", "control.list_loras", "control.get_kv_event_sources",
          "control.subscribe_kv_events")

pytestmark = pytest.mark.slow


def _run_client(stubs: Path, defect: str = "") -> tuple[int, dict[str, str], str]:
    """The client's exit status, each check's verdict, and its whole output."""
    engine = subprocess.Popen(upstream_command(stubs, SERVICER, *(["--defect", defect] if defect else [])),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = engine.stdout.readline()
        assert line.startswith("serving on "), line
        proc = subprocess.run(upstream_command(stubs, Path(ROOT / "tests/interop/upstream_client.py"),
                                               "--target", line.split()[-1], "--timeout", "20"),
                              capture_output=True, text=True, timeout=120)
    finally:
        engine.stdin.close()
        engine.wait(timeout=30)
    verdicts = {}
    for out in proc.stdout.splitlines():
        verdict, _, rest = out.partition(" ")
        if verdict in ("PASS", "FAIL", "SKIP"):
            verdicts[rest.split(":", 1)[0]] = verdict
    return proc.returncode, verdicts, proc.stdout + proc.stderr


def test_the_stubs_come_from_the_image_alone(upstream_stubs):
    made = sorted(p.relative_to(upstream_stubs).as_posix() for p in upstream_stubs.rglob("*.py"))
    assert "openengine/v1/openengine_pb2_grpc.py" in made and "openengine/v1/generation_pb2.py" in made
    assert not any(name.startswith("google/") for name in made)   # protobuf's own modules serve the imports


def test_a_correct_engine_passes_every_check(upstream_stubs):
    code, verdicts, output = _run_client(upstream_stubs)
    assert code == 0, output
    assert verdicts == {name: "PASS" for name in CHECKS}, output


def test_the_child_imports_upstreams_package_even_with_the_project_on_pythonpath(upstream_stubs, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    probe = "import sys; sys.path[:0] = [sys.argv[1]]; import openengine; print(openengine.__file__)"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(upstream_stubs)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(upstream_stubs / "openengine" / "__init__.py")


# defect -> the check that must catch it
DEFECTS = {
    "revision": "control.get_server_info",
    "unknown-model": "control.get_model_info[unknown]",
    "max-tokens": "inference.generate.max_tokens",
    "usage-early": "inference.generate.max_tokens",
    "request-id": "inference.generate.max_tokens",
    "stop": "inference.generate.stop_text",
    "stop-token": "inference.generate.stop_token",
    "num-sequences": "inference.generate.num_sequences",
    "seed": "inference.generate.seed",
    "abort": "control.abort.running",
    "garbage": "control.list_loras",
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_each_planted_defect_is_caught(upstream_stubs, defect):
    code, verdicts, output = _run_client(upstream_stubs, defect)
    assert code == 1, output
    assert verdicts.get(DEFECTS[defect]) == "FAIL", output
