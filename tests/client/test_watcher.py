"""LoadWatcher and AsyncLoadWatcher against in-process servers: snapshots, validation,
reconnection with backoff, silence, revision changes and the GetLoad fallback."""

from __future__ import annotations

import asyncio
import random
import sys
import threading
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import Engine, Server, capabilities, good_stream, now_ts  # noqa: E402

from openengine.client import POLL, UNAVAILABLE, WATCH, AsyncLoadWatcher, Backoff, CapabilityView, LoadWatcher  # noqa: E402
from openengine.v1 import load_pb2  # noqa: E402

FAST_STREAM = load_pb2.WatchLoadRequest(interval_ms=20)
FAST = Backoff(initial=0.01, maximum=0.05, jitter=0.1, rng=random.Random(1))


def wait_until(predicate, timeout=10.0):
    event = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return True
        event.wait(0.01)
    return predicate()


def errors(watcher):
    return [v.rule_id for v in watcher.violations if str(v.severity) == "error"]


def test_backoff_is_bounded_jittered_and_finite():
    delays = list(Backoff(initial=0.1, maximum=1.0, multiplier=2, jitter=0.5, attempts=8,
                          rng=random.Random(7)).delays())
    assert len(delays) == 8
    assert all(0.05 <= d <= 1.0 for d in delays)
    assert len(set(delays[:4])) == 4                   # jittered below the cap
    assert delays[-1] > delays[0]


def test_watch_keeps_the_latest_valid_snapshot():
    engine = Engine(caps=capabilities("openengine.load"), watch=good_stream())
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        view = CapabilityView.fetch(channel)
        with LoadWatcher(channel, view=view, request=FAST_STREAM, backoff=FAST) as watcher:
            first = watcher.wait_for_snapshot(timeout=10)
            assert first is not None and first.instance_id == "engine-1"
            assert wait_until(lambda: watcher.latest.running_requests >= 3)
            assert watcher.mode == WATCH
            assert watcher.age is not None and watcher.age >= 0
    assert errors(watcher) == []


def test_reconnects_after_the_stream_fails():
    def watch(request, n):
        for i, msg in enumerate(good_stream(count=2)(request, n)):
            yield msg
        yield grpc.StatusCode.UNAVAILABLE

    engine = Engine(caps=capabilities("openengine.load"), watch=watch)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), backoff=FAST) as watcher:
            assert wait_until(lambda: engine.streams >= 3)
            assert watcher.reconnects >= 2
            assert wait_until(lambda: watcher.latest is not None and watcher.latest.total_kv_blocks >= 2)


def test_silent_stream_is_reported_and_reopened():
    def watch(request, n):
        gen = good_stream(heartbeat=50, interval=0)(request, n)
        yield next(gen)
        yield next(gen)
        yield 3.0          # then nothing, far past the 50 ms heartbeat

    engine = Engine(caps=capabilities("openengine.load", observability={"change_driven": True}), watch=watch)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), backoff=FAST, tolerance=0.5) as watcher:
            assert wait_until(lambda: engine.streams >= 2)
    assert "OEV312" in errors(watcher)


def test_revision_change_in_settings_is_detected_and_discovery_reread():
    changes = []
    engine = Engine(caps=capabilities("openengine.load", revision=1), watch=good_stream(revision=2, count=3))
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        view = CapabilityView.fetch(channel)
        engine.caps.revision = 2      # discovery now answers the new revision
        with LoadWatcher(channel, view=view, backoff=FAST, on_revision_change=changes.append) as watcher:
            assert wait_until(lambda: watcher.revision_changed)
            assert wait_until(lambda: engine.streams >= 2)
    assert changes[0] == 2
    assert "OEV319" in errors(watcher)


def test_aborted_stream_means_revision_change():
    def watch(request, n):
        gen = good_stream(count=1)(request, n)
        yield next(gen)
        yield next(gen)
        yield grpc.StatusCode.ABORTED

    engine = Engine(caps=capabilities("openengine.load"), watch=watch)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), backoff=FAST) as watcher:
            assert wait_until(lambda: watcher.revision_changed)


def test_polls_when_load_is_not_advertised():
    engine = Engine(caps=capabilities(), watch=good_stream())
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), poll_interval=0.01) as watcher:
            assert wait_until(lambda: engine.polls >= 3)
            assert watcher.mode == POLL and watcher.latest is not None
    assert engine.streams == 0


def test_falls_back_to_polling_on_unimplemented_then_gives_up():
    engine = Engine(caps=capabilities("openengine.load"), watch_error=grpc.StatusCode.UNIMPLEMENTED)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, poll_interval=0.01, backoff=FAST) as watcher:
            assert wait_until(lambda: engine.polls >= 2)
            assert watcher.mode == POLL
            engine.getload_error = grpc.StatusCode.UNIMPLEMENTED
            assert wait_until(lambda: watcher.mode == UNAVAILABLE)


def test_bounded_backoff_gives_up():
    engine = Engine(caps=capabilities("openengine.load"), watch_error=grpc.StatusCode.UNAVAILABLE)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        backoff = Backoff(initial=0.01, maximum=0.02, attempts=3, rng=random.Random(3))
        with LoadWatcher(channel, backoff=backoff) as watcher:
            assert wait_until(lambda: watcher.mode == UNAVAILABLE)
    assert engine.streams == 4


def test_async_watcher_and_fallback():
    engine = Engine(caps=capabilities("openengine.load"), watch=good_stream())

    async def main(address):
        async with grpc.aio.insecure_channel(address) as channel:
            view = await CapabilityView.afetch(channel)
            async with AsyncLoadWatcher(channel, view=view, backoff=FAST) as watcher:
                load = await watcher.wait_for_snapshot(timeout=10)
                assert load is not None and watcher.mode == WATCH
            engine.watch_error = grpc.StatusCode.UNIMPLEMENTED
            async with AsyncLoadWatcher(channel, view=view, backoff=FAST, poll_interval=0.01) as polling:
                load = await polling.wait_for_snapshot(timeout=10)
                assert load is not None and polling.mode == POLL
            return watcher

    with Server(engine) as server:
        watcher = asyncio.run(main(server.address))
    assert errors(watcher) == []
