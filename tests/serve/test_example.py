"""The example engine (examples/counting_engine.py) is an engine built outside the runtime package
on the SDK's public names alone: started from a folder outside the checkout with no flag but the
port, a client generated from upstream's protos gets correct answers to every upstream RPC, and
it conforms (`oespec conformance`, shutdown included)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import openengine.serve
from tests.interop.stubs import upstream_command, upstream_stubs  # noqa: F401  (the session fixture)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "counting_engine.py"
OESPEC = Path(sys.executable).parent / "oespec"
UPSTREAM_CLIENT = ROOT / "tests" / "interop" / "upstream_client.py"

pytestmark = pytest.mark.waits


def test_the_example_is_small_and_uses_only_the_sdks_public_names():
    source = EXAMPLE.read_text(encoding="utf-8")
    assert len(source.splitlines()) < 150
    imported = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "openengine":
            assert node.module == "openengine.serve", f"line {node.lineno} imports {node.module}"
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] != "openengine" for a in node.names), f"line {node.lineno}"
    assert imported and set(imported) <= set(openengine.serve.__all__)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_example_serves_upstream_clients_and_conforms_from_outside_the_checkout(tmp_path, upstream_stubs):
    shutil.copy(EXAMPLE, tmp_path / "engine.py")
    proc = subprocess.Popen([sys.executable, "engine.py", "--port", "0"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        found = re.search(r"listening on (\S+)", line)
        assert found, f"the example did not start: {line!r}"
        upstream = subprocess.run(upstream_command(upstream_stubs, UPSTREAM_CLIENT, "--target", found.group(1)),
                                  capture_output=True, text=True, timeout=120)
        assert upstream.returncode == 0, upstream.stdout + upstream.stderr
        result = subprocess.run(
            [str(OESPEC), "conformance", "--target", found.group(1), "--format", "json",
             "--shutdown-command", f"kill -TERM {proc.pid}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=150)
        report = json.loads(result.stdout)
    finally:
        # The runner's shutdown case has already sent SIGTERM: let that graceful stop finish
        # before signalling again, so a second signal cannot cut it short.
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    assert result.returncode == 0, result.stdout[-3000:]
    assert report["verdict"]["text"].startswith("CONFORMS"), report["verdict"]
    assert report["verdict"]["counts"]["fail"] == 0 and report["verdict"]["counts"]["error"] == 0
    assert report["verdict"]["unchecked_requirements"] == []
    unchecked = {r["case"]: r["reason"] for r in report["results"] if r["outcome"] == "unchecked"}
    assert unchecked == {}
    passed = {r["case"] for r in report["results"] if r["outcome"] == "pass"}
    assert {"core.shutdown.graceful", "core.generate.client-cancel", "load.watch.periodic"} <= passed
    assert proc.returncode == 0
