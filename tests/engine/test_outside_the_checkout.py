"""The runtime needs nothing from the checkout: started in another folder, or installed like a
user installs it, `oespec engine` and the conformance runner behave as they do in the repository.
Its one source for the contract is the compiled descriptors in the package.

The installs are real: the sdist and the wheel are built from a copy of the sources (the
checkout's own bindings left out, so the wheel's come from its build step), then installed with
pip into virtual environments outside the checkout, the runtime alone and with the toolkit
extra. The dependencies come from a wheelhouse in the checkout's build/ folder, which `make test`
fills from the package index (`make wheelhouse`); the test fills it itself when run otherwise.
The venv is new every run: the runtime is installed into it first, and the toolkit extra is added
to it for the module's last tests (see `toolkit`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import json_format

from openengine.conformance import all_cases, coverage, render_matrix
from openengine.v1 import control_service_pb2_grpc, discovery_pb2, discovery_service_pb2_grpc, server_pb2

ROOT = Path(__file__).resolve().parents[2]
OESPEC = Path(sys.executable).parent / "oespec"
REQUIREMENTS = ROOT / "requirements.txt"
WHEELHOUSE = ROOT / "build" / "wheelhouse"
DISTRIBUTION = "openengine-profiles"
RUNTIME_REQUIRES = {"grpcio", "grpcio-health-checking", "grpcio-reflection", "grpcio-status",
                    "googleapis-common-protos", "protobuf", "ruamel.yaml"}
TOOLKIT_ONLY_MODULES = ("jinja2", "jsonschema", "mkdocs", "material", "grpc_tools")


@contextlib.contextmanager
def engine_process(oespec: Path | str, *args: str, cwd: Path, env: dict | None = None):
    """Start `oespec engine --port 0 ...` in `cwd`; yield (address, process) once it serves."""
    proc = subprocess.Popen([str(oespec), "engine", "--port", "0", *args], cwd=cwd, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            found = re.search(r"serving on (\S+)", line)
            if found:
                # Keep reading its log, so a full pipe never blocks the engine.
                threading.Thread(target=lines.extend, args=(proc.stderr,), daemon=True).start()
                yield found.group(1), proc
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
        info = control_service_pb2_grpc.ControlStub(channel).GetServerInfo(server_pb2.GetServerInfoRequest(), timeout=10)
        caps = discovery_service_pb2_grpc.DiscoveryStub(channel).GetCapabilities(discovery_pb2.GetCapabilitiesRequest(),
                                                                                timeout=10)
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
    with engine_process(OESPEC, *args, cwd=ROOT) as (address, _):
        in_checkout = discovery(address)
    with engine_process(OESPEC, *args, cwd=tmp_path) as (address, _):
        elsewhere = discovery(address)
    assert elsewhere == in_checkout
    names = [p["name"] for p in elsewhere["capabilities"]["profiles"]]
    assert "openengine.load" in names and elsewhere["info"]["schemaRevision"] != 999


# --- building the distributions ------------------------------------------------------------------

@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path        # built from the sdist, as `pip install` of the sdist builds it
    tree_wheel: Path   # built from the source tree


def _sources(directory: str, entries: list[str]) -> set[str]:
    """What a copy of the sources leaves out: tests, benchmarks, the site, caches, and build
    outputs (the checkout's bindings among them)."""
    rel = Path(directory).resolve().relative_to(ROOT).as_posix()
    skip = {e for e in entries if e in ("__pycache__", ".pytest_cache", ".hypothesis") or e.endswith(".egg-info")}
    if rel == ".":
        skip |= {".git", ".venv", "build", "site", "bench", "tests"} & set(entries)
    if rel == "openengine":
        skip |= {"v1"} & set(entries)
    return skip


def _run(args: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    out = tmp_path_factory.mktemp("distributions")
    src = out / "src"
    shutil.copytree(ROOT, src, ignore=_sources)
    # The build requirements (setuptools, grpcio-tools) are the pinned ones of the checkout's venv.
    # Without --sdist or --wheel, build makes the sdist and then the wheel from the unpacked sdist.
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out / "from-sdist", src])
    _run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", out / "tree", src])
    return Built(next((out / "from-sdist").glob("openengine_profiles-*.tar.gz")),
                 next((out / "from-sdist").glob("openengine_profiles-*.whl")),
                 next((out / "tree").glob("openengine_profiles-*.whl")))


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_sdist_holds_the_sources_and_builds_the_same_wheel(built):
    with tarfile.open(built.sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("setup.py", "pyproject.toml", "LICENSE", "README.md", "profiles.yaml", "MANIFEST.in",
                   "proto/openengine/v1/options.proto", "spec/index.md", "schemas/capabilities.schema.json",
                   "openengine/conformance/requirements.json", "oespec/registry/profiles.schema.json"):
        assert needed in names, f"the sdist lacks {needed}"
    assert not [n for n in names if n.startswith("openengine/v1/")], \
        "the sdist carries build outputs"
    assert wheel_files(built.wheel) == wheel_files(built.tree_wheel)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_wheel_carries_the_bindings_oespec_generate_writes(built):
    files = wheel_files(built.wheel)
    top = {name.split("/", 1)[0] for name in files}
    info = next(name for name in top if name.endswith(".dist-info"))
    assert top - {info} == {"oespec", "openengine"}
    bound = {name: data for name, data in files.items() if name.startswith("openengine/v1/")}
    in_checkout = {p.relative_to(ROOT).as_posix(): p.read_bytes() for p in (ROOT / "openengine/v1").rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts}
    assert in_checkout, "the checkout has no bindings; run `make bindings`"
    assert bound == in_checkout
    metadata = files[f"{info}/METADATA"].decode()
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    assert "Provides-Extra: toolkit" in metadata and "Project-URL: " in metadata
    assert "oespec = oespec.cli:main" in files[f"{info}/entry_points.txt"].decode()


# --- installing them ----------------------------------------------------------------------------

def _pip(*args) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *map(str, args)]


def fresh_environment(where: Path) -> Path:
    """A new venv, made without pip of its own (bootstrapping pip costs more than an install); the
    checkout's pip installs into it with `--python`. Returns its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", "--without-pip", where])
    return where / "bin" / "python"


def pip_install(python: Path, requirement: str) -> None:
    """`requirement` installed into the venv of `python` by pip, at the versions requirements.txt pins."""
    install = _pip("--python", python, "install", "--quiet", "--no-compile", "-c", REQUIREMENTS,
                   "--no-index", "--find-links", WHEELHOUSE, requirement)
    if subprocess.run(install, capture_output=True, timeout=600).returncode != 0:
        # A dependency the wheelhouse lacks (the first run on this checkout, or a changed pin):
        # fetch them from the package index once.
        _run(_pip("download", "--quiet", "-c", REQUIREMENTS, "-d", WHEELHOUSE, requirement))
        for own in WHEELHOUSE.glob("openengine_profiles-*"):
            own.unlink()   # the distribution itself always comes from this run's build
        _run(install)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def runtime(built, tmp_path_factory) -> Path:
    """The runtime install's venv: `pip install openengine-profiles`."""
    python = fresh_environment(tmp_path_factory.mktemp("runtime") / "venv")
    pip_install(python, str(built.wheel))
    return python


@pytest.fixture(scope="module")
def toolkit(runtime, built) -> Path:
    """The toolkit install's venv: `pip install 'openengine-profiles[toolkit]'` where the runtime was
    installed, as a user adds the extra; pip installs what the extra adds. The module's tests that
    use it come after those of the runtime install alone."""
    pip_install(runtime, f"{built.wheel}[toolkit]")
    return runtime


def oespec_in(python: Path, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(python.parent / "oespec"), *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def copied_registry(folder: Path) -> Path:
    """A protocol maintainer's folder: the registry, the protos and the spec, under git."""
    folder.mkdir()
    shutil.copy2(ROOT / "profiles.yaml", folder)
    for name in ("proto", "spec"):
        shutil.copytree(ROOT / name, folder / name)
    git = ["git", "-c", "user.name=maintainer", "-c", "user.email=maintainer@example.org"]
    _run([*git, "init", "--quiet"], cwd=folder)
    _run([*git, "add", "-A"], cwd=folder)
    _run([*git, "commit", "--quiet", "-m", "baseline"], cwd=folder)
    return folder


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_runtime_install_has_its_dependencies_and_no_toolkit_libraries(runtime, tmp_path):
    where = _run([runtime, "-c", "import oespec, openengine, openengine.contractkit, openengine.v1; "
                  "print(openengine.__file__, oespec.__file__, openengine.v1.__file__)"],
                 cwd=tmp_path, env=clean_env()).stdout.split()
    assert all(Path(p).is_relative_to(runtime.parent.parent) for p in where), where
    present = _run([runtime, "-c", "import importlib.util, sys; "
                    "print(*[m for m in sys.argv[1:] if importlib.util.find_spec(m)])", *TOOLKIT_ONLY_MODULES],
                   cwd=tmp_path, env=clean_env()).stdout.split()
    assert present == []
    # What pip installed, and what the distribution requires without its extra, from the venv's
    # own metadata (what `pip list` and `pip show` print).
    metadata = json.loads(_run([runtime, "-c", (
        "import importlib.metadata as m, json, re, sys\n"
        "requires = [r for r in m.requires(sys.argv[1]) if 'extra ==' not in r]\n"
        "print(json.dumps({'installed': [d.metadata['Name'] for d in m.distributions()],\n"
        "                  'requires': [re.match(r'[A-Za-z0-9._-]+', r)[0] for r in requires]}))\n"),
        DISTRIBUTION], cwd=tmp_path, env=clean_env()).stdout)
    installed = {name.lower() for name in metadata["installed"]}
    assert DISTRIBUTION in installed
    assert not installed & {"jinja2", "jsonschema", "mkdocs", "mkdocs-material", "grpcio-tools"}
    assert {name.lower() for name in metadata["requires"]} == RUNTIME_REQUIRES


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_engine_author_runs_the_engine_and_the_runner_from_the_runtime_install(runtime, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    bogus_registry(outside)
    args = ("--profiles", "all", "--instance-id", "same", "--admin-token", "secret")
    with engine_process(runtime.parent / "oespec", *args, cwd=outside, env=clean_env()) as (address, engine):
        installed = discovery(address)
        (outside / "caps.json").write_text(json.dumps(installed["capabilities"], indent=2), encoding="utf-8")
        validated = oespec_in(runtime, "validate", "caps.json", cwd=outside)
        assert validated.returncode == 0 and "0 findings" in validated.stdout, validated.stdout + validated.stderr
        run = oespec_in(runtime, "conformance", "--target", address, "--admin-token", "secret",
                        "--shutdown-command", f"kill -TERM {engine.pid}", cwd=outside, timeout=300)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stdout + run.stderr
        assert re.search(r"^CONFORMS", run.stdout, re.M) and re.search(r"^pass [1-9]", run.stdout, re.M), run.stdout
    with engine_process(OESPEC, *args, cwd=ROOT) as (address, _):
        in_checkout = discovery(address)
    installed["info"].pop("engineVersion", None), in_checkout["info"].pop("engineVersion", None)
    assert installed == in_checkout

    listed = oespec_in(runtime, "conformance", "--list", cwd=outside)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [c.id for c in all_cases()]
    matrix = oespec_in(runtime, "conformance", "--matrix", cwd=outside)
    # The requirement matrix an installed runner prints is the checkout's own.
    assert matrix.returncode == 0 and matrix.stdout == render_matrix(coverage(all_cases())), matrix.stderr

    (outside / "expected.yaml").write_text("- case: load.watch.sequence\n  reson: later\n", encoding="utf-8")
    refused = oespec_in(runtime, "conformance", "--target", "127.0.0.1:1", "--expected-failures", "expected.yaml",
                        cwd=outside)
    assert refused.returncode == 2 and "expected.yaml:2:3:" in refused.stderr and "Traceback" not in refused.stderr, \
        refused.stderr

    modules = ["openengine.client", "openengine.validate", "openengine.conformance", "openengine.engine"]
    if (ROOT / "openengine" / "serve").is_dir():
        modules.append("openengine.serve")   # the engine SDK
    _run([runtime, "-c", "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; "
          "from openengine.client import AsyncLoadWatcher, CapabilityView, LoadWatcher", *modules],
         cwd=outside, env=clean_env())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_runtime_install_names_the_toolkit_extra_for_the_registry_commands(runtime, tmp_path):
    folder = copied_registry(tmp_path / "protocol")
    for command in (["check"], ["generate"], ["breaking", "--against", "HEAD"]):
        done = oespec_in(runtime, *command, cwd=folder)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr.splitlines() == [done.stderr.strip()] and "openengine-profiles[toolkit]" in done.stderr, \
            (command, done.stderr)
    assert not (folder / "openengine").exists() and not (folder / "schemas").exists(), "half-written output"
    listed = oespec_in(runtime, "--help", cwd=folder)
    assert all(name in listed.stdout for name in ("check", "generate", "breaking", "engine", "conformance"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_protocol_maintainer_checks_generates_and_compares_with_the_toolkit_install(toolkit, tmp_path):
    folder = copied_registry(tmp_path / "protocol")
    for command in (["check"], ["generate"], ["generate", "--check"], ["spec"], ["breaking", "--against", "HEAD"]):
        done = oespec_in(toolkit, *command, cwd=folder, timeout=300)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert (folder / "schemas" / "capabilities.schema.json").is_file()
    # A wire break is found by the registry rules and by the buf the toolkit installs.
    load = folder / "proto" / "openengine" / "v1" / "load.proto"
    load.write_text(load.read_text(encoding="utf-8").replace("bool per_rank = 4;", "bool per_rank = 99;"),
                    encoding="utf-8")
    broken = oespec_in(toolkit, "breaking", "--against", "HEAD", cwd=folder, timeout=300)
    assert broken.returncode == 1 and "buf:FIELD_NO_DELETE" in broken.stdout, broken.stdout + broken.stderr
