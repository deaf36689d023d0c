"""Streams to vanished clients end quietly: 1,000 WatchLoad watchers in client processes leave
abruptly (stream cancels, processes that exit without closing their sockets, SIGKILL) while the
engine writes snapshots to them; most of them do not read, so writes are pending when they go. The
engine's log holds no traceback, and its tasks, file descriptors and memory return to where they
were."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from openengine.v1 import generation_pb2, inference_service_pb2_grpc, load_pb2, observability_service_pb2_grpc

from tests.engine.conftest import Records, running

ROOT = Path(__file__).resolve().parents[2]
WAVES = (("cancel", 2, 125), ("exit", 2, 125), ("kill", 2, 125), ("kill", 1, 250))   # 1,000 watchers
LIMITS = {"load": {"min_watch_interval_ms": 1, "max_watchers": 4096, "per_rank": True, "change_driven": True}}
TRACEBACK_WORDS = ("Traceback", "ExecuteBatchError", "Unexpected", "raised by servicer")


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def measure(engine) -> dict[str, int]:
    gc.collect()
    async def tasks() -> int:
        return len(asyncio.all_tasks())
    return {"tasks": asyncio.run_coroutine_threadsafe(tasks(), engine.loop).result(10),
            "fds": len(os.listdir("/proc/self/fd")), "rss_kib": rss_kib(), "watchers": watchers(engine)}


def watchers(engine) -> int:
    """The WatchLoad streams the SDK still holds."""
    return len(engine.server.state.load)


def wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def start_client(address: str, mode: str, count: int) -> subprocess.Popen:
    client_mode = "hang" if mode == "kill" else mode
    proc = subprocess.Popen([sys.executable, "-m", "tests.engine.watch_client", address, str(count), client_mode],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc


def run_clients(address: str, waves) -> None:
    """Start every client process at once; once all streams are open, each leaves as its mode says."""
    procs = [(mode, start_client(address, mode, per_process))
             for mode, processes, per_process in waves for _ in range(processes)]
    try:
        for mode, proc in procs:
            line = proc.stdout.readline().strip()
            if line != "ready":
                proc.kill()
                raise AssertionError(f"a {mode} client did not open its streams: {proc.stderr.read()[-1500:]}")
        time.sleep(0.3)   # snapshots are being written to every stream
        for mode, proc in procs:
            if mode == "kill":
                os.kill(proc.pid, signal.SIGKILL)
        for _, proc in procs:
            proc.wait(timeout=30)
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_thousand_watchers_vanish_quietly(capfd):
    records = Records()
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(records)
    root.setLevel(logging.DEBUG)
    busy = threading.Event()
    try:
        with running(profiles=("load",), data_parallel_size=2, limits=LIMITS, token_delay_ms=2.0) as (engine, stubs):
            # Load that keeps changing, so change-driven snapshots are written too.
            def generate_forever():
                inference = inference_service_pb2_grpc.InferenceStub(stubs.channel)
                while not busy.is_set():
                    try:
                        list(inference.Generate(generation_pb2.GenerateRequest(
                            prompt="soak", stopping=generation_pb2.StoppingOptions(max_tokens=20)), timeout=20))
                    except grpc.RpcError:
                        pass   # a slow machine; the load it makes is what matters

            worker = threading.Thread(target=generate_forever, daemon=True)
            worker.start()
            run_clients(engine.address, [("cancel", 1, 50)])   # warm-up: gRPC's own lazily made state
            assert wait_for(lambda: watchers(engine) == 0, 20)
            baseline = measure(engine)
            run_clients(engine.address, WAVES)
            assert wait_for(lambda: watchers(engine) == 0, 30), f"{watchers(engine)} watchers still registered"
            # Every stream's task ends: none waits forever for a client that is gone.
            assert wait_for(lambda: measure(engine)["tasks"] <= baseline["tasks"] + 2, 30), \
                (baseline, measure(engine))
            busy.set()
            worker.join(15)
            after = measure(engine)
            # The engine still serves a new watcher.
            call = observability_service_pb2_grpc.ObservabilityStub(stubs.channel).WatchLoad(
                load_pb2.WatchLoadRequest(interval_ms=5))
            assert next(call).HasField("settings") and next(call).HasField("snapshot")
            call.cancel()
    finally:
        busy.set()
        root.removeHandler(records)
        root.setLevel(previous_level)
    assert after["fds"] <= baseline["fds"] + 4, (baseline, after)
    assert after["rss_kib"] <= baseline["rss_kib"] + max(64 * 1024, baseline["rss_kib"] // 4), (baseline, after)
    noisy = [r for r in records.records if r.exc_info or any(w in r.getMessage() for w in TRACEBACK_WORDS)]
    assert not noisy, [(r.name, r.getMessage()[:200]) for r in noisy[:5]]
    err = capfd.readouterr().err
    assert not any(w in err for w in TRACEBACK_WORDS), err[-2000:]
    print(f"baseline {baseline}, after {after}")
