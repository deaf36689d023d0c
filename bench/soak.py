"""Soak the conformance suite: run it N times against correct engines while processes burn CPU
beside it, and count what a correct engine must never get (a failed or errored case, a
traceback in the runner's output).

    python -m bench.soak                          # 50 runs per engine, two burners; records bench/soak.json
    python -m bench.soak --runs 5 --burners 2     # a shorter soak
    python -m bench.soak --runs 1 --case 'load.watch.*' --no-record   # a smoke run

The engines are the reference engine (every profile) and the example counting engine
(examples/counting_engine.py, on the SDK alone), each started afresh for every run. It prints a
table and records it, with the load it ran under, in bench/soak.json. It is not part of
`make bench`: it judges the conformance runner under load, not a ratio of two figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gc
import json
import logging
import multiprocessing
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORD = Path(__file__).resolve().parent / "soak.json"
TOKEN = "soak-admin-token"


def _burn() -> None:
    while True:
        pass


@contextlib.contextmanager
def burners(count: int):
    """`count` processes that each keep a core busy, for as long as the block runs."""
    procs = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(count)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(5)


class _Tracebacks(logging.Handler):
    """Log records of the runner's own thread that would print a traceback."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.thread == self.thread and (record.exc_info or "never retrieved" in text
                                             or "Traceback" in text):
            self.found.append(text.splitlines()[0])


@dataclass
class EngineSoak:
    engine: str
    runs: int = 0
    cases: int = 0
    failures: dict[str, int] = field(default_factory=dict)   # case id -> runs it failed or errored in
    reasons: dict[str, str] = field(default_factory=dict)    # case id -> its first reason
    bad_runs: int = 0                                         # runs with a failed or errored case
    tracebacks: int = 0
    seconds: float = 0.0

    def add(self, report, tracebacks: list[str]) -> None:
        self.runs += 1
        self.cases += len(report.results)
        self.tracebacks += len(tracebacks)
        self.bad_runs += any(r.outcome.bad for r in report.results)
        for r in report.results:
            if r.outcome.bad:
                self.failures[r.id] = self.failures.get(r.id, 0) + 1
                self.reasons.setdefault(r.id, r.reason)


def reference_engine():
    from openengine.engine import EngineConfig, RunningEngine
    from openengine.serve import AdminAccess

    return RunningEngine(EngineConfig(port=0, admin=AdminAccess(token=TOKEN))), TOKEN


def counting_engine():
    from bench.control import counting_backend
    from openengine.serve import RunningServer, ServeConfig

    return RunningServer(counting_backend(), ServeConfig(port=0)), None


ENGINES = {"reference": reference_engine, "counting-example": counting_engine}


def soak_once(out: EngineSoak, patterns: list[str] | None) -> tuple[list[str], list[str]]:
    """One run of the suite against a fresh engine, added to `out`: the cases that failed and
    the tracebacks heard."""
    from openengine.conformance import Options, run_suite

    started = time.monotonic()
    root = logging.getLogger()
    handler = _Tracebacks()
    root.addHandler(handler)
    try:
        running, token = ENGINES[out.engine]()
        with running as engine:
            options = Options(target=engine.address, admin_token=token)
            report = asyncio.run(run_suite(options, patterns=patterns))
        gc.collect()
    finally:
        root.removeHandler(handler)
    out.add(report, handler.found)
    out.seconds += time.monotonic() - started
    return [r.id for r in report.results if r.outcome.bad], handler.found


def soak(engines: list[str], runs: int, patterns: list[str] | None) -> tuple[list[EngineSoak], list[float]]:
    """`runs` runs per engine, the engines taking turns, so that both meet the same load over time;
    and the machine's one-minute load average after each run (the burners and any other work)."""
    out, loads = [EngineSoak(e) for e in engines], []
    for k in range(runs):
        for each in out:
            bad, tracebacks = soak_once(each, patterns)
            loads.append(os.getloadavg()[0])
            failed = ": " + ", ".join(bad) if bad else ""
            print(f"{each.engine} run {k + 1}/{runs}: {len(bad)} failed{failed}, "
                  f"{len(tracebacks)} tracebacks", flush=True)
    return out, loads


def table(record: dict) -> str:
    """The record as Markdown: the conditions it ran under, then a line per engine."""
    lines = [f"Conformance soak, {record['date']}: {record['cpus']} cores, {record['burners']} burners, "
             f"cases {record['patterns'] or 'all'}; one-minute load average {record['load_during']} (the "
             "burners count; anything above their number is other work on the machine).", "",
             "| engine | runs | cases run | false failures | runs with one | tracebacks | minutes |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for e in record["engines"]:
        lines.append(f"| {e['engine']} | {e['runs']} | {e['cases']} | {sum(e['failures'].values())} | "
                     f"{e['bad_runs']} | {e['tracebacks']} | {e['seconds'] / 60:.1f} |")
    noted = [(e["engine"], case, reason) for e in record["engines"] for case, reason in e["reasons"].items()]
    if noted:
        lines += ["", "False failures (first reason of each case):", ""]
        lines += [f"- {engine} `{case}`: {reason}" for engine, case, reason in noted]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="runs per engine (default: 50)")
    parser.add_argument("--burners", type=int, default=2, help="CPU-burning processes (default: 2)")
    parser.add_argument("--engine", action="append", choices=list(ENGINES),
                        help="soak only this engine (repeatable; default: both)")
    parser.add_argument("--case", action="append", metavar="PATTERN", help="only cases matching")
    parser.add_argument("--no-record", action="store_true", help="print only, record nothing")
    args = parser.parse_args(argv)
    engines = args.engine or list(ENGINES)
    with burners(args.burners):
        results, loads = soak(engines, args.runs, args.case)
    record = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "cpus": os.cpu_count(), "burners": args.burners, "patterns": args.case,
              "load_during": f"min {min(loads):.1f}, median {statistics.median(loads):.1f}, "
                             f"max {max(loads):.1f} (after each of {len(loads)} runs)",
              "engines": [asdict(r) for r in results]}
    print(table(record))
    if not args.no_record:
        RECORD.write_text(json.dumps(record, indent=2) + "\n")
    clean = all(not r.failures and not r.tracebacks for r in results)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
