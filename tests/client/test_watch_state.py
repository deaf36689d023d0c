"""The watcher's state machine alone, fed messages, failures and clock readings by hand: what it
decides, with no channel and no thread."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import capabilities  # noqa: E402

from openengine.client import (  # noqa: E402
    POLL, UNAVAILABLE, WATCH, Backoff, CapabilityView, Discover, Finished, Pause, Poll, Watch, WatchState,
)
from openengine.v1 import load_pb2, server_pb2  # noqa: E402

NS = 1_000_000_000


class Failure(grpc.RpcError):
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def details(self):
        return "scripted"


def view(*names, revision=1, **limits):
    info = server_pb2.ServerInfo(instance_id="e1", engine_role=server_pb2.ENGINE_ROLE_AGGREGATED,
                                 schema_revision=2, schema_release="r", capability_revision=revision)
    return CapabilityView(capabilities(*names, revision=revision, **limits), server_info=info)


def settings(heartbeat=100, revision=1, t=1):
    msg = load_pb2.WatchLoadResponse(sequence=0, timestamp_unix_nanos=t * NS)
    s = msg.settings
    s.interval_ms, s.heartbeat_ms, s.initial_snapshot, s.instance_id = 0, heartbeat, True, "e1"
    s.capability_revision = revision
    return msg


def snapshot(seq, t, instance="e1"):
    msg = load_pb2.WatchLoadResponse(sequence=seq, timestamp_unix_nanos=t * NS)
    msg.snapshot.load.instance_id = instance
    msg.snapshot.load.timestamp_unix_nanos = t * NS
    msg.snapshot.load.running_requests = seq
    return msg


def test_a_stream_its_silence_its_failures_and_the_end():
    now = [100.0]
    state = WatchState(view=view("openengine.load", observability={"change_driven": True}),
                       request=load_pb2.WatchLoadRequest(interval_ms=0, heartbeat_ms=100),
                       backoff=Backoff(initial=0.5, maximum=0.5, jitter=0, attempts=1, rng=random.Random(1)),
                       clock=lambda: now[0])
    assert isinstance(state.next_step(), Watch) and state.mode == WATCH
    assert state.received(settings()) and state.received(snapshot(1, 1))
    assert state.latest.running_requests == 1 and state.snapshots == 1
    now[0] += 0.05
    assert not state.silent()
    now[0] += 1.0                              # far past the 100 ms heartbeat
    assert state.silent() and state.violation_counts == {"OEV312": 1}
    state.failed(Failure(grpc.StatusCode.CANCELLED))       # the driver cancelled the silent stream
    assert state.next_step() == Pause(0.5) and state.reconnects == 1
    assert isinstance(state.next_step(), Discover)         # the engine may have restarted meanwhile
    state.discovered(view("openengine.load"))
    assert isinstance(state.next_step(), Watch)
    state.failed(Failure(grpc.StatusCode.UNAVAILABLE))     # backoff exhausted: one attempt allowed
    assert state.mode == UNAVAILABLE and isinstance(state.next_step(), Finished)
    assert state.end_reason == "gave up after 1 failed attempts in a row: UNAVAILABLE scripted"


def test_revision_changes_restarts_and_the_getload_fallback():
    changes, restarts = [], []
    state = WatchState(view=view("openengine.load"), on_revision_change=changes.append,
                       on_restart=restarts.append, poll_interval=0.25)
    state.next_step()
    assert state.received(settings(revision=2))            # OEV319: a new revision
    assert changes == [2] and state.revision_changed
    state.stream_ended()
    assert isinstance(state.next_step(), Discover)         # at once, no backoff
    moved = view("openengine.load", revision=2)
    moved.server_info.instance_id = "e2"
    state.discovered(moved)
    assert [(r.previous, r.current) for r in restarts] == [("e1", "e2")]
    state.next_step()
    state.failed(Failure(grpc.StatusCode.UNIMPLEMENTED))   # WatchLoad not served after all
    assert state.mode == POLL and isinstance(state.next_step(), Poll)
    state.polled(server_pb2.LoadInfo(instance_id="e2", running_requests=3))
    assert state.latest.running_requests == 3 and state.next_step() == Pause(0.25)
    state.stop()
    assert isinstance(state.next_step(), Finished)


def test_without_openengine_load_only_getload_is_polled_until_a_view_advertises_it():
    state = WatchState(view=view())
    assert state.mode == POLL and isinstance(state.next_step(), Poll)
    assert state.next_events_step() == "await-view"
    state.discovered(view("openengine.load", revision=2))     # a new configuration epoch
    assert state.mode == WATCH and isinstance(state.next_step(), Watch)
