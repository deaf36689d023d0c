"""An engine author's mistakes are caught and explained (tests/authors/mistakes.py): each one, on
the toy engine, makes `oespec conformance` exit non-zero with a failing case whose reason names
the mistake, and the clean toy engine conforms on the same cases. And a backend that never
mentions log-probabilities does not advertise them."""

from __future__ import annotations

import json
import re
import selectors
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from openengine.serve import RunningServer, ServeConfig
from openengine.v1 import control_service_pb2_grpc, discovery_pb2, discovery_service_pb2_grpc, model_pb2
from tests.authors.toy_engine import ToyBackend

ROOT = Path(__file__).resolve().parents[2]
OESPEC = Path(sys.executable).parent / "oespec"

pytestmark = pytest.mark.waits

# Each mistake: the cases that judge it (--case globs) and what a failing case's reason must say.
MISTAKES = {
    "phantom-running": (("core.load.back-to-idle",), r"\brunning\b"),
    "logprobs-not-returned": (("core.generate.output-logprobs",), r"logprob"),
    "max-tokens-ignored": (("core.generate.stream",), r"max_tokens \d+"),
    "negative-load": (("core.getload.complete",), r"negative"),
    "exception-mid-stream": (("core.generate.stream", "load.watch.snapshots-complete"),
                             r"ERROR_CODE_INTERNAL.*RuntimeError"),
    "load-always-zero": (("core.getload.current",), r"counted 0 running"),
}


@dataclass
class Run:
    name: str
    returncode: int
    report: dict
    output: str
    engine_log: str

    def failing(self) -> dict[str, str]:
        return {r["case"]: r["reason"] for r in self.report.get("results", ()) if r["outcome"] in ("fail", "error")}


def conformance(name: str, cases: tuple[str, ...], log: Path) -> Run:
    """Start the toy engine with `name` (clean or a mistake), run the cases against it, stop it."""
    with log.open("w") as err:
        engine = subprocess.Popen([sys.executable, "-m", "tests.authors.mistakes", name, "--port", "0"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        with selectors.DefaultSelector() as ready:
            ready.register(engine.stdout, selectors.EVENT_READ)
            line = engine.stdout.readline() if ready.select(30) else ""
        found = re.search(r"listening on (\S+)", line)
        if not found:
            return Run(name, -1, {}, f"the engine did not start: {line!r}", log.read_text())
        command = [str(OESPEC), "conformance", "--target", found.group(1), "--format", "json"]
        command += [arg for case in cases for arg in ("--case", case)]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=150)
    finally:
        engine.send_signal(signal.SIGTERM)
        try:
            engine.wait(20)
        except subprocess.TimeoutExpired:
            engine.kill()
            engine.wait()
    try:
        report = json.loads(result.stdout)
    except ValueError:
        report = {}
    return Run(name, result.returncode, report, result.stdout[-3000:] + result.stderr[-3000:], log.read_text())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_each_mistake_fails_the_run_with_a_reason_that_names_it_and_the_clean_toy_conforms(tmp_path):
    every_case = tuple(sorted({case for cases, _ in MISTAKES.values() for case in cases}))
    jobs = {"clean": every_case} | {name: cases for name, (cases, _) in MISTAKES.items()}
    with ThreadPoolExecutor(len(jobs)) as pool:
        runs = dict(zip(jobs, pool.map(lambda job: conformance(job[0], job[1], tmp_path / f"{job[0]}.log"),
                                       jobs.items())))

    problems = []
    clean = runs.pop("clean")
    verdict = clean.report.get("verdict", {}).get("text", "")
    if clean.returncode != 0 or not verdict.startswith("CONFORMS"):
        problems.append(f"clean: exit {clean.returncode}, verdict {verdict!r}, "
                        f"failing {clean.failing()}\n{clean.output}")
    for name, run in runs.items():
        named = MISTAKES[name][1]
        if run.returncode == 0:
            problems.append(f"{name}: the run exited 0 ({run.report.get('verdict', {}).get('text')!r})\n{run.output}")
        elif not any(re.search(named, reason) for reason in run.failing().values()):
            problems.append(f"{name}: no failing case's reason matches {named!r}: {run.failing()}\n{run.output}")
    # A bad figure from load() is the backend's fault, logged once and plainly, not a stack per call.
    if "Traceback" in runs["negative-load"].engine_log:
        problems.append(f"negative-load: the engine logged a traceback\n{runs['negative-load'].engine_log[-3000:]}")
    # Its witness requests died of the exception: a case they leave unchecked says so, never
    # blames the model's limits or the engine's load.
    guessed = {r["case"]: r["reason"] for r in runs["exception-mid-stream"].report.get("results", ())
               if r["outcome"] == "unchecked" and not re.search(r"error|INTERNAL", r["reason"])}
    if guessed:
        problems.append(f"exception-mid-stream: unchecked for a reason that is not what happened: {guessed}")
    assert not problems, "\n\n".join(problems)


class NeverMentionsLogprobs(ToyBackend):
    """The toy with every log-probability limit left out of its description."""

    def limits(self) -> dict:
        return {"core": {"max_running_requests": self.slots, "max_queued_requests": self.queue}}


def test_a_backend_that_never_mentions_logprobs_advertises_none():
    with RunningServer(NeverMentionsLogprobs, ServeConfig(port=0)) as server:
        with grpc.insecure_channel(server.address) as channel:
            capabilities = discovery_service_pb2_grpc.DiscoveryStub(channel).GetCapabilities(
                discovery_pb2.GetCapabilitiesRequest(), timeout=5)
            model = control_service_pb2_grpc.ControlStub(channel).GetModelInfo(
                model_pb2.GetModelInfoRequest(), timeout=5)
    assert capabilities.core.HasField("max_logprobs") and capabilities.core.max_logprobs == 0
    assert not capabilities.core.output_logprobs
    assert not model.generation.output_logprobs.supported
    assert not model.generation.prompt_logprobs.supported
