"""How long the test suite takes: `make test-fast` and `make test`, timed on this machine.

    python -m bench.testsuite                   # time both and record them in bench/testsuite.json
    python -m bench.testsuite --only test-fast  # one of them

Not part of `make bench` (which the full suite would nearly double, and whose harness the suite
tests): the figures are recorded in bench/testsuite.json, and the next whole `make bench` shows the
record as the "Test suite" section of bench/results.md (see `section` and bench/run.py). Each figure carries
the conditions it was taken under: the load average before and after, and the CPU time the run
used, since on a shared machine the wall time says as much about the neighbours as about the tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.figures import MISSED, Section, at_most, figure_table, info, machine, read_record, with_block
from bench.measure import loadavg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECORD = HERE / "testsuite.json"
LOGS = ROOT / "build" / "bench-testsuite"
# Wall-time goals on 2 cores, in seconds.
GOALS = {"test-fast": 60.0, "test": 150.0}
BEGIN, END = "<!-- testsuite:begin -->", "<!-- testsuite:end -->"


def time_target(target: str) -> dict:
    """Run `make TARGET` once; wall and CPU time (this process's children), outcome, load."""
    load_before = loadavg()
    before = os.times()
    start = time.monotonic()
    proc = subprocess.run(["make", "--no-print-directory", target], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = os.times()
    # The whole output, for the reasons behind a failure the record names only by test id.
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / f"{target}.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    summary = re.findall(r"^=+ (.*(?:passed|failed|error).*) =+$", proc.stdout, re.M)
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    return {"target": target, "wall_s": round(wall, 1), "failures": failures,
            "cpu_s": round((after.children_user - before.children_user)
                           + (after.children_system - before.children_system), 1),
            "exit_status": proc.returncode, "pytest": summary[-1] if summary else "",
            "loadavg_before": load_before, "loadavg_after": loadavg()}


def section(record: dict | None) -> Section | None:
    """The recorded timings as a results.md section (None when nothing is recorded)."""
    if not record or not record.get("runs"):
        return None
    s = Section("Test suite")
    for run in record["runs"]:
        name, goal = run["target"], GOALS.get(run["target"])
        failures = run.get("failures") or []
        shown = ", ".join(sorted({f.split("[")[0] for f in failures})[:5])   # parametrized: once
        failed = f" (in {shown})" if failures else ""
        note = (f"{run['pytest']}{failed}; exit {run['exit_status']}; CPU {run['cpu_s']} s; "
                f"load {run['loadavg_before']} before, {run['loadavg_after']} after")
        key = f"tests.{name.replace('-', '_')}.wall"
        figure = at_most(key, run["wall_s"], goal, "s", note=note) if goal else info(key, run["wall_s"], "s", note=note)
        if goal and (run["exit_status"] != 0 or failures):
            figure.verdict = MISSED   # a run that failed proves nothing about how long a passing one takes
        s.figures.append(figure)
        s.figures.append(info(f"tests.{name.replace('-', '_')}.cpu", run["cpu_s"], "s",
                              note="user + system time of every process of the run"))
    m = record["machine"]
    s.discussion = (
        f"Recorded by `python -m bench.testsuite` on {record['date']} at commit {m.get('commit') or 'n/a'} "
        f"({m['cpu']}, {m['cores']} cores). `make test` is the full run, `make test-fast` leaves out the "
        "tests marked `slow` or `browser`; both spread the tests over three pytest-xdist workers per "
        "core, the waiting slow tests dealt into groups of their own (tests/conftest.py). "
        "Goals are wall times on 2 cores: `make test` under 150 s, `make test-fast` under 60 s. "
        + record.get("conditions", ""))
    return s


def markdown(s: Section) -> str:
    return "\n".join([BEGIN, f"## {s.title}", "", *figure_table(s.figures), "", s.discussion, END]) + "\n"


def with_section(text: str, s: Section | None) -> str:
    """results.md with the test-suite section replaced, or appended when it is not there yet."""
    return with_block(text, BEGIN, END, markdown(s) if s else "")


def load_record(path: Path = RECORD) -> dict | None:
    return read_record(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.testsuite")
    parser.add_argument("--only", choices=sorted(GOALS), action="append")
    parser.add_argument("--conditions", default="", help="what else ran on the machine meanwhile")
    args = parser.parse_args(argv)
    targets = args.only or ["test-fast", "test"]
    record = load_record() or {"runs": []}
    runs = {r["target"]: r for r in record.get("runs", [])}
    for target in targets:
        print(f"bench.testsuite: make {target} ...", file=sys.stderr, flush=True)
        runs[target] = time_target(target)
        print(f"bench.testsuite: make {target}: {runs[target]['wall_s']} s wall, "
              f"{runs[target]['cpu_s']} s CPU, {runs[target]['pytest']}", file=sys.stderr, flush=True)
    record = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
              "conditions": args.conditions or record.get("conditions", ""),
              "runs": [runs[t] for t in GOALS if t in runs]}
    RECORD.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print("\n".join(figure_table(section(record).figures)))
    return 0 if all(r["exit_status"] == 0 for r in record["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
