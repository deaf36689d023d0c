"""The runtime needs nothing from the checkout: started in another folder, or installed from a
wheel into a fresh environment, `oespec engine` and the conformance runner behave as they do in
the repository. Its one source for the contract is the compiled descriptors in the package."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import json_format

from openengine.conformance import all_cases, coverage, render_matrix
from openengine.v1 import discovery_pb2, discovery_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
OESPEC = Path(sys.executable).parent / "oespec"


@contextlib.contextmanager
def engine_process(oespec: Path | str, *args: str, cwd: Path, env: dict | None = None):
    """Start `oespec engine --port 0 ...` in `cwd`; yield its address once it serves."""
    proc = subprocess.Popen([str(oespec), "engine", "--port", "0", *args], cwd=cwd, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            found = re.search(r"serving on (\S+)", line)
            if found:
                yield found.group(1)
                break
        else:
            pytest.fail(f"the engine did not start (exit {proc.wait(10)}):\n{''.join(lines)}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def discovery(address: str) -> dict:
    """What the engine says about itself, without what differs per process (its instance id)."""
    with grpc.insecure_channel(address) as channel:
        stub = discovery_service_pb2_grpc.DiscoveryStub(channel)
        info = stub.GetEngineInfo(discovery_pb2.GetEngineInfoRequest(), timeout=10)
        caps = stub.GetCapabilities(discovery_pb2.GetCapabilitiesRequest(), timeout=10)
    info.ClearField("instance_id")
    return {"info": json_format.MessageToDict(info), "capabilities": json_format.MessageToDict(caps)}


def bogus_registry(folder: Path) -> None:
    """A profiles.yaml that contradicts the compiled contract: another revision, and the load
    profile forbidden outright. An engine that read it would advertise something else or refuse."""
    data = yaml.safe_load((ROOT / "profiles.yaml").read_text(encoding="utf-8"))
    data["registry"]["revision"] = 999
    data["registry"]["schema_revision"] = 999
    for profile in data["profiles"]:
        if profile["name"] == "openengine.load":
            profile["incompatible_with"] = [{"profile": "openengine.core", "reason": "bogus registry"}]
    (folder / "profiles.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    (folder / "spec").mkdir()
    (folder / "spec" / "bogus.md").write_text("**REQ-" "BOGUS-001** *(wire)* Nothing.\n", encoding="utf-8")


@pytest.mark.slow
def test_engine_started_in_another_folder_ignores_the_profiles_yaml_there(tmp_path):
    bogus_registry(tmp_path)
    args = ("--profiles", "all", "--instance-id", "same")
    with engine_process(OESPEC, *args, cwd=ROOT) as address:
        in_checkout = discovery(address)
    with engine_process(OESPEC, *args, cwd=tmp_path) as address:
        elsewhere = discovery(address)
    assert elsewhere == in_checkout
    names = [p["name"] for p in elsewhere["capabilities"]["profiles"]]
    assert "openengine.load" in names and elsewhere["info"]["schemaRevision"] != 999


def _fresh_environment(where: Path) -> Path:
    """A new venv whose only extra path is the worktree venv's site-packages, added as a plain
    path: the dependencies import from there, but the checkout's editable install (a .pth hook in
    that folder) is not run, so `openengine` and `oespec` can only come from the wheel. Made
    without pip (bootstrapping pip costs more than the rest of the test): the checkout's pip
    installs into it with `--python`."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]
    Path(site, "worktree-dependencies.pth").write_text(deps + "\n", encoding="utf-8")
    return python


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_installed_wheel_runs_the_engine_and_the_runner_outside_the_checkout(tmp_path):
    if not (ROOT / "openengine" / "v1" / "capabilities_pb2.py").is_file():
        pytest.fail("the Python bindings are missing; run `make bindings` before building a wheel")
    dist, outside = tmp_path / "dist", tmp_path / "elsewhere"
    outside.mkdir()
    build = tmp_path / "build"  # a copy, so the build leaves no build/ or egg-info in the checkout
    shutil.copytree(ROOT, build, ignore=shutil.ignore_patterns(
        ".git", ".venv", "site", "bench", "tests", "__pycache__", "*.egg-info", "build", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(dist), str(build)], check=True, timeout=600)
    wheel = next(dist.glob("openengine_profiles-*.whl"))
    python = _fresh_environment(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    oespec = tmp_path / "venv" / "bin" / "oespec"

    where = subprocess.run([str(python), "-c", "import oespec, openengine, openengine.contractkit; "
                            "print(openengine.__file__); print(oespec.__file__); print(openengine.contractkit.__file__)"],
                           cwd=outside, env=env, check=True, capture_output=True, text=True).stdout.split()
    assert all(Path(p).is_relative_to(tmp_path / "venv") for p in where), where

    listed = subprocess.run([str(oespec), "conformance", "--list"], cwd=outside, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [c.id for c in all_cases()]

    matrix = subprocess.run([str(oespec), "conformance", "--matrix"], cwd=outside, env=env,
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in matrix.stderr and matrix.stdout, matrix.stderr
    assert matrix.stdout == render_matrix(coverage(all_cases()))

    bogus_registry(outside)
    with engine_process(oespec, "--profiles", "all", "--instance-id", "same", cwd=outside, env=env) as address:
        installed = discovery(address)
    with engine_process(OESPEC, "--profiles", "all", "--instance-id", "same", cwd=ROOT) as address:
        in_checkout = discovery(address)
    installed["info"].pop("engineVersion", None), in_checkout["info"].pop("engineVersion", None)
    assert installed == in_checkout
    assert json.dumps(installed)  # plain data, nothing process-specific left
