"""Helpers shared by the conformance tests: an in-process reference engine and a suite run."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
from typing import TYPE_CHECKING, Callable

import pytest

if TYPE_CHECKING:
    from openengine.conformance import Options

TOKEN = "conformance-test-token"


@contextlib.contextmanager
def reference_engine(*, profiles=("all",), role="aggregated", faults=(), admin=None, **extra):
    """The reference engine on a free port, Admin behind TOKEN unless `admin` (AdminAccess) says
    otherwise, committing the faults named (tests/faults)."""
    from openengine.engine import EngineConfig, RunningEngine
    from openengine.serve import AdminAccess

    config = EngineConfig(port=0, profiles=tuple(profiles), role=role,
                          admin=admin or AdminAccess(token=TOKEN), **extra)
    if faults:
        from tests.faults import faulty_engine

        running = faulty_engine(config, faults)
    else:
        running = RunningEngine(config)
    with running as engine:
        yield engine


def run_suite(target: str, **kw):
    from openengine.conformance import Options, run_suite as run

    opts = {k: kw.pop(k) for k in list(kw) if k in (
        "rpc_timeout", "case_timeout", "admin_token", "shutdown_command", "max_message_bytes",
        "admin_target", "admin_cert", "admin_key", "admin_ca", "destructive", "tls", "ca", "cert",
        "key", "server_name")}
    opts.setdefault("admin_token", TOKEN)
    return asyncio.run(run(Options(target=target, **opts), **kw))


Start = Callable[[contextlib.ExitStack], "Options"]

# How many runs of `side_by_side` have an engine at once.
AT_ONCE = 8


def side_by_side(runs: dict[str, tuple[Start, list[str] | None]], at_once: int = AT_ONCE) -> dict[str, object]:
    """Every run at once, `at_once` at a time, each suite against an engine of its own, in one event
    loop: the runs spend their time waiting on streams and timers, so they wait together. A run's
    `start` enters its engine into the stack and returns the runner's options (it runs in a thread,
    as does the engine's stop). Returns each run's report, or the exception that ended it."""
    from openengine.conformance import run_suite as run

    async def one(start: Start, patterns, slots: asyncio.Semaphore):
        async with slots:
            with contextlib.ExitStack() as stack:
                try:
                    options = await asyncio.to_thread(start, stack)
                    return await run(options, patterns=patterns)
                finally:
                    await asyncio.to_thread(stack.pop_all().close)

    async def all_runs():
        slots = asyncio.Semaphore(at_once)
        done = await asyncio.gather(*(one(start, patterns, slots) for start, patterns in runs.values()),
                                    return_exceptions=True)
        return dict(zip(runs, done))

    return asyncio.run(all_runs())


def report_of(outcome):
    """The report of one of `side_by_side`'s runs, or the exception that ended it raised again."""
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def failed(report) -> dict[str, str]:
    return {r.id: r.reason for r in report.results if r.outcome.bad}


@pytest.fixture(scope="session", autouse=True)
def _bindings():
    pytest.importorskip("openengine.v1.capabilities_pb2", reason="run `make bindings` first")


def tracebacks(records: list[logging.LogRecord]) -> list[str]:
    """Log records that would print a Python traceback into a run's output: an exception logged
    with its stack, or asyncio's report of a task whose exception nobody retrieved."""
    return [r.getMessage() for r in records
            if r.exc_info or "never retrieved" in r.getMessage() or "Traceback" in r.getMessage()]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def pytest_configure(config):
    config.addinivalue_line("markers", "prints_traceback: the test makes a traceback on purpose")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Every conformance run of every test (each fault, each variant) is checked: its output
    never holds a traceback. Tasks are collected at the end of the test, so one left holding an
    exception reports it now rather than in another test. Only the test's own thread, where the
    runner runs, is heard: engines serving in other threads of the process keep their own logs."""
    handler, runner_thread = _Records(), threading.get_ident()
    handler.addFilter(lambda record: record.thread == runner_thread)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        result = yield
        gc.collect()
    finally:
        root.removeHandler(handler)
    found = tracebacks(handler.records)
    if found and item.get_closest_marker("prints_traceback") is None:
        raise AssertionError("a traceback reached the output: " + found[0])
    return result
