"""The runner drives each benchmark process over its stdin/stdout: one JSON object a line each
way. Every wait has a deadline, and a child that outlives its benchmark is killed, so a stuck run
ends by itself."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parents[1]
IDLE_TIMEOUT_S = 600.0   # a child that hears nothing for this long takes its runner for dead


def counting_backend():
    """The example engine's backend class (examples/counting_engine.py), loaded from its file: an
    engine written only from the SDK's documentation, outside the package and the tests."""
    import importlib.util

    path = ROOT / "examples" / "counting_engine.py"
    spec = importlib.util.spec_from_file_location("counting_engine", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("counting_engine", module)
    spec.loader.exec_module(module)
    return module.CountingBackend


class Child:
    """A benchmark process started with `python -m <module> <args>`."""

    def __init__(self, module: str, *args: str, name: str | None = None):
        self.name = name or module
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        # stderr goes to a file, not a pipe: a child that logs a lot must never block on it.
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix="oe-bench-stderr-")
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, bufsize=1)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    def read(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sel.select(left):
                raise RuntimeError(f"{self.name}: no answer within {timeout:g} s{self._stderr_tail()}")
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(5)
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}{self._stderr_tail()}")
            line = line.strip()
            if line.startswith("{"):
                msg = json.loads(line)
                if "error" in msg:
                    raise RuntimeError(f"{self.name}: {msg['error']}")
                return msg

    def send(self, command: str, **kw) -> None:
        self.proc.stdin.write(json.dumps({"command": command, **kw}) + "\n")
        self.proc.stdin.flush()

    def ask(self, command: str, timeout: float = 30.0, **kw) -> dict[str, Any]:
        self.send(command, **kw)
        return self.read(timeout)

    def stderr_text(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()

    def _stderr_tail(self) -> str:
        if self.proc.poll() is None:
            return ""
        err = self.stderr_text().strip().splitlines()
        return (":\n  " + "\n  ".join(err[-15:])) if err else ""

    def close(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            try:
                self.send("exit")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(5)
        self._sel.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def idle_cpu_per_s(host: Child, seconds: float) -> float:
    """CPU seconds per second a bench/hosts.py process spends over `seconds` with nothing asked of it."""
    before, _, _, after = measured_window(host, None, seconds)
    return (after["cpu_s"] - before["cpu_s"]) / ((after["mono_ns"] - before["mono_ns"]) / 1e9)


def measured_window(server: Child, client: Child | None, seconds: float) -> tuple[dict, dict, dict, dict]:
    """A measured window of `seconds`: the server's usage at its start and end (bench/hosts.py's
    `mark`) around the client's readings (its `go` and `stop`), each side marked just inside the other."""
    s0 = server.ask("mark")["usage"]
    c0 = client.ask("go") if client else {}
    time.sleep(seconds)
    c1 = client.ask("stop") if client else {}
    return s0, c0, c1, server.ask("mark")["usage"]


# -- the child's side -------------------------------------------------------------------------

def reply(**kw) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


async def serve_commands(handlers: dict[str, Callable[..., Awaitable[dict] | dict]]) -> None:
    """Answer commands from stdin until `exit`, end of input, or IDLE_TIMEOUT_S seconds without one
    (the runner died). Each handler gets the command's fields and returns the reply's fields."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        try:
            line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT_S)
        except asyncio.TimeoutError:
            return
        if not line:
            return
        msg = json.loads(line)
        command = msg.pop("command")
        if command == "exit":
            return
        handler = handlers.get(command)
        if handler is None:
            reply(error=f"unknown command {command!r}")
            continue
        try:
            result = handler(**msg)
            if asyncio.iscoroutine(result):
                result = await result
        except Exception as err:  # reported to the runner, which stops the benchmark
            reply(error=f"{command}: {type(err).__name__}: {err}")
            continue
        reply(**(result or {}))
