"""The benchmark harness: the fleet's staleness join, the synthetic load hook, the TCP byte counters, the
results files, and a tiny end-to-end run of the fleet and fan-out benchmarks (behaviour only,
never timings)."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import time

import pytest

from bench import fanout, fleet
from bench.figures import (INCONCLUSIVE, MET, MISSED, Figure, Section, at_least, at_most, info, interleaved,
                           quantile)
from bench.fleet import join
from bench.measure import TcpBytes, tcp_bytes
from bench.run import write_json, write_markdown
from bench.synthetic import PoissonDriver, SyntheticLoad, change_counter

# Most of its time is spent waiting on engines' streams and timers (see tests/conftest.py).
pytestmark = pytest.mark.waits

MS = 1_000_000


# -- staleness join -------------------------------------------------------------------------------

def test_join_takes_the_first_value_at_least_as_new_per_engine():
    changes = [(0, 1, 100 * MS), (0, 2, 150 * MS), (0, 3, 400 * MS), (1, 1, 120 * MS)]
    observations = [
        (0, 90 * MS, 0),
        (0, 160 * MS, 2),    # covers changes 1 and 2 at once (a coalesced snapshot or a later poll)
        (1, 125 * MS, 1),
        (0, 300 * MS, 2),    # not newer: does not count for change 3
        (0, 410 * MS, 3),
        (1, 200 * MS, 1),
    ]
    r = join(changes, observations, window=(0, 1000 * MS), observed_until=1000 * MS)
    assert r.changes == 4 and r.missed == 0
    assert r.samples_ns == sorted([60 * MS, 10 * MS, 10 * MS, 5 * MS])


def test_join_ignores_observation_order_and_other_engines():
    changes = [(0, 1, 100 * MS)]
    observations = [(0, 180 * MS, 1), (1, 101 * MS, 5), (0, 130 * MS, 1)]
    r = join(changes, observations, window=(0, 1000 * MS), observed_until=1000 * MS)
    assert r.samples_ns == [30 * MS]


def test_join_counts_only_changes_in_the_window_and_unseen_ones_as_missed():
    changes = [(0, 1, 50 * MS), (0, 2, 200 * MS), (0, 3, 600 * MS), (0, 4, 950 * MS)]
    observations = [(0, 210 * MS, 2)]
    r = join(changes, observations, window=(100 * MS, 900 * MS), observed_until=1000 * MS)
    assert r.changes == 2          # k=2 and k=3; k=1 before the window, k=4 in the tail
    assert r.missed == 1           # k=3 was never seen
    # The missed change is kept as a lower bound (observed_until - change time), not dropped.
    assert r.samples_ns == [10 * MS, 400 * MS]


def test_join_does_not_use_values_received_after_observation_ended():
    r = join([(0, 1, 100 * MS)], [(0, 2000 * MS, 1)], window=(0, 1000 * MS), observed_until=1000 * MS)
    assert r.missed == 1


def test_nearest_rank_quantiles():
    values = list(range(1, 101))
    assert quantile(values, 0.5) == 50
    assert quantile(values, 0.99) == 99
    assert quantile(values, 1.0) == 100
    assert quantile([7], 0.99) == 7
    assert math.isnan(quantile([], 0.5))


# -- synthetic load -------------------------------------------------------------------------------

async def _engines(count: int):
    """`count` started reference engines serving openengine.load, on the SDK's public Server."""
    from openengine.engine import EngineConfig, ReferenceBackend, check, serve_config
    from openengine.serve import Server

    config = check(EngineConfig(port=0, profiles=("load",)))
    servers = [Server(ReferenceBackend(config), serve_config(config)) for _ in range(count)]
    for server in servers:
        await server.start()
    return servers


async def _counter(address: str) -> tuple[int, int]:
    """(change counter, running requests) of an engine's GetLoad answer."""
    import grpc

    from openengine.v1 import control_service_pb2_grpc, server_pb2

    async with grpc.aio.insecure_channel(address) as channel:
        load = await control_service_pb2_grpc.ControlStub(channel).GetLoad(server_pb2.GetLoadRequest(), timeout=5)
    return change_counter(load), load.running_requests


def test_synthetic_changes_are_visible_in_snapshots_and_wake_watchers():
    import grpc

    from openengine.v1 import load_pb2, observability_service_pb2_grpc

    async def main():
        (server,) = await _engines(1)
        try:
            load = SyntheticLoad(server.backend)
            assert await _counter(server.address) == (0, 1)
            async with grpc.aio.insecure_channel(server.address) as channel:
                stream = observability_service_pb2_grpc.ObservabilityStub(channel).WatchLoad(
                    load_pb2.WatchLoadRequest(interval_ms=0, heartbeat_ms=0, initial_snapshot=False))
                assert (await stream.read()).WhichOneof("kind") == "settings"
                assert load.change() == 1 and load.change() == 2
                seen = 0
                while seen < 2:
                    msg = await asyncio.wait_for(stream.read(), 5)
                    seen = change_counter(msg.snapshot.load)
                stream.cancel()
        finally:
            await server.stop(0.1)

    asyncio.run(main())


def test_poisson_driver_logs_increasing_counters_per_engine():
    async def main():
        servers = await _engines(3)
        try:
            driver = PoissonDriver([SyntheticLoad(server.backend) for server in servers], rate=200.0, seed=3)
            driver.start()
            while len(driver.log) < 30:
                await asyncio.sleep(0.01)
            driver.stop()
            return [(await _counter(server.address))[0] for server in servers], driver.log
        finally:
            for server in servers:
                await server.stop(0.1)

    counters, log = asyncio.run(main())
    for engine in range(3):
        ks = [k for e, k, _ in log if e == engine]
        times = [t for e, _, t in log if e == engine]
        assert ks == list(range(1, len(ks) + 1))
        assert times == sorted(times)
        assert counters[engine] == len(ks)


# -- measurement ------------------------------------------------------------------------------------

def test_tcp_bytes_counts_exactly_the_selected_connections():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    try:
        before = tcp_bytes({port})
        client.sendall(b"x" * 1000)
        got = 0
        while got < 1000:
            got += len(accepted.recv(4096))
        accepted.sendall(b"y" * 10)
        assert client.recv(10)
        for _ in range(100):   # wait until the kernel has seen the acknowledgement
            delta = tcp_bytes({port}) - before
            if delta.sent == 1000:
                break
            time.sleep(0.01)
        assert (delta.sent, delta.received) == (1000, 10)
        assert delta.segments > 0
    finally:
        for s in (client, accepted, server):
            s.close()


def test_on_wire_adds_one_header_per_segment():
    assert TcpBytes(sent=100, received=50, segments=3).on_wire(52) == 150 + 3 * 52


# -- results files ----------------------------------------------------------------------------------

def _sections() -> list[Section]:
    s = Section("Demo", discussion="What the demo figures mean.")
    s.figures = [at_most("demo.ratio", [0.2, 0.21, 0.19, 0.2, 0.22], 0.25, group="demo"), at_most("demo.other", 2.0, 1.5),
                 at_most("demo.noisy", [0.9, 1.2, 1.0, 0.8, 1.3], 1.0),
                 info("demo.latency", 3.5, "ms"), Figure("demo.inf", float("inf"), "ratio", "<= 1", MISSED)]
    return [s]


def test_a_goal_is_met_missed_or_inconclusive_by_its_spread():
    """The median of the rounds is the value; the interquartile range is the spread; the goal is
    met when the spread lies inside it, missed when outside, inconclusive when it straddles it."""
    met = at_most("r", [0.9, 0.95, 1.0, 0.7, 0.93], 1.0)
    assert (met.value, met.low, met.high, met.rounds, met.verdict) == (0.93, 0.9, 0.95, 5, MET)
    assert at_least("r", [0.5, 0.6, 0.55, 0.58, 3.0], 0.9).verdict == MISSED      # one odd round is not the spread
    assert at_most("r", [0.8, 1.1, 0.9, 1.2, 1.05], 1.0).verdict == INCONCLUSIVE
    assert at_most("count", 0, 0, "requests").verdict == MET and at_most("count", 1, 0).verdict == MISSED
    assert at_most("r", [float("inf"), 0.5], 1.0).verdict == MISSED               # a round that measured nothing


def test_interleaved_rounds_alternate_which_side_goes_first():
    calls = []
    pairs = interleaved(lambda side: calls.append(side) or len(calls), ("bare", "measured"), rounds=4)
    assert calls == ["bare", "measured", "measured", "bare"] * 2
    assert pairs == [(1, 2), (4, 3), (5, 6), (8, 7)]


def test_results_json_records_every_figure_with_its_goal(tmp_path):
    meta = {"date": "2026-01-01 00:00 UTC", "machine": {"cpu": "x"}}
    write_json(tmp_path / "results.json", meta, _sections())
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["machine"] == {"cpu": "x"} and doc["date"]
    records = {r["name"]: r for r in doc["figures"]}
    for r in records.values():
        assert {"name", "value", "unit", "goal", "met"} <= set(r)
    assert records["demo.ratio"]["goal"] == "<= 0.25" and records["demo.ratio"]["verdict"] == "met"
    assert (records["demo.ratio"]["low"], records["demo.ratio"]["high"], records["demo.ratio"]["rounds"]) == (0.2, 0.21, 5)
    assert records["demo.other"]["verdict"] == "missed" and records["demo.noisy"]["verdict"] == "inconclusive"
    assert records["demo.latency"]["met"] is None and records["demo.latency"]["verdict"] is None
    assert records["demo.inf"]["value"] is None     # JSON has no infinity


def test_results_markdown_says_which_goals_were_met_missed_or_inconclusive(tmp_path):
    meta = {"date": "2026-01-01 00:00 UTC", "loadavg_start": "0.1", "loadavg_end": "0.2", "seconds": 1.0,
            "machine": {"cpu": "cpu", "cores": 2, "memory_gib": 4, "python": "3", "grpcio": "1",
                        "os": "linux", "commit": "abc"}}
    write_markdown(tmp_path / "results.md", meta, _sections())
    text = (tmp_path / "results.md").read_text()
    assert "4 goals: 1 met, 2 missed, 1 inconclusive." in text
    assert "`demo.other`" in text.split("Missed:")[1].split("\n")[0]
    assert "`demo.noisy` (1, spread 0.9..1.2 (5 rounds), goal <= 1)" in text.split("Inconclusive:")[1]
    assert "| `demo.ratio` | 0.2 | 0.2..0.21 (5 rounds) | ratio | <= 0.25 | met |" in text
    assert "What the demo figures mean." in text


# -- tiny end-to-end runs ------------------------------------------------------------------------

@pytest.mark.slow
def test_tiny_fleet_run_sees_every_change_in_both_modes():
    r = fleet.measure(2, rate=20.0, poll_ms=20, window_s=1.5, idle_s=0.3, tail_s=0.5, rounds=2)
    assert len(r.rounds) == 2
    for mode in ("watch", "poll"):
        m = r.modes[mode]
        assert m.staleness.changes > 0
        assert m.staleness.missed == 0
        assert m.messages > 0 and m.tcp.payload > 0
        assert m.errors == 0
    names = {f.name for f in fleet.figures(r)}
    assert {"fleet.n2.client_cpu_ratio", "fleet.n2.server_cpu_ratio", "fleet.n2.bytes_ratio",
            "fleet.n2.staleness_p99_ratio"} <= names
    assert all(f.met is not None for f in fleet.figures(r) if f.goal)
    # the goals are judged at the interval polling was asked for, and say so
    by_name = {f.name: f for f in fleet.figures(r)}
    for name in ("client_cpu_ratio", "server_cpu_ratio", "bytes_ratio"):
        assert "asked 20 ms" in by_name[f"fleet.n2.{name}"].note


@pytest.mark.slow
def test_tiny_fanout_run_stalls_for_real_and_keeps_serving_the_others():
    run = fanout.measure("watchload", 4, stalled=1, interval_ms=20, window_s=1.5, warmup_s=1.0)
    assert run.coalescing >= 1           # the stalled watcher's mailbox coalesces
    assert run.delivered > 0 and run.errors == 0
    assert run.message_bytes > 0
    bare = fanout.measure("bare", 2, interval_ms=20, window_s=0.5, warmup_s=0.2, size=run.message_bytes)
    assert bare.delivered > 0 and bare.message_bytes == run.message_bytes


def test_fleet_goals_scale_polling_that_fell_behind_to_the_asked_interval():
    from bench.fleet import StalenessResult

    def mode(name, polls_or_messages, client_cpu_s, server_cpu_s, sent):
        return fleet.ModeResult(name, 10.0, client_cpu_s, server_cpu_s, TcpBytes(sent, sent, 0),
                                polls_or_messages, StalenessResult([1_000_000], 0, 1), 0)

    # 10 engines polled every 50 ms for 10 s would be 2,000 polls; 1,000 means polling fell 2x behind.
    behind = fleet.FleetResult(10, 4.0, 50, 0.0, [{"watch": mode("watch", 400, 1.0, 1.0, 1000),
                                                   "poll": mode("poll", 1000, 2.0, 2.0, 2000)}])
    by_name = {f.name: f for f in fleet.figures(behind)}
    assert by_name["fleet.n10.client_cpu_ratio"].value == 0.25          # 1 / (2 x 2)
    assert by_name["fleet.n10.client_cpu_ratio_measured"].value == 0.5
    assert by_name["fleet.n10.server_cpu_ratio"].value == 0.25
    assert "scaled from its achieved interval to the asked 50 ms (x2.00" in by_name["fleet.n10.bytes_ratio"].note
    kept = fleet.FleetResult(10, 4.0, 50, 0.0, [{"watch": mode("watch", 400, 1.0, 1.0, 1000),
                                                 "poll": mode("poll", 2000, 2.0, 2.0, 2000)}])
    by_name = {f.name: f for f in fleet.figures(kept)}
    assert by_name["fleet.n10.client_cpu_ratio"].value == by_name["fleet.n10.client_cpu_ratio_measured"].value == 0.5
    assert "at the asked 50 ms interval" in by_name["fleet.n10.client_cpu_ratio"].note


def test_only_a_whole_run_writes_bench_results(capsys):
    from bench.run import main

    for argv in (["--quick"], ["--only", "validators"]):
        with pytest.raises(SystemExit) as refused:
            main(argv)
        assert refused.value.code == 2
        assert "whole run only" in capsys.readouterr().err


def test_the_benchmarks_import_nothing_from_the_tests():
    import ast
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[2] / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "tests" or n.startswith("tests.") for n in names), path.name
