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
from servers import Engine, Server, capabilities, foreign_server, good_stream, now_ts  # noqa: E402

from openengine.client import (  # noqa: E402
    POLL, UNAVAILABLE, WATCH, AsyncLoadWatcher, Backoff, CapabilityView, LoadWatcher, Restart,
)
from openengine.v1 import load_pb2, server_pb2  # noqa: E402

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


def test_polls_getload_when_load_is_not_advertised():
    """REQ-CORE-004: no WatchLoad and no runtime events against an engine without their profiles;
    GetLoad is core, so its load is polled."""
    engine = Engine(caps=capabilities(), watch=good_stream())
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), poll_interval=0.01) as watcher:
            assert watcher.wait_for_snapshot(timeout=10) is not None
            assert watcher.mode == POLL
        # Without a view it reads discovery first, then comes to the same conclusion.
        with LoadWatcher(channel, poll_interval=0.01) as watcher:
            assert watcher.wait_for_snapshot(timeout=10) is not None
            assert watcher.mode == POLL
    assert engine.streams == 0 and engine.polls >= 2 and engine.subscriptions == 0


def test_an_upstream_only_engine_is_polled():
    engine = Engine(upstream_only=True)

    async def main(address):
        async with grpc.aio.insecure_channel(address) as channel:
            async with AsyncLoadWatcher(channel, backoff=FAST, poll_interval=0.01) as watcher:
                load = await watcher.wait_for_snapshot(timeout=10)
                assert load is not None and load.instance_id == "engine-1"
                assert watcher.mode == POLL and watcher.view.upstream_only

    with Server(engine) as server:
        asyncio.run(main(server.address))
    assert engine.polls >= 1


def test_wait_for_snapshot_returns_when_the_watcher_gives_up():
    engine = Engine(caps=capabilities("openengine.load"), watch_error=grpc.StatusCode.UNAVAILABLE)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        backoff = Backoff(initial=0.01, maximum=0.02, attempts=3, rng=random.Random(3))
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), backoff=backoff) as watcher:
            assert watcher.wait_for_snapshot(timeout=None) is None
            assert watcher.mode == UNAVAILABLE


def _revision_event(revision):
    from openengine.v1 import events_pb2

    return events_pb2.RuntimeEvent(capability_revision_changed=events_pb2.CapabilityRevisionChanged(
        previous_revision=revision - 1, revision=revision))


def test_runtime_events_announce_a_revision_change():
    engine = Engine(caps=capabilities("openengine.load", "openengine.runtime-events"), watch=good_stream())
    changes = []
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        view = CapabilityView.fetch(channel)
        with LoadWatcher(channel, view=view, request=FAST_STREAM, backoff=FAST,
                         on_revision_change=changes.append) as watcher:
            assert watcher.wait_for_snapshot(timeout=10) is not None
            assert wait_until(lambda: engine.subscriptions == 1)
            discoveries, streams = engine.discoveries, engine.streams
            engine.events.put(_revision_event(2))
            assert wait_until(lambda: watcher.revision_changed)
            assert changes == [2]
            # Discovery is re-read and the stream reopened under the new revision.
            assert wait_until(lambda: engine.discoveries > discoveries and engine.streams > streams)
            assert watcher.wait_for_snapshot(timeout=10) is not None


def test_runtime_events_are_not_used_when_not_advertised():
    engine = Engine(caps=capabilities("openengine.load"), watch=good_stream())
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), request=FAST_STREAM, backoff=FAST) as watcher:
            assert watcher.wait_for_snapshot(timeout=10) is not None
            assert watcher.wait_for_snapshot(timeout=10) is not None
    assert engine.subscriptions == 0


def test_async_watcher_uses_runtime_events():
    engine = Engine(caps=capabilities("openengine.load", "openengine.runtime-events"), watch=good_stream())

    async def main(address):
        async with grpc.aio.insecure_channel(address) as channel:
            view = await CapabilityView.afetch(channel)
            async with AsyncLoadWatcher(channel, view=view, request=FAST_STREAM, backoff=FAST) as watcher:
                assert await watcher.wait_for_snapshot(timeout=10) is not None
                for _ in range(500):
                    if engine.subscriptions:
                        break
                    await asyncio.sleep(0.01)
                engine.events.put(_revision_event(2))
                for _ in range(500):
                    if watcher.revision_changed:
                        break
                    await asyncio.sleep(0.01)
                assert watcher.revision_changed
                assert await watcher.wait_for_snapshot(timeout=10) is not None

    with Server(engine) as server:
        asyncio.run(main(server.address))


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


# -- a fleet: restarts, earlier layouts, bounded memory -------------------------------------------

def _instance(instance_id):
    return Engine(caps=capabilities("openengine.load"), instance_id=instance_id,
                  watch=good_stream(instance_id=instance_id))


def test_a_restarted_engine_is_followed_as_a_new_instance_not_reported():
    """The engine dies and a new instance starts on the same port: the watcher re-reads discovery,
    reports one restart, and validates the new instance without a violation."""
    restarts = []
    first = _instance("engine-1")
    with Server(first) as server, grpc.insecure_channel(server.address) as channel:
        port = server.port
        watcher = LoadWatcher(channel, view=CapabilityView.fetch(channel), request=FAST_STREAM, backoff=FAST,
                              on_restart=restarts.append).start()
        try:
            assert watcher.wait_for_snapshot(timeout=10).instance_id == "engine-1"
            server.__exit__(None, None, None)      # killed: no goodbye on the stream
            with Server(_instance("engine-2"), port=port):
                assert wait_until(lambda: watcher.latest.instance_id == "engine-2")
                for _ in range(3):
                    assert watcher.wait_for_snapshot(timeout=10).instance_id == "engine-2"
        finally:
            watcher.stop()
    assert [(r.previous, r.current) for r in watcher.restarts] == [("engine-1", "engine-2")]
    assert restarts == list(watcher.restarts) and isinstance(restarts[0], Restart)
    assert watcher.instance_id == "engine-2" and watcher.mode == WATCH
    assert errors(watcher) == []


def test_the_async_watcher_follows_a_restart_too():
    first = _instance("engine-1")

    async def main(server):
        async with grpc.aio.insecure_channel(server.address) as channel:
            view = await CapabilityView.afetch(channel)
            async with AsyncLoadWatcher(channel, view=view, request=FAST_STREAM, backoff=FAST) as watcher:
                assert (await watcher.wait_for_snapshot(timeout=10)).instance_id == "engine-1"
                server.__exit__(None, None, None)
                with Server(_instance("engine-2"), port=server.port):
                    for _ in range(200):
                        load = await watcher.wait_for_snapshot(timeout=10)
                        if load is not None and load.instance_id == "engine-2":
                            break
                    assert (await watcher.wait_for_snapshot(timeout=10)).instance_id == "engine-2"
            return watcher

    with Server(first) as server:
        watcher = asyncio.run(main(server))
    assert [(r.previous, r.current) for r in watcher.restarts] == [("engine-1", "engine-2")]
    assert errors(watcher) == []


def test_an_instance_id_discovery_does_not_confirm_is_a_violation():
    """A stream naming another instance than discovery does, discovery re-read once and unchanged:
    no restart, OEV309 reported."""
    engine = Engine(caps=capabilities("openengine.load"), watch=good_stream(instance_id="impostor"))
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), request=FAST_STREAM, backoff=FAST) as watcher:
            assert wait_until(lambda: watcher.violation_counts.get("OEV309", 0) >= 3)
    assert watcher.restarts == ()
    assert engine.discoveries >= 2        # asked once more before judging


def test_violations_are_a_bounded_ring_with_counts_per_rule():
    def coalescing(request, n):
        for msg in good_stream(interval=1)(request, n):
            if not isinstance(msg, float) and msg.WhichOneof("kind") == "snapshot":
                msg.snapshot.coalesced = 1          # a warning on every snapshot
            yield msg

    engine = Engine(caps=capabilities("openengine.load"), watch=coalescing)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with LoadWatcher(channel, view=CapabilityView.fetch(channel), backoff=FAST, violations_kept=5) as watcher:
            assert wait_until(lambda: watcher.violation_counts.get("OEV315", 0) >= 50)
            kept = watcher.violations
    assert len(kept) == 5 and {v.rule_id for v in kept} == {"OEV315"}


def test_a_server_that_is_not_openengine_ends_the_watcher_with_the_reason():
    """No thread dies silently: the watcher ends, says why, and a waiter returns None at once."""
    with foreign_server() as address, grpc.insecure_channel(address) as channel:
        with LoadWatcher(channel, backoff=FAST) as watcher:
            assert wait_until(lambda: watcher.mode == UNAVAILABLE)
            assert watcher.wait_for_snapshot(timeout=None) is None
    assert "not an OpenEngine v1 server" in watcher.end_reason


def test_the_async_watcher_ends_on_a_foreign_server_too():
    async def main(address):
        async with grpc.aio.insecure_channel(address) as channel:
            async with AsyncLoadWatcher(channel, backoff=FAST) as watcher:
                assert await watcher.wait_for_snapshot(timeout=30) is None
                return watcher

    with foreign_server() as address:
        watcher = asyncio.run(main(address))
    assert watcher.mode == UNAVAILABLE and "GetServerInfo" in watcher.end_reason


def test_an_engine_replaced_by_a_foreign_server_ends_the_watcher():
    with Server(_instance("engine-1")) as server, grpc.insecure_channel(server.address) as channel:
        watcher = LoadWatcher(channel, view=CapabilityView.fetch(channel), request=FAST_STREAM, backoff=FAST).start()
        try:
            assert watcher.wait_for_snapshot(timeout=10) is not None
            server.__exit__(None, None, None)
            with foreign_server(port=server.port):
                assert wait_until(lambda: watcher.mode == UNAVAILABLE)
                assert watcher.wait_for_snapshot(timeout=None) is None
        finally:
            watcher.stop()
    assert "not an OpenEngine v1 server" in watcher.end_reason


def test_bounded_backoff_says_why_it_gave_up():
    engine = Engine(caps=capabilities("openengine.load"), watch_error=grpc.StatusCode.UNAVAILABLE)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        backoff = Backoff(initial=0.01, maximum=0.02, attempts=2, rng=random.Random(3))
        with LoadWatcher(channel, backoff=backoff) as watcher:
            assert watcher.wait_for_snapshot(timeout=None) is None
    assert watcher.end_reason.startswith("gave up after 2 failed attempts") and "UNAVAILABLE" in watcher.end_reason



def test_the_reference_engine_restarted_on_its_port_is_followed():
    """The reference engine stopped and started again on the same port: a new instance id, one
    restart, and the new instance's stream validated without a violation."""
    from openengine.engine import EngineConfig, RunningEngine

    request = load_pb2.WatchLoadRequest(interval_ms=20)
    with RunningEngine(EngineConfig(port=0, profiles=("load",))) as engine:
        port = int(engine.address.rpartition(":")[2])
        channel = grpc.insecure_channel(engine.address)
        watcher = LoadWatcher(channel, view=CapabilityView.fetch(channel), request=request, backoff=FAST).start()
        first = watcher.wait_for_snapshot(timeout=10).instance_id
    try:
        with RunningEngine(EngineConfig(port=port, profiles=("load",))):
            assert wait_until(lambda: watcher.restarts)
            assert watcher.wait_for_snapshot(timeout=10).instance_id == watcher.restarts[0].current != first
            assert watcher.wait_for_snapshot(timeout=10) is not None
    finally:
        watcher.stop()
        channel.close()
    assert [r.previous for r in watcher.restarts] == [first]
    assert "OEV309" not in watcher.violation_counts   # (a loaded machine may add timing findings)
