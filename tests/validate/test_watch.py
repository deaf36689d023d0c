"""The WatchLoad stream checker: every rule with a failing and a passing stream."""

from __future__ import annotations

import pytest

from openengine.v1 import load_pb2, server_pb2
from openengine.validate import WatchLoadChecker, effective_watch_settings

MS = 1_000_000
# Stream times are milliseconds from here: a timestamp of zero is no timestamp.
T0 = 1_700_000_000_000


def settings(seq=0, t=0, interval=100, heartbeat=1000, initial=True, per_rank=False, iid="e1", rev=1):
    msg = load_pb2.WatchLoadResponse(sequence=seq)
    msg.timestamp_unix_nanos = (T0 + t) * MS
    msg.settings.interval_ms = interval
    msg.settings.heartbeat_ms = heartbeat
    msg.settings.initial_snapshot = initial
    msg.settings.per_rank = per_rank
    msg.settings.instance_id = iid
    msg.settings.capability_revision = rev
    return msg


def snapshot(seq, t, iid="e1", coalesced=0, load_t=None, ranks=0, no_load=False):
    msg = load_pb2.WatchLoadResponse(sequence=seq)
    msg.timestamp_unix_nanos = (T0 + t) * MS
    msg.snapshot.coalesced = coalesced
    if no_load:
        msg.snapshot.SetInParent()
        return msg
    msg.snapshot.load.instance_id = iid
    msg.snapshot.load.timestamp_unix_nanos = (T0 + (t if load_t is None else load_t)) * MS
    for r in range(ranks):
        msg.snapshot.load.ranks.add(data_parallel_rank=r)
    return msg


def heartbeat(seq, t):
    msg = load_pb2.WatchLoadResponse(sequence=seq)
    msg.timestamp_unix_nanos = (T0 + t) * MS
    msg.heartbeat.SetInParent()
    return msg


def run(messages, **kw):
    checker = WatchLoadChecker(clock=lambda: 0.0, **kw)
    for m in messages:
        checker.feed(m, received_at=0.0)
    return checker


def ids(checker):
    return [v.rule_id for v in checker.violations]


GOOD = [settings(), snapshot(1, 1), snapshot(2, 101), snapshot(3, 201), snapshot(4, 301)]


def test_good_stream_is_clean():
    checker = run(GOOD, instance_id="e1", capability_revision=1)
    assert checker.violations == []
    assert checker.latest.instance_id == "e1" and checker.snapshots == 4
    assert checker.finish(0.0) == []


@pytest.mark.parametrize("messages,rule", [
    ([snapshot(0, 0)], "OEV301"),
    ([settings(seq=1)], "OEV303"),
    ([settings(), snapshot(1, 1), settings(seq=2, t=2)], "OEV302"),
    ([settings(), snapshot(1, 1), snapshot(1, 101)], "OEV304"),
    ([settings(), snapshot(1, 1), snapshot(3, 101)], "OEV305"),
    ([settings(), snapshot(1, 50), snapshot(2, 10)], "OEV307"),
    ([settings(), snapshot(1, 1, no_load=True)], "OEV308"),
    ([settings(), snapshot(1, 1, iid="")], "OEV308"),
    ([settings(), snapshot(1, 1, iid="other")], "OEV309"),
    ([settings(), snapshot(1, 1), snapshot(2, 101), snapshot(3, 120)], "OEV310"),
    ([settings(), snapshot(1, 1), snapshot(2, 101), snapshot(3, 400)], "OEV311"),
    ([settings(interval=0, heartbeat=100), heartbeat(1, 10)], "OEV317"),
    ([settings(interval=0, heartbeat=100, initial=False), heartbeat(1, 100), heartbeat(2, 400)], "OEV312"),
    ([settings(interval=0, heartbeat=100, initial=False), heartbeat(1, 10)], "OEV313"),
    ([settings(interval=0, heartbeat=0, initial=False), heartbeat(1, 10)], "OEV314"),
    ([settings(), snapshot(1, 1, ranks=2)], "OEV318"),
    ([settings(rev=2)], "OEV319"),
    ([settings(), load_pb2.WatchLoadResponse(sequence=1)], "OEV306"),
])
def test_each_stream_rule(messages, rule):
    assert rule in ids(run(messages, instance_id="e1", capability_revision=1))


def test_empty_message_and_missing_timestamp():
    msg = load_pb2.WatchLoadResponse(sequence=1)
    found = run([settings(), msg]).violations
    assert {"OEV320", "OEV306"} <= {v.rule_id for v in found}


def test_settings_instance_id_must_match_discovery():
    assert ids(run([settings(iid="x")], instance_id="e1")) == ["OEV309"]
    assert ids(run([settings(iid="x"), snapshot(1, 1, iid="x")])) == []   # settings are the reference


def test_coalesced_is_an_info_record_and_excuses_a_late_snapshot():
    checker = run([settings(), snapshot(1, 1), snapshot(2, 101), snapshot(3, 501, coalesced=3)])
    assert [(v.rule_id, str(v.severity)) for v in checker.violations] == [("OEV315", "info")]
    assert checker.coalesced == 3


def test_per_rank_stream_may_carry_ranks():
    assert ids(run([settings(per_rank=True), snapshot(1, 1, ranks=2)])) == []


def test_missing_heartbeat_by_tick_and_finish():
    checker = WatchLoadChecker(clock=lambda: 0.0)
    checker.feed(settings(interval=0, heartbeat=100, initial=False), received_at=10.0)
    assert checker.tick(10.1) == []
    found = checker.tick(10.5)
    assert [v.rule_id for v in found] == ["OEV312"]
    assert checker.tick(10.6) == []                # once per silence
    checker.feed(heartbeat(1, 100), received_at=10.7)
    assert checker.tick(10.75) == []
    assert [v.rule_id for v in checker.finish(12.0)] == ["OEV312"]


def test_overdue_at_is_when_tick_starts_reporting():
    checker = WatchLoadChecker(clock=lambda: 0.0)
    assert checker.overdue_at is None                      # nothing received yet
    checker.feed(settings(interval=0, heartbeat=100, initial=False), received_at=10.0)
    overdue = checker.overdue_at
    assert 10.1 < overdue < 10.5
    assert checker.tick(overdue - 0.001) == []
    assert [v.rule_id for v in checker.tick(overdue + 0.001)] == ["OEV312"]
    checker.feed(heartbeat(1, 100), received_at=11.0)      # a message moves the moment on
    assert checker.overdue_at == pytest.approx(overdue + 1.0)
    idle = WatchLoadChecker(clock=lambda: 0.0)
    idle.feed(settings(interval=0, heartbeat=0, initial=False), received_at=10.0)
    assert idle.overdue_at is None                         # no period: silence is never overdue


def test_finish_reports_no_message_and_missing_initial_snapshot():
    assert [v.rule_id for v in WatchLoadChecker().finish(0.0)] == ["OEV301"]
    checker = run([settings(interval=0, heartbeat=0)])
    assert [v.rule_id for v in checker.finish(0.0)] == ["OEV317"]


OBS = {"min_watch_interval_ms": 10, "max_watch_interval_ms": 1000, "default_watch_interval_ms": 100,
       "default_heartbeat_ms": 500, "per_rank": False, "change_driven": False, "max_watchers": 4}


@pytest.mark.parametrize("request_fields,expected", [
    ({}, (100, 500, True, False)),
    ({"interval_ms": 5}, (10, 500, True, False)),
    ({"interval_ms": 5000, "heartbeat_ms": 0}, (1000, 0, True, False)),
    ({"interval_ms": 0, "per_rank": True, "initial_snapshot": False}, (10, 500, False, False)),
])
def test_effective_settings(request_fields, expected):
    got = effective_watch_settings(OBS, load_pb2.WatchLoadRequest(**request_fields))
    assert (got["interval_ms"], got["heartbeat_ms"], got["initial_snapshot"], got["per_rank"]) == expected


def test_settings_must_be_the_effective_values():
    request = load_pb2.WatchLoadRequest(interval_ms=5)
    assert ids(run([settings(interval=5, heartbeat=500)], observability=OBS, request=request)) == ["OEV316"]
    assert ids(run([settings(interval=10, heartbeat=500)], observability=OBS, request=request)) == []
    # without the request: ranges only
    assert ids(run([settings(interval=0, heartbeat=500)], observability=OBS)) == ["OEV316"]
    assert ids(run([settings(interval=20, heartbeat=500, per_rank=True)], observability=OBS)) == ["OEV316"]
    assert ids(run([settings(interval=20, heartbeat=500)], observability=OBS)) == []


def test_totals_must_be_the_sums_of_the_ranks():
    """REQ-LOAD-023, on a stream and on a GetLoad answer alike."""
    from openengine.validate import RANK_SUMMED_FIELDS, check_load

    good = snapshot(1, 1, ranks=2)
    load = good.snapshot.load
    load.ranks[0].used_kv_blocks, load.ranks[1].used_kv_blocks, load.used_kv_blocks = 0, 3, 3
    load.ranks[0].total_kv_blocks, load.ranks[1].total_kv_blocks, load.total_kv_blocks = 50, 50, 100
    load.ranks[0].running_requests, load.ranks[1].running_requests, load.running_requests = 1, 2, 3
    load.ranks[0].queued_requests, load.ranks[1].queued_requests, load.queued_requests = 0, 0, 0
    assert ids(run([settings(per_rank=True), good])) == []
    assert check_load(load) == []
    for name in RANK_SUMMED_FIELDS:
        bad = server_pb2.LoadInfo()
        bad.CopyFrom(load)
        setattr(bad, name, getattr(bad, name) + 1)
        found = check_load(bad, "load")
        assert [(v.rule_id, v.path, v.requirement) for v in found] == [("OEV321", f"load.{name}", "REQ-LOAD-023")]
    # The case: the total counts a prefix-cache block the only rank does not.
    msg = snapshot(1, 1, ranks=1)
    msg.snapshot.load.used_kv_blocks = 1
    msg.snapshot.load.ranks[0].used_kv_blocks = 0
    assert ids(run([settings(per_rank=True), msg])) == ["OEV321"]
    # A figure upstream's optional fields leave unreported is not added up.
    msg.snapshot.load.ranks[0].ClearField("used_kv_blocks")
    assert ids(run([settings(per_rank=True), msg])) == []
    # Without ranks there is nothing to add up.
    assert check_load(server_pb2.LoadInfo(used_kv_blocks=7)) == []


def test_keep_bounds_the_violations_a_checker_holds():
    """A stream watched for days: the checker holds the latest `keep`, and still returns each."""
    checker = WatchLoadChecker(instance_id="e1", keep=3, clock=lambda: 0.0)
    assert checker.feed(settings(interval=100), 0.0) == []
    returned = []
    for seq in range(1, 11):
        returned += checker.feed(snapshot(seq, seq * 100, coalesced=seq), 0.0)
    assert [v.rule_id for v in returned] == ["OEV315"] * 10
    assert [v.value for v in checker.violations] == [8, 9, 10]
