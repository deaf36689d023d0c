"""An engine's shutdown is its own: whatever still runs on its loop when the server stops (a
stream whose cancellation was in flight, a task a hook started) is finished before the loop
closes. A task left pending on a closed loop is destroyed later by the garbage collector, at a
random moment in unrelated code, and gRPC logs each such call as an unhandled exception."""

from __future__ import annotations

import asyncio
import gc
import logging

from openengine.serve.server import settle
from openengine.v1 import load_pb2

from tests.engine.conftest import Records, running

WATCH = "/openengine.v1.Observability/WatchLoad"


def test_stopping_finishes_what_still_runs_on_the_loop():
    records = Records()
    root = logging.getLogger()
    root.addHandler(records)
    try:
        finished: list[str] = []
        with running(profiles=("load",)) as (engine, stubs):
            async def lingering(name: str):
                try:
                    await asyncio.Event().wait()     # nothing ever sets it
                finally:
                    finished.append(name)

            tasks = [engine.call(lambda n=n: asyncio.get_running_loop().create_task(lingering(n)))
                     for n in ("a", "b")]
            watch = stubs.channel.unary_stream(WATCH, request_serializer=None, response_deserializer=None)(
                load_pb2.WatchLoadRequest(interval_ms=50).SerializeToString(), timeout=30)
            next(watch)
        watch.cancel()
        assert sorted(finished) == ["a", "b"]
        assert all(task.done() for task in tasks)
        assert engine.loop.is_closed()
        gc.collect()
        destroyed = [r.getMessage() for r in records.records
                     if "destroyed but it is pending" in r.getMessage() or "not handled" in r.getMessage()]
        assert destroyed == []
    finally:
        root.removeHandler(records)


def test_settle_reports_a_task_that_ignores_cancellation():
    loop = asyncio.new_event_loop()
    released = asyncio.Event()
    try:
        async def stubborn():
            while not released.is_set():
                try:
                    await released.wait()
                except asyncio.CancelledError:
                    continue

        task = loop.create_task(stubborn())
        loop.run_until_complete(asyncio.sleep(0))
        assert settle(loop, timeout=0.2) == [task]
    finally:
        # Let it end, so this test leaves nothing pending on a closed loop either.
        released.set()
        loop.run_until_complete(asyncio.wait([task], timeout=5))
        loop.close()
