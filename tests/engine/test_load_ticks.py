"""Shared periodic ticks (openengine/engine/load.py): streams whose phases agree share one timer
and one built snapshot per tick; every stream still sees its snapshots at least an interval apart."""

from __future__ import annotations

import asyncio
import math

from openengine.serve.load import LoadPublisher, Watcher, phase_slack
from openengine.v1 import load_pb2

from tests.engine.conftest import running


class CountingBuild:
    def __init__(self):
        self.calls = 0

    def __call__(self, per_rank: bool) -> load_pb2.LoadInfo:
        self.calls += 1
        return load_pb2.LoadInfo(instance_id="e", running_requests=self.calls)


def _watcher(interval_ms: int = 100, per_rank: bool = False) -> Watcher:
    return Watcher(interval_ms, 0, per_rank, 1)


def test_streams_in_phase_share_a_ticker_and_its_snapshot():
    async def scenario():
        build = CountingBuild()
        pub = LoadPublisher(build)
        loop = asyncio.get_running_loop()
        now = loop.time() - 0.1            # opened an interval ago: due at the next tick
        same = [_watcher() for _ in range(3)]
        for w in same:
            pub.open(w)
            pub.start_ticks(w, now)
        late = _watcher()                   # half an interval out of phase: a ticker of its own
        pub.open(late)
        pub.start_ticks(late, now + 0.05)
        ranked = _watcher(per_rank=True)    # another snapshot shape: a ticker of its own
        pub.open(ranked)
        pub.start_ticks(ranked, now)
        assert len(pub.tickers[(100, False)]) == 2 and len(pub.tickers[(100, True)]) == 1
        assert {id(w.ticker) for w in same} == {id(same[0].ticker)}

        same[0].ticker._fire()
        offered = [w.pending for w in same]
        assert offered[0] is not None and all(p is offered[0] for p in offered)
        assert build.calls == 1             # one build for the whole ticker
        assert late.pending is None and ranked.pending is None

        for w in same + [late, ranked]:
            pub.close(w)
        assert pub.tickers == {} and len(pub) == 0
    asyncio.run(scenario())


def test_a_member_is_not_offered_ticks_before_its_first_interval_is_over():
    async def scenario():
        pub = LoadPublisher(CountingBuild())
        now = asyncio.get_running_loop().time()
        early = _watcher()
        pub.open(early)
        pub.start_ticks(early, now - 0.12)  # due 20 ms ago: its ticker is phased at about now
        joining = _watcher()
        pub.open(joining)
        pub.start_ticks(joining, now - 0.01)  # due in 90 ms: the tick after next fits its slack
        assert joining.ticker is early.ticker
        early.ticker._fire()
        assert early.pending is not None and joining.pending is None
        for w in (early, joining):
            pub.close(w)
    asyncio.run(scenario())


def test_joining_a_ticker_never_delays_the_first_snapshot_beyond_the_slack():
    async def scenario():
        pub = LoadPublisher(CountingBuild())
        now = asyncio.get_running_loop().time()
        watchers = []
        for i in range(40):
            w = _watcher()
            pub.open(w)
            pub.start_ticks(w, now + i * 0.0037)
            watchers.append(w)
            assert w.ticker.lateness(w.due_from) <= phase_slack(100) + 1e-9
        span = 39 * 0.0037                  # the streams opened over 144 ms
        assert 1 < len(pub.tickers[(100, False)]) <= math.ceil(span / phase_slack(100)) + 1
        for w in watchers:
            pub.close(w)
    asyncio.run(scenario())


def test_each_stream_sees_snapshots_an_interval_apart_from_the_opening_one():
    from openengine.v1 import load_pb2

    with running(profiles=("load",)) as (_, stubs):
        calls = [stubs.observability.WatchLoad(load_pb2.WatchLoadRequest(interval_ms=30, heartbeat_ms=0)) for _ in range(4)]
        streams = []
        for call in calls:
            msgs = []
            for msg in call:
                msgs.append(msg)
                if len(msgs) == 5:
                    break
            call.cancel()
            streams.append(msgs)
    for msgs in streams:
        assert [m.sequence for m in msgs] == list(range(5))
        loads = [m.snapshot.load.timestamp.ToNanoseconds() for m in msgs[1:]]
        assert all(b - a >= 30_000_000 for a, b in zip(loads, loads[1:]))
