"""Adding a profile is a workflow, not a research project (README "Add a profile",
spec/additions.md): in a copy of the repository, add the fixture profile `openengine.speculative`
(one RPC with its hand-written messages, two limits, a prerequisite on `openengine.load`, an
incompatibility with openengine.tasks, a spec page with numbered requirements, the next free
capability number), bump `registry.revision`, add the engine's implementation of the RPC, and
every step passes: `make generate`, then the pull-request workflow (`.ci/pull-request`: `make
check`, `make breaking` against the checkout as it was, the checks of `make test` that read the
registry's facts (spec areas, coverage, combinations, hand tables), `make conformance` with the
engine's `--profiles all`, `make site`) and its job summary. Adding a profile is the harmless change
of the workflow's own test: every step passes and the summary says so. The profile then shows up in
the capability messages, the validators, the JSON Schemas, the site (its requirements on its page)
and the conformance cases, and the only Python written by hand is the engine's service module.
Switching back to the branch without the profile, the first `make` passes.

The copy is a git repository (`main` the checkout as it is, `change` the added profile). It reuses
this checkout's virtual environment (PYTHONPATH points at the copy, so the copy's code runs); its
install inputs are dated before the environment's stamps, so make never reinstalls anything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.checkout import clone

# The workflow runs whole make steps in the copy (a site build, a suite): more than the default timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "add_a_profile"
VENV = Path(sys.executable).parent.parent
GENERATED = "generated from profiles.yaml"
STEP_TIMEOUT = 600   # a workflow run: a suite, a site build
# The checks of `make test` that read the registry's facts, and failed on an added profile before
# those facts came from the registry and the spec: spec areas, case coverage, combinations, tables.
REGISTRY_FACT_TESTS = ("tests/spec/test_spec.py", "tests/conformance/test_catalogue.py",
                       "tests/engine/test_combinations.py", "tests/registry/test_contract_facts.py")
# Where the walk-through puts each file of the fixture.
ADDED = {"speculative.proto": "proto/openengine/v1/speculative.proto", "speculative.md": "spec/speculative.md"}
ENGINE_MODULE = "openengine/engine/services/speculative.py"


def next_capability_number(registry_text: str) -> int:
    """The next free capability number, as the walk-through says to take it."""
    return max(int(n) for n in re.findall(r"^      number: (\d+)$", registry_text, re.M)) + 1


@pytest.fixture(scope="module")
def workdir(shared_checkout, tmp_path_factory) -> Path:
    """A clone of the run's shared checkout, on a branch `change` off `main` (the tree as it is)."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    root = clone(shared_checkout, tmp_path_factory.mktemp("add-a-profile") / "repo", branch="change")
    # The walk-through of spec/additions.md, step by step.
    registry = (root / "profiles.yaml").read_text()
    revision = int(re.search(r"^  revision: (\d+)$", registry, re.M).group(1))
    number = next_capability_number(registry)
    registry = re.sub(r"^  revision: \d+$", f"  revision: {revision + 1}", registry, count=1, flags=re.M)
    profile = (FIXTURE / "profile.yaml").read_text().replace("{capability_number}", str(number))
    (root / "profiles.yaml").write_text(registry.rstrip("\n") + "\n\n" + profile)
    for name, target in ADDED.items():
        shutil.copy2(FIXTURE / name, root / target)
    return root


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENENGINE_REGISTRY", "MAKEFLAGS", "MFLAGS")}
    env["PYTHONPATH"] = str(root)
    env["NO_MKDOCS_2_WARNING"] = "1"
    return env


def _run(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=root, env={**_env(root), **extra}, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT)


def _git(root: Path, *args: str) -> str:
    done = _run(root, "git", "-c", "user.name=maintainer", "-c", "user.email=maintainer@example.org",
                "-c", "commit.gpgsign=false", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _make(root: Path, *targets: str) -> str:
    done = _run(root, "make", "-s", *targets)
    assert done.returncode == 0, f"make {' '.join(targets)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _python(root: Path, code: str) -> str:
    done = _run(root, str(VENV / "bin" / "python"), "-c", code)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _json_document(stdout: str) -> dict:
    start = stdout.index("\n{") + 1 if not stdout.startswith("{") else 0
    return json.loads(stdout[start:])


@pytest.fixture(scope="module")
def generated(workdir: Path) -> Path:
    _make(workdir, "generate")
    # Before the engine implements the RPC it never advertises the profile (REQ-CORE-002) ...
    oespec = str(VENV / "bin" / "oespec")
    named = _run(workdir, oespec, "engine", "--profiles", "speculative", "--check-config")
    assert named.returncode == 2 and "openengine.v1.Speculative/VerifyDraft" in named.stderr, named.stderr
    every = _run(workdir, oespec, "engine", "--profiles", "all", "--check-config")
    assert every.returncode == 0 and "openengine.speculative" not in every.stdout, every.stdout + every.stderr
    # `make check` says so at once, at the RPC's line, naming the README step left out; so it does
    # for the spec page's area when the profile does not claim it.
    registry = (workdir / "profiles.yaml").read_text(encoding="utf-8")
    line = next(n for n, row in enumerate(registry.splitlines(), 1) if "Speculative/VerifyDraft" in row)
    unserved = _run(workdir, str(VENV / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--tb=line", "tests/test_engine_serves_every_rpc.py")
    assert unserved.returncode == 1 and f"profiles.yaml:{line}:" in unserved.stdout \
        and "Add a profile" in unserved.stdout, unserved.stdout[-3000:]
    unclaimed = workdir / "unclaimed.yaml"
    unclaimed.write_text(registry.replace("requirement_areas: [SPEC]", "requirement_areas: [SPECULATIVE]"))
    areas = _run(workdir, oespec, "spec", "--no-cases", "--registry", str(unclaimed))
    assert areas.returncode == 1 and "spec/speculative.md:" in areas.stdout and "SPEC008" in areas.stdout \
        and "Add a profile" in areas.stdout, areas.stdout
    unclaimed.unlink()
    # ... and the implementation is the one Python file written for the new profile.
    shutil.copy2(FIXTURE / "speculative.py", workdir / ENGINE_MODULE)
    _git(workdir, "add", "-A")
    _git(workdir, "commit", "-q", "-m", "openengine.speculative 1.0")
    return workdir


@pytest.fixture(scope="module")
def workflow(generated: Path, tmp_path_factory) -> Path:
    """The pull-request workflow's steps on the change, then its job summary; returns the
    summary's file. Each step must pass. The conformance step mostly waits on the engine's
    streams, so it runs beside the others (each step records its own status) rather than after
    them: this module is the suite's longest chain of work on one worker."""
    summary = tmp_path_factory.mktemp("workflow") / "summary.md"
    env = dict(BASE="main", GITHUB_STEP_SUMMARY=str(summary), PYTEST_WORKERS="0",
               SITE_ARTIFACT_URL="https://example.invalid/artifacts/1",
               PYTEST_ARGS=" ".join(("-p", "no:cacheprovider", "-q") + REGISTRY_FACT_TESTS))
    beside = subprocess.Popen([".ci/pull-request", "conformance"], cwd=generated, env={**_env(generated), **env},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        done = _run(generated, ".ci/pull-request", "check", "breaking", "test", "site", **env)
        conformance_output = beside.communicate(timeout=STEP_TIMEOUT)[0]
    finally:
        if beside.poll() is None:    # the step and the engine it started
            os.killpg(beside.pid, signal.SIGKILL)
            beside.wait()
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert beside.returncode == 0, conformance_output[-6000:]
    done = _run(generated, ".ci/pull-request", "summary", **env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return summary


def test_every_step_of_the_pull_request_workflow_passes_and_the_summary_says_so(generated: Path, workflow: Path):
    text = workflow.read_text(encoding="utf-8")
    for step in ("check", "breaking", "test", "conformance", "site"):
        assert f"| {step} | passed |" in text
    # Additions only: reported, and legal with the versions given.
    assert re.search(r"Verdict: no illegal change; \d+ change\(s\) reported", text), text
    counts = re.search(r"(\d+) cases: (\d+) passed, 0 failed, 0 errors, (\d+) skipped", text)
    assert counts and int(counts[1]) > 20 and int(counts[2]) > 0, text
    assert "[The built site](https://example.invalid/artifacts/1)" in text
    assert (generated / "build" / "pull-request" / "conformance.xml").is_file()
    assert (generated / "site" / "build" / "index.html").is_file()


def test_the_generated_files_and_the_site_carry_the_new_profile(generated: Path, workflow: Path):
    root = generated
    # Capability messages and the service.
    caps = (root / "proto/openengine/v1/capabilities.proto").read_text()
    number = next_capability_number((REPO / "profiles.yaml").read_text())
    assert re.search(rf"SpeculativeCapabilities speculative = {number}\b", caps), caps[-2000:]
    service = (root / "proto/openengine/v1/speculative_service.proto").read_text()
    assert service.startswith("// " + GENERATED) and "rpc VerifyDraft(VerifyDraftRequest)" in service
    # JSON Schemas: the limits with their ranges.
    schema = json.loads((root / "schemas/capabilities.schema.json").read_text())
    props = schema["$defs"]["openengine.v1.SpeculativeCapabilities"]["properties"]
    ranged = next(a for a in props["maxDraftTokens"]["anyOf"] if a.get("type") != "null")
    assert (ranged["minimum"], ranged["maximum"], ranged["default"]) == (1, 64, 4)
    assert "treeDrafts" in props
    # Validators: the new limit's range and the new incompatibility are judged.
    verdict = _python(root, (
        "from openengine.v1 import capabilities_pb2 as c\n"
        "from openengine.validate import validate_capabilities\n"
        "caps = c.Capabilities(revision=1)\n"
        "for name in ('openengine.core', 'openengine.speculative', 'openengine.tasks'):\n"
        "    caps.profiles.add(name=name, major=1)\n"
        "caps.speculative.max_draft_tokens = 65\n"
        "for v in validate_capabilities(caps).errors: print(v.rule_id, v.path, v.message)\n"))
    assert re.search(r"^OEV111 speculative\.max_draft_tokens ", verdict, re.M), verdict
    assert re.search(r"^OEV121 .*openengine\.speculative.*openengine\.tasks", verdict, re.M), verdict
    # The site: the message and service pages, and the profile in the profile catalogue.
    build = root / "site/build"
    assert "VerifyDraft" in (build / "reference/protocol/speculative_service/index.html").read_text()
    assert "SpeculativeCapabilities" in (build / "reference/protocol/capabilities/index.html").read_text()
    assert "openengine.speculative" in (build / "profiles/index.html").read_text()
    # The spec page is in the navigation, and its requirements are on the profile's page (the
    # profile's `requirement_areas`).
    assert 'href="speculative/"' in (build / "index.html").read_text()
    profile_page = (build / "reference/profiles/speculative/index.html").read_text()
    assert "REQ-SPEC-001" in profile_page and "REQ-SPEC-002" in profile_page
    # Conformance cases: the generic ones exist for the new profile.
    listed = _run(root, str(VENV / "bin" / "oespec"), "conformance", "--list").stdout
    assert re.search(r"^speculative\.rpcs\.served\s", listed, re.M), listed
    assert re.search(r"^speculative\.absent\.unimplemented\s", listed, re.M), listed


def test_only_the_engines_service_module_is_hand_written_python(generated: Path):
    changed = []
    for path in sorted(generated.rglob("*.py")):
        rel = path.relative_to(generated)
        if rel.parts[:2] == ("openengine", "v1") or "__pycache__" in rel.parts:
            continue
        original = REPO / rel
        if not original.exists() or original.read_bytes() != path.read_bytes():
            changed.append(rel.as_posix())
    hand_written = [p for p in changed if GENERATED not in (generated / p).read_text()[:200]]
    assert hand_written == [ENGINE_MODULE], changed


def test_the_engine_serves_all_it_can_and_conforms(generated: Path, workflow: Path, tmp_path: Path):
    root = generated
    oespec = str(VENV / "bin" / "oespec")
    # An explicit incompatible list is refused, naming the other profile and the reason.
    refused = _run(root, oespec, "engine", "--port", "0", "--profiles", "speculative,tasks")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "openengine.speculative cannot be served with openengine.tasks: A pooling model" in refused.stderr
    # The workflow's `make conformance`: the engine with --profiles all, the whole suite. tasks comes
    # first in the catalogue, so the new profile is left out, and its absence case checks that honestly.
    suite = ET.parse(root / "build" / "pull-request" / "conformance.xml").getroot()
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["verdict"].startswith("CONFORMS"), properties
    advertised = properties["profiles"].split(",")
    assert "openengine.tasks" in advertised and "openengine.speculative" not in advertised
    absent = next(tc for tc in suite.iter("testcase") if tc.get("name") == "speculative.absent.unimplemented")
    assert list(absent) == [absent.find("system-out")], ET.tostring(absent, encoding="unicode")   # passed
    # Named explicitly, it is served: advertised with its capability message, its RPC answers.
    with _engine(root, tmp_path / "engine.log", "--profiles", "load,speculative") as (address, log):
        assert "openengine.speculative 1.0" in log
        caps = json.loads(_python(root, (
            "import grpc, json\n"
            "from google.protobuf.json_format import MessageToDict\n"
            "from openengine.v1 import discovery_pb2, discovery_service_pb2_grpc\n"
            f"stub = discovery_service_pb2_grpc.DiscoveryStub(grpc.insecure_channel({address!r}))\n"
            "caps = stub.GetCapabilities(discovery_pb2.GetCapabilitiesRequest(), timeout=10)\n"
            "print(json.dumps(MessageToDict(caps, always_print_fields_with_no_presence=True)))\n")))
        assert [p["name"] for p in caps["profiles"]] == ["openengine.core", "openengine.load",
                                                         "openengine.speculative"]
        assert caps["speculative"] == {"maxDraftTokens": 4, "treeDrafts": False}
        served = _run(root, oespec, "conformance", "--target", address, "--profile", "speculative",
                      "--format", "json")
        report = _json_document(served.stdout)
        assert served.returncode == 0 and report["verdict"]["conforms"], served.stdout + served.stderr
        assert {r["case"]: r["outcome"] for r in report["results"]} == {"speculative.rpcs.served": "pass"}


def test_switching_back_to_the_branch_without_the_profile_the_first_make_passes(generated: Path, workflow: Path):
    """Last in the module: the copy goes back to the committed files without the profile, as a
    switch back to `main` leaves them (ignored build outputs, the bindings among them, stay), and
    `make` (generate, check, site) passes at once."""
    root = generated
    _git(root, "checkout", "-q", "main")
    assert not (root / ENGINE_MODULE).exists() and not (root / "proto/openengine/v1/speculative.proto").exists()
    assert list((root / "openengine/v1").glob("speculative*"))       # the stale bindings are still there
    _make(root)
    generated_pages = [p.relative_to(root).as_posix() for p in (root / "site/generated").rglob("*")
                       if p.is_file() and "openengine.speculative" in p.read_text(encoding="utf-8")]
    assert generated_pages == []
    assert not list((root / "openengine/v1").glob("speculative*"))


class _engine:
    """`oespec engine` in the copy on a free port, its log in `log`; yields (address, start-up log)."""

    def __init__(self, root: Path, log: Path, *args: str):
        self.root, self.log, self.args = root, log, args

    def __enter__(self):
        self.out = self.log.open("w")
        self.proc = subprocess.Popen([str(VENV / "bin" / "oespec"), "engine", "--port", "0", *self.args],
                                     cwd=self.root, env=_env(self.root), stdout=self.out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            found = re.search(r"serving on (\S+)", self.log.read_text())
            if found:
                time.sleep(0.2)  # the rest of the start-up lines
                return found.group(1), self.log.read_text()
            time.sleep(0.1)
        self.__exit__()
        raise AssertionError(f"the engine did not start:\n{self.log.read_text()}")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.out.close()
