"""`oespec engine --backend llama` serving the tiny model conforms: the whole conformance suite,
Admin and shutdown included, with nothing unchecked that its profiles (core, load and admin) make
checkable."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from oespec.cli import run

OESPEC = Path(sys.executable).parent / "oespec"

pytestmark = pytest.mark.waits


def start_engine(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([str(OESPEC), "engine", "--backend", "llama", "--port", "0", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        found = re.search(r"serving .* on (\S+) \(instance", line)
        if found:
            return proc, found.group(1)
    proc.wait()
    raise AssertionError("the llama engine did not start:\n" + "".join(seen))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_llama_engine_conforms(tiny_model_path):
    proc, address = start_engine("--model", str(tiny_model_path), "--limit", "core.max_running_requests=4",
                                 "--admin-token", "llama-admin")
    try:
        result = subprocess.run(
            [str(OESPEC), "conformance", "--target", address, "--format", "json", "--admin-token", "llama-admin",
             "--shutdown-command", f"kill -TERM {proc.pid}"],
            capture_output=True, text=True, timeout=200)
        report = json.loads(result.stdout)
        proc.wait(30)   # the runner's last case shut the engine down
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    not_passed = {r["case"]: (r["outcome"], r["reason"]) for r in report["results"]
                  if r["outcome"] in ("fail", "error")}
    assert result.returncode == 0, (not_passed or report["verdict"], result.stderr[-2000:])
    assert report["verdict"]["text"].startswith("CONFORMS"), report["verdict"]
    assert report["verdict"]["counts"]["fail"] == 0 and report["verdict"]["counts"]["error"] == 0
    unchecked = {r["case"]: r["reason"] for r in report["results"] if r["outcome"] == "unchecked"}
    # What stays unchecked is what the engine's profiles and set-up make unobservable: no limit is
    # updatable, so none of double type, and Admin has one credential, so no token without rights.
    assert set(unchecked) <= {"admin.numbers.update-config", "admin.permission-denied"}, unchecked
    assert set(report["verdict"]["unchecked_requirements"]) <= {"REQ-ADMIN-003"}
    passed = {r["case"] for r in report["results"] if r["outcome"] == "pass"}
    assert {"core.shutdown.graceful", "core.generate.client-cancel", "core.abort.by-id",
            "core.generate.limits", "load.watch.periodic", "admin.drain"} <= passed
    assert proc.returncode == 0


@pytest.mark.parametrize(("args", "says"), [
    ((), "--backend llama needs --model FILE.gguf"),
    (("--model", "/nonexistent/model.gguf"), "/nonexistent/model.gguf: no such model file"),
    (("--model", "m.gguf", "--role", "decode"), "--role: only the reference engine takes this flag"),
    (("--model", "m.gguf", "--limit", "core.max_sequences=2"),
     "the llama backend sets core.max_running_requests=N"),
    (("--model", "m.gguf", "--limit", "core.max_running_requests=300"),
     "max_running_requests 300: must be 1..256"),
    (("--model", "m.gguf", "--threads", "0"), "threads 0: must be 1 or more"),
], ids=["no-model", "no-file", "reference-flag", "other-limit", "too-many-sequences", "threads"])
def test_what_cannot_be_served_is_said_without_a_traceback(args, says, capsys):
    assert run(["engine", "--backend", "llama", "--port", "0", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_file_that_is_not_a_model_is_refused_with_llama_cpps_reason(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    assert run(["engine", "--backend", "llama", "--port", "0", "--model", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: llama.cpp cannot load this model (" in err and "Traceback" not in err
