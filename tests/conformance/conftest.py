"""Helpers shared by the conformance tests: an in-process reference engine and a suite run."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

TOKEN = "conformance-test-token"


@contextlib.contextmanager
def reference_engine(*, profiles=("all",), role="aggregated", faults=(), admin=None, **extra):
    from openengine.engine import AdminConfig, EngineConfig, RunningEngine

    config = EngineConfig(port=0, profiles=tuple(profiles), role=role, faults=tuple(faults),
                          admin=admin or AdminConfig(token=TOKEN), **extra)
    with RunningEngine(config) as engine:
        yield engine


def run_suite(target: str, **kw):
    from openengine.conformance import Options, run_suite as run

    opts = {k: kw.pop(k) for k in list(kw) if k in (
        "rpc_timeout", "case_timeout", "admin_token", "shutdown_command", "max_message_bytes",
        "admin_target", "admin_cert", "admin_key", "admin_ca", "destructive")}
    opts.setdefault("admin_token", TOKEN)
    return asyncio.run(run(Options(target=target, **opts), **kw))


def failed(report) -> dict[str, str]:
    return {r.id: r.reason for r in report.results if r.outcome.bad}


@pytest.fixture(scope="session", autouse=True)
def _bindings():
    pytest.importorskip("openengine.v1.capabilities_pb2", reason="run `make bindings` first")
