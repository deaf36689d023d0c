"""Regenerate the published conformance reports (conformance/reports/*.json) by starting each
engine the site's Conformance page shows and judging it with `oespec conformance --report`.

    python -m tests.conformance.run_reports [--only NAME ...] [--out DIR]

Test machinery of the checkout, not of the toolkit: the upstream-only engine lives under tests/, and the
llama engine serves a tiny model this script writes to a temporary folder. Each engine is started
on a free port and shut down by the suite's last case, so a run takes minutes, not `make test`'s
time. A report is written whatever the verdict; the script fails only when an engine cannot be
started or judged.
"""

from __future__ import annotations

import argparse
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OESPEC = Path(sys.executable).parent / "oespec"
REPORTS = ROOT / "conformance" / "reports"
ADMIN_TOKEN = "conformance-report"
START_TIMEOUT = 60.0
RUN_TIMEOUT = 1200.0


def _serve(command: list[str], pattern: str, timeout: float = START_TIMEOUT) -> tuple[subprocess.Popen, str]:
    """Start an engine and read the address it says it serves on from its log; the engine is
    killed when it exits or says nothing of the kind within `timeout`."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=ROOT)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:   # for the engine's whole life, so a full pipe never stalls it
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return process, found.group(1).rstrip(",")
    process.kill()
    process.wait()
    raise RuntimeError("the engine did not start:\n" + "".join(seen)[-3000:])


def _judge(process: subprocess.Popen, address: str, out: Path, *runner_args: str) -> int:
    """Run the whole suite against `address`, its last case stopping the engine with SIGTERM."""
    command = [str(OESPEC), "conformance", "--target", address, "--report", str(out),
               "--format", "json", "--shutdown-command", f"kill -TERM {process.pid}", *runner_args]
    try:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=RUN_TIMEOUT, cwd=ROOT)
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if not out.is_file():
        raise RuntimeError(f"oespec conformance wrote no report (exit {done.returncode}): "
                           + done.stderr.strip()[-3000:])
    return done.returncode


def reference(out: Path, tmp: Path) -> int:
    process, address = _serve([str(OESPEC), "engine", "--port", "0", "--profiles", "all",
                               "--admin-token", ADMIN_TOKEN], r"serving on (\S+)")
    return _judge(process, address, out, "--admin-token", ADMIN_TOKEN)


def counting(out: Path, tmp: Path) -> int:
    process, address = _serve([sys.executable, str(ROOT / "examples" / "counting_engine.py"),
                               "--port", "0"], r"listening on (\S+)")
    return _judge(process, address, out)


def llama(out: Path, tmp: Path) -> int:
    from openengine.llama.tinymodel import write_tiny_model

    model = write_tiny_model(tmp / "tiny.gguf")
    process, address = _serve([str(OESPEC), "engine", "--backend", "llama", "--port", "0",
                               "--model", str(model), "--limit", "core.max_running_requests=4",
                               "--admin-token", ADMIN_TOKEN], r"serving .* on (\S+) \(instance")
    return _judge(process, address, out, "--admin-token", ADMIN_TOKEN)


def upstream_only(out: Path, tmp: Path) -> int:
    from tests.conformance.upstream_engine.launch import (generate_stubs, start_upstream_engine,
                                                          stop_upstream_engine)

    stubs = generate_stubs(tmp / "stubs")
    address, process = start_upstream_engine(stubs, slots=2, token_ms=1, max_output_tokens=400)
    try:
        return _judge(process, address, out)
    finally:
        stop_upstream_engine(process)


# Report file name -> how its engine is started and judged, in the page's order.
ENGINES = {"reference": reference, "counting-example": counting, "llama-tiny": llama,
           "upstream-only": upstream_only}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(ENGINES), default=[],
                        help="regenerate only this engine's report (repeatable)")
    parser.add_argument("--out", type=Path, default=REPORTS, help="folder of the reports")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.only or ENGINES:
        out = args.out / f"{name}.json"
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"report-{name}-") as tmp:
            try:
                status = ENGINES[name](out, Path(tmp))
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
                print(f"{name}: {err}", file=sys.stderr)
                failed.append(name)
                continue
        print(f"{name}: wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} "
              f"(exit {status}) in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
