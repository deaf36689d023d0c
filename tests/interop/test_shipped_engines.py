"""A client generated from upstream's pinned protos gets correct answers from every engine the
project ships: the reference engine, the counting example and the llama backend serving its tiny
model, each started as the README starts it, with no flag beyond its port (and the llama backend's
model file).

The client (tests/interop/upstream_client.py) runs in a process whose `openengine` package is the
stubs generated from upstream/openengine-v1.binpb alone. It calls every upstream RPC and judges
each answer by upstream's docs/api.md: the answer decodes as upstream's message; Generate honours
max_tokens, stop texts and tokens, seeds, usage, finish reasons and Abort; GetServerInfo passes a
revision-1 client's compatibility rule. Its exit status is 0 only when every check passes.

The three engines start together and the three clients run together, once for the module, so its
wall time is one engine's start plus one client's run; the tests then read the recorded runs."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.interop.stubs import CLIENT, ROOT, upstream_command

OESPEC = str(Path(sys.executable).parent / "oespec")
EXAMPLE = ROOT / "examples" / "counting_engine.py"
MODEL_FILE = "{tiny-model}"     # replaced by the tiny model's path when the engines start

# Each engine's command line, as the README gives it, on a free port.
ENGINES = {
    "reference": [OESPEC, "engine", "--port", "0"],
    "counting": [sys.executable, str(EXAMPLE), "--port", "0"],
    "llama": [OESPEC, "engine", "--backend", "llama", "--model", MODEL_FILE, "--port", "0"],
}
# The line each engine logs once it serves: the reference engine and the llama backend log the
# SDK's "serving NAME on HOST:PORT (instance ...)", the example prints "listening on HOST:PORT".
SERVING = re.compile(r"\b(?:serving|listening)\b.*? on (\S+:\d+)")
START_SECONDS = 60
CLIENT_TIMEOUT = "20"     # seconds the client allows each call

# Every check the client makes; `model_info` stands for its per-model check, named after the model.
CHECKS = {
    "control.get_server_info", "model_info", "control.get_model_info[unknown]", "control.get_load",
    "control.health", "inference.generate.max_tokens", "inference.generate.stop_text",
    "inference.generate.stop_token", "inference.generate.seed", "inference.generate.num_sequences",
    "inference.generate.output_logprobs", "control.abort.running", "control.abort.unknown",
    "control.abort.no_target", "control.load_lora", "control.unload_lora", "control.list_loras",
    "control.get_kv_event_sources", "control.subscribe_kv_events",
}
# Checks of features a model may leave unadvertised; the client skips them then. Every other
# check must pass.
OPTIONAL = {"inference.generate.num_sequences", "inference.generate.output_logprobs"}

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("upstream-interop")]


@dataclass
class Engine:
    """One engine process and what it has logged so far (read by a thread, so a full pipe never
    stalls it)."""

    name: str
    proc: subprocess.Popen
    address: str = ""
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

    def read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            found = SERVING.search(line)
            if found and not self.address:
                self.address = found.group(1)
                self.ready.set()
        self.ready.set()     # the engine ended (without an address if it never served)

    def log(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.reader is not None:
            self.reader.join(10)


@dataclass
class ClientRun:
    engine: str
    address: str
    returncode: int | None      # None: the engine never served, so no client ran
    output: str
    engine_log: str = ""        # the engine's whole log, start to stop

    @property
    def verdicts(self) -> dict[str, str]:
        """Check name -> PASS, FAIL or SKIP; the per-model check is named `model_info`."""
        found = {}
        for line in self.output.splitlines():
            verdict, _, rest = line.partition(" ")
            if verdict in ("PASS", "FAIL", "SKIP"):
                name = rest.split(":", 1)[0]
                if name.startswith("control.get_model_info[") and name != "control.get_model_info[unknown]":
                    name = "model_info"
                found[name] = verdict
        return found

    def explain(self) -> str:
        return (f"the upstream client against the {self.engine} engine at {self.address or '(not serving)'} "
                f"exited {self.returncode}:\n{self.output}\n--- the engine's log (last lines) ---\n"
                + "".join(self.engine_log.splitlines(keepends=True)[-60:]))


def start_engines(model_file: Path) -> dict[str, Engine]:
    engines = {}
    for name, command in ENGINES.items():
        command = [str(model_file) if part == MODEL_FILE else part for part in command]
        proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        engines[name] = engine = Engine(name, proc)
        engine.reader = threading.Thread(target=engine.read, daemon=True)
        engine.reader.start()
    return engines


def run_client(stubs: Path, engine: Engine) -> ClientRun:
    if not engine.address:
        return ClientRun(engine.name, "", None, "(no client ran: the engine did not serve)")
    proc = subprocess.run(upstream_command(stubs, CLIENT, "--target", engine.address, "--timeout", CLIENT_TIMEOUT),
                          capture_output=True, text=True, timeout=180)
    return ClientRun(engine.name, engine.address, proc.returncode, proc.stdout + proc.stderr)


@pytest.fixture(scope="module")
def client_runs(upstream_stubs, tmp_path_factory) -> dict[str, ClientRun]:
    """Each engine started, checked by its own upstream client, and stopped; all three at once."""
    from openengine.llama.tinymodel import write_tiny_model

    model_file = write_tiny_model(tmp_path_factory.mktemp("interop-llama") / "tiny.gguf")
    engines = start_engines(model_file)
    try:
        for engine in engines.values():
            engine.ready.wait(START_SECONDS)
        with ThreadPoolExecutor(len(engines)) as pool:
            runs = list(pool.map(lambda e: run_client(upstream_stubs, e), engines.values()))
    finally:
        for engine in engines.values():
            engine.stop()
    for run in runs:
        run.engine_log = engines[run.engine].log()
    return {run.engine: run for run in runs}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_an_upstream_client_gets_correct_answers(client_runs, engine):
    run = client_runs[engine]
    assert run.returncode == 0, run.explain()
    verdicts = run.verdicts
    assert set(verdicts) == CHECKS, f"checks missing: {sorted(CHECKS - set(verdicts))}\n{run.explain()}"
    not_passed = {name: v for name, v in verdicts.items() if v != "PASS" and not (v == "SKIP" and name in OPTIONAL)}
    assert not not_passed, f"{not_passed}\n{run.explain()}"
    # An engine answers every call of a correct client without failing inside.
    assert "Traceback" not in run.engine_log, run.explain()
