"""Start the upstream-only engine (and its test driver) as child processes, for tests and fixtures.

Both children run `python -S` with the stub directory and this interpreter's grpc/protobuf
directories given on their command line, and without PYTHONPATH, so their `openengine` package is
upstream's generated code alone, never the project's.

    stubs = generate_stubs(tmp_path / "stubs")          # from the pinned descriptor image
    address, process = start_upstream_engine(stubs, variant="no-usage", slots=2)
    ...
    stop_upstream_engine(process)
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
IMAGE = ROOT / "upstream" / "openengine-v1.binpb"
UPSTREAM_PROTOS = tuple(f"openengine/v1/{name}.proto" for name in (
    "error", "generation", "kv", "lifecycle", "lora", "model", "openengine", "server"))
START_TIMEOUT = 30.0


def generate_stubs(out_dir: Path, image: Path = IMAGE) -> Path:
    """Python message and service stubs for upstream's protos, generated from the descriptor
    image into `out_dir` (made regular packages, so no other `openengine` folder can merge in)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "grpc_tools.protoc", f"--descriptor_set_in={image}",
           f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", *UPSTREAM_PROTOS]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed on {image}: {done.stderr.strip()}")
    for package in (out_dir / "openengine", out_dir / "openengine" / "v1"):
        (package / "__init__.py").touch()
    return out_dir


def site_dirs() -> list[str]:
    """The directories this interpreter imports grpc and protobuf from."""
    grpc_dir = Path(importlib.util.find_spec("grpc").origin).parents[1]
    protobuf_dir = Path(importlib.util.find_spec("google.protobuf").origin).parents[2]
    return list(dict.fromkeys(str(d) for d in (grpc_dir, protobuf_dir)))


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONSAFEPATH"):
        env.pop(name, None)
    return env


def child_command(script: str, stubs_dir: Path | str, *args: str) -> list[str]:
    sites = [arg for d in site_dirs() for arg in ("--site", d)]
    return [sys.executable, "-S", str(HERE / script), "--stubs", str(stubs_dir), *sites, *args]


def option_flags(options: dict) -> list[str]:
    """`slots=2, token_ms=1` -> `--slots 2 --token-ms 1`; True adds the bare flag."""
    flags: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flags.append("--" + key.replace("_", "-"))
        if value is not True:
            flags.append(str(value))
    return flags


def start_upstream_engine(stubs_dir: Path | str, variant: str | None = None,
                          **options) -> tuple[str, subprocess.Popen]:
    """Start the engine on 127.0.0.1, port 0 unless `port` is given; (bound address, process).
    Options are engine.py's flags (`slots`, `token_ms`, `max_output_tokens`, ...)."""
    options.setdefault("port", 0)
    if variant is not None:
        options["variant"] = variant
    stderr = tempfile.TemporaryFile()
    process = subprocess.Popen(child_command("engine.py", stubs_dir, *option_flags(options)),
                               stdout=subprocess.PIPE, stderr=stderr, env=child_env())
    process.stderr_file = stderr     # read back when start-up fails
    line = _first_line(process, START_TIMEOUT)
    if not line:
        stop_upstream_engine(process)
        stderr.seek(0)
        raise RuntimeError("the upstream engine did not start: "
                           + stderr.read().decode(errors="replace").strip()[-2000:])
    return line, process


def _first_line(process: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return ""
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                return ""
            buffer += chunk
    return buffer.split(b"\n", 1)[0].decode().strip()


def stop_upstream_engine(process: subprocess.Popen, timeout: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdout, getattr(process, "stderr_file", None)):
        if stream is not None:
            stream.close()


@contextlib.contextmanager
def upstream_engine(stubs_dir: Path | str, variant: str | None = None, **options):
    """The engine for the length of a `with` block: yields its address."""
    address, process = start_upstream_engine(stubs_dir, variant, **options)
    try:
        yield address
    finally:
        stop_upstream_engine(process)


def run_driver(stubs_dir: Path | str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """driver.py in its own `python -S` child with the stubs: its stdout is JSON."""
    return subprocess.run(child_command("driver.py", stubs_dir, *args), capture_output=True,
                          text=True, timeout=timeout, check=False, env=child_env())


def main(argv: list[str] | None = None) -> int:
    """Serve the engine by hand until interrupted: stubs from the pinned image in a temporary
    folder, the address on stdout, every other argument passed on to engine.py."""
    import signal

    args = list(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="upstream-stubs-") as tmp:
        stubs = generate_stubs(Path(tmp))
        process = subprocess.Popen(child_command("engine.py", stubs, *args), env=child_env())
        try:
            return process.wait()
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            return process.wait()


if __name__ == "__main__":
    sys.exit(main())
