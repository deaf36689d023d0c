"""A client generated from upstream's pinned protos gets correct answers from every engine the
project ships: the reference engine, the counting example and the llama backend serving its tiny
model, each started as the README starts it, with no flag beyond its port (and the llama backend's
model file).

The client (tests/interop/upstream_client.py) runs in a process whose `openengine` package is the
stubs generated from upstream/openengine-v1.binpb alone. It calls every upstream RPC and judges
each answer by upstream's docs/api.md: the answer decodes as upstream's message; Generate honours
max_tokens, stop texts and tokens, seeds, usage, finish reasons and Abort; GetServerInfo passes a
revision-1 client's compatibility rule. Its exit status is 0 only when every check passes. Then
tests/interop/upstream_unknown_fields.py, in a process of the same kind, lists what the engine's
answers carry beyond upstream's messages: only the proposal's additions, numbered from 100 up.

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

UNKNOWN_FIELDS = CLIENT.parent / "upstream_unknown_fields.py"

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
# check must pass. The reference engine advertises them all, so against it none is skipped.
OPTIONAL = {"inference.generate.num_sequences", "inference.generate.output_logprobs"}
SKIPPABLE = {"reference": set(), "counting": OPTIONAL, "llama": OPTIONAL}

# One worker takes the whole module (`--dist loadgroup`), so the engines start once; not `waits`,
# whose tests tests/conftest.py deals out over several workers.
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
    unknown_fields_returncode: int | None = None
    unknown_fields_output: str = ""
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
        status = engine.proc.poll()
        why = f"exited with status {status} before it served" if status is not None else \
            f"logged no address within {START_SECONDS} s"
        return ClientRun(engine.name, "", None, f"(no client ran: the engine {why})")
    client, probe = (subprocess.run(upstream_command(stubs, script, "--target", engine.address,
                                                     "--timeout", CLIENT_TIMEOUT),
                                    capture_output=True, text=True, timeout=180)
                     for script in (CLIENT, UNKNOWN_FIELDS))
    return ClientRun(engine.name, engine.address, client.returncode, client.stdout + client.stderr,
                     probe.returncode, probe.stdout + probe.stderr)


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
    not_passed = {name: v for name, v in verdicts.items()
                  if v != "PASS" and not (v == "SKIP" and name in SKIPPABLE[engine])}
    assert not not_passed, f"{not_passed}\n{run.explain()}"
    # An engine answers every call of a correct client without failing inside.
    assert "Traceback" not in run.engine_log, run.explain()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_what_upstream_does_not_define_is_numbered_from_100(client_runs, engine):
    run = client_runs[engine]
    assert run.unknown_fields_returncode == 0, f"{run.unknown_fields_output}\n{run.explain()}"
    # The proposal's capability_revision is in every ServerInfo: seen, so the probe reads the answers.
    assert "FIELD openengine.v1.ServerInfo 100" in run.unknown_fields_output.splitlines(), run.unknown_fields_output


def test_the_unknown_field_probe_names_a_field_below_100(upstream_stubs):
    """An engine whose GenerationFinished carries a field 50 that upstream does not define: the
    probe finds it inside the stream's message and fails."""
    import grpc

    from openengine.v1 import generation_pb2, lifecycle_pb2, model_pb2, server_pb2

    field_50 = bytes([0x90, 0x03, 0x01])     # key 50 << 3 | VARINT (400, as a varint), then value 1
    finished = generation_pb2.GenerationFinished(output_index=0, reason=generation_pb2.FINISH_REASON_LENGTH)
    finished_bytes = finished.SerializeToString() + field_50
    response = generation_pb2.GenerateResponse(request_id="r").SerializeToString()
    response += bytes([5 << 3 | 2, len(finished_bytes)]) + finished_bytes      # field 5, finished (short)
    answers = {
        "/openengine.v1.Control/GetServerInfo": server_pb2.ServerInfo(supported_models=["m"]).SerializeToString(),
        "/openengine.v1.Control/GetModelInfo": model_pb2.ModelInfo(model_id="m").SerializeToString(),
        "/openengine.v1.Control/GetLoad": server_pb2.LoadInfo().SerializeToString(),
        "/openengine.v1.Control/Health": lifecycle_pb2.HealthResponse().SerializeToString(),
    }

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):
            if details.method == "/openengine.v1.Inference/Generate":
                return grpc.unary_stream_rpc_method_handler(lambda request, context: iter([response]))
            if details.method in answers:
                return grpc.unary_unary_rpc_method_handler(lambda request, context: answers[details.method])
            return None

    server = grpc.server(ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((Handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        proc = subprocess.run(upstream_command(upstream_stubs, UNKNOWN_FIELDS, "--target", f"127.0.0.1:{port}"),
                              capture_output=True, text=True, timeout=60)
    finally:
        server.stop(0)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL fields upstream does not define, below 100: openengine.v1.GenerationFinished 50" in proc.stdout, \
        proc.stdout + proc.stderr
