"""A stateful checker for WatchLoad streams, fed one message at a time.

Timing is judged two ways: spacing between messages from the server's own timestamps, and
silence from the caller's clock (`tick(now)` / `finish(now)`), because a missing heartbeat is a
message that never arrives.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Mapping

from openengine.validate._rules import Violation, violation

_NS_PER_MS = 1_000_000


def effective_watch_settings(observability: Mapping[str, Any], request=None) -> dict[str, Any]:
    """The settings a server must report for `request` (a WatchLoadRequest, or None for an empty
    one) given the effective `openengine.load` limits (REQ-LOAD-005..010)."""
    least = observability["min_watch_interval_ms"]
    most = observability["max_watch_interval_ms"]
    has = request.HasField if request is not None else (lambda _name: False)
    if has("interval_ms"):
        asked = request.interval_ms
        if asked == 0:
            interval = 0 if observability["change_driven"] else least
        else:
            interval = min(max(asked, least), most)
    else:
        interval = observability["default_watch_interval_ms"]
    if has("heartbeat_ms"):
        asked = request.heartbeat_ms
        heartbeat = 0 if asked == 0 else min(max(asked, least), most)
    else:
        heartbeat = observability["default_heartbeat_ms"]
    initial = request.initial_snapshot if has("initial_snapshot") else True
    per_rank = bool(request is not None and request.per_rank and observability["per_rank"])
    return {"interval_ms": interval, "heartbeat_ms": heartbeat, "initial_snapshot": initial, "per_rank": per_rank}


# LoadInfo totals that REQ-LOAD-023 defines as the sum of the same RankLoadInfo field.
RANK_SUMMED_FIELDS = ("running_requests", "queued_requests", "used_kv_blocks", "total_kv_blocks")


def check_load(load, path: str = "load") -> list[Violation]:
    """One LoadInfo on its own (from GetLoad, or a WatchLoad snapshot): with a per-rank breakdown,
    every total must be the sum of its ranks (REQ-LOAD-023). Upstream's figures are optional: an
    unreported total, or one no rank reports, is not summed."""
    if not load.ranks:
        return []
    out = []
    for name in RANK_SUMMED_FIELDS:
        if not load.HasField(name) or not any(rank.HasField(name) for rank in load.ranks):
            continue
        total = getattr(load, name)
        summed = sum(getattr(rank, name) for rank in load.ranks)
        if total != summed:
            where = f"{path}.{name}" if path else name
            out.append(violation("OEV321", where, total, f"{summed} (the sum over ranks)",
                                 f"{where} is {total} but its {len(load.ranks)} ranks add up to {summed}"))
    return out


class WatchLoadChecker:
    """Judge one WatchLoad stream. Feed every `WatchLoadResponse` in order; call `tick(now)` while
    waiting and `finish(now)` when the stream ends. Violations accumulate in `violations`; each
    call also returns the ones it found; `keep` bounds how many `violations` holds (the latest).

    `instance_id` and `capability_revision` are what discovery reported (ServerInfo); when
    omitted, the settings' values are taken as the reference. `observability` holds the effective
    `openengine.load` limits; with `request` as well the settings must equal the exact effective
    values, without it they must lie in the allowed ranges. Lateness allows `tolerance` (a
    fraction of the period) plus `slack_ms`; earliness allows `early_tolerance` (the same fraction
    unless given) less `early_slack_ms`, so a caller on a busy machine can be strict about spacing,
    which the server's own timestamps measure, and generous about delays. `clock` returns seconds
    on the same timeline as `received_at`.
    """

    def __init__(self, *, instance_id: str | None = None, capability_revision: int | None = None,
                 observability: Mapping[str, Any] | None = None, request=None,
                 tolerance: float = 0.5, slack_ms: float = 50.0,
                 early_tolerance: float | None = None, early_slack_ms: float = 0.0,
                 clock: Callable[[], float] = time.monotonic, keep: int | None = None):
        # The latest `keep` violations (all when None): a long-lived stream must not grow memory.
        self.violations: list[Violation] | deque[Violation] = [] if keep is None else deque(maxlen=keep)
        self.instance_id = instance_id or None
        self.capability_revision = capability_revision
        self.observability = observability
        self.request = request
        self.tolerance = tolerance
        self.slack_ms = slack_ms
        self.early_tolerance = tolerance if early_tolerance is None else early_tolerance
        self.early_slack_ms = early_slack_ms
        self.clock = clock
        self.settings = None            # the WatchLoadSettings, once received
        self.latest = None              # the latest LoadInfo
        self.messages = 0
        self.snapshots = 0
        self.coalesced = 0              # updates the server reported as coalesced, in total
        self.interval_ms = 0
        self.heartbeat_ms = 0
        self.per_rank = False
        self._seq: int | None = None
        self._t: int | None = None              # last message timestamp, ns
        self._load_t: int | None = None         # last snapshot LoadInfo.timestamp, ns
        self._initial_pending = False
        self._last_received: float | None = None
        self._silence_reported = False
        # Bounds in ns on the gaps between snapshots and heartbeats (0: unbounded), from the settings.
        self._early_ns = self._late_ns = self._hb_early_ns = self._hb_late_ns = 0

    def feed(self, msg, received_at: float | None = None) -> list[Violation]:
        """Judge the next message; returns the violations it adds (usually none)."""
        out: list[Violation] = []
        self._last_received = self.clock() if received_at is None else received_at
        self._silence_reported = False
        self.messages += 1
        kind = msg.WhichOneof("kind")
        seq = msg.sequence
        last = self._seq
        if last is None:
            if kind != "settings":
                out.append(violation("OEV301", "kind", kind, "settings",
                                     f"the first message is {kind or 'empty'}, not settings"))
            if seq != 0:
                out.append(violation("OEV303", "sequence", seq, "0", "the first message must have sequence 0"))
            self._seq = seq
        elif seq <= last:
            out.append(violation("OEV304", "sequence", seq, f"> {last}",
                                 f"sequence {seq} does not increase (previous {last})"))
        else:
            if seq != last + 1:
                out.append(violation("OEV305", "sequence", seq, str(last + 1),
                                     f"sequence jumps from {last} to {seq}: {seq - last - 1} message(s) lost"))
            self._seq = seq
        # Zero is no timestamp: the field has no presence, and no engine's clock reads the epoch.
        t = msg.timestamp_unix_nanos
        prev = self._t
        if t:
            if prev is not None:
                if t < prev:
                    out.append(violation("OEV307", "timestamp_unix_nanos", t, f">= {prev}", "the message timestamp goes backwards"))
                elif self._hb_late_ns and t - prev > self._hb_late_ns:
                    out.append(violation("OEV312", "timestamp_unix_nanos", (t - prev) / _NS_PER_MS,
                                         f"<= {self.heartbeat_ms} ms",
                                         f"{(t - prev) / _NS_PER_MS:.0f} ms without a message, more than the "
                                         f"heartbeat of {self.heartbeat_ms} ms"))
        else:
            t = None
            out.append(violation("OEV306", "timestamp_unix_nanos", None, "a timestamp", "the message has no timestamp"))
        if self._initial_pending and kind != "snapshot":
            self._missing_initial(out, kind)
        if kind == "snapshot":
            self._snapshot(msg.snapshot, t, out)
        elif kind == "heartbeat":
            if self.settings is not None:
                if not self.heartbeat_ms:
                    out.append(violation("OEV314", "heartbeat", None, "no heartbeats",
                                         "a heartbeat on a stream whose heartbeats are off"))
                elif t is not None and prev is not None and 0 <= t - prev < self._hb_early_ns:
                    # (a timestamp that went backwards is OEV307 alone)
                    out.append(violation("OEV313", "heartbeat", (t - prev) / _NS_PER_MS,
                                         f">= {self.heartbeat_ms} ms after the previous message",
                                         f"a heartbeat {(t - prev) / _NS_PER_MS:.0f} ms after the previous message"))
        elif kind == "settings":
            if self.settings is not None or self.messages > 1:
                again = " again" if self.settings is not None else ""
                out.append(violation("OEV302", "settings", None, "settings only first",
                                     f"settings sent{again} after the first message"))
            if self.settings is None:
                # Late settings (OEV301 was reported for the first message) are still the only
                # ones the stream has: later messages are judged by them, so one fault is one finding.
                self._settings(msg.settings, out)
        else:
            out.append(violation("OEV320", "kind", None, "settings, snapshot or heartbeat",
                                 "the message carries neither settings, snapshot nor heartbeat"))
        if t is not None and (prev is None or t >= prev):
            self._t = t
        if out:
            self.violations.extend(out)
        return out

    def _snapshot(self, snap, t, out) -> None:
        self._initial_pending = False
        self.snapshots += 1
        load = snap.load
        load_t = load.timestamp_unix_nanos
        if not load_t and not snap.HasField("load"):   # presence asked only when it reads as empty
            out.append(violation("OEV308", "snapshot.load", None, "a LoadInfo", "the snapshot has no load"))
            return
        coalesced = snap.coalesced
        if load_t:
            prev = self._load_t
            if prev is not None:
                if load_t < prev:
                    out.append(violation("OEV307", "snapshot.load.timestamp_unix_nanos", load_t, f">= {prev}",
                                         "the snapshot's load timestamp goes backwards"))
                elif self._early_ns:
                    gap = load_t - prev
                    early = gap < self._early_ns and self.snapshots > 2
                    if early or (gap > self._late_ns and not coalesced):
                        out.append(violation("OEV310" if early else "OEV311", "snapshot.load.timestamp_unix_nanos",
                                             gap / _NS_PER_MS, f"{'>=' if early else '<='} {self.interval_ms} ms",
                                             f"periodic snapshots {gap / _NS_PER_MS:.0f} ms apart, interval is "
                                             f"{self.interval_ms} ms"))
            if prev is None or load_t >= prev:
                self._load_t = load_t
        else:
            out.append(violation("OEV308", "snapshot.load.timestamp_unix_nanos", None, "a timestamp",
                                 "the snapshot's load has no timestamp"))
        iid = load.instance_id
        if not iid:
            out.append(violation("OEV308", "snapshot.load.instance_id", "", "the engine's instance id",
                                 "the snapshot's load has no instance id"))
        elif iid != self.instance_id and self.instance_id is not None:
            out.append(violation("OEV309", "snapshot.load.instance_id", iid, self.instance_id,
                                 f"snapshot instance id {iid!r} differs from {self.instance_id!r}"))
        if coalesced:
            self.coalesced += coalesced
            out.append(violation("OEV315", "snapshot.coalesced", coalesced, "0",
                                 f"{coalesced} update(s) coalesced into this snapshot"))
        if load.ranks:   # the rank rules cost nothing on the common stream without ranks
            if not self.per_rank and self.settings is not None:   # before settings: unknown
                out.append(violation("OEV318", "snapshot.load.ranks", len(load.ranks), "no ranks",
                                     "per-rank breakdown present although the stream's per_rank is false"))
            out.extend(check_load(load, "snapshot.load"))
        self.latest = load

    def _missing_initial(self, out, kind) -> None:
        self._initial_pending = False
        out.append(violation("OEV317", "kind", kind, "snapshot",
                             "the settings promised an initial snapshot, but the next message is "
                             f"{kind or 'missing'}"))

    def _settings(self, settings, out) -> None:
        self.settings = settings
        self.interval_ms = interval = settings.interval_ms
        self.heartbeat_ms = heartbeat = settings.heartbeat_ms
        self.per_rank = settings.per_rank
        self._initial_pending = settings.initial_snapshot
        self._early_ns, self._late_ns = self._bounds_ns(interval)
        self._hb_early_ns, self._hb_late_ns = self._bounds_ns(heartbeat)
        if not settings.instance_id:
            out.append(violation("OEV309", "settings.instance_id", "", self.instance_id or "the engine's instance id",
                                 "the settings carry no instance id"))
        elif self.instance_id is None:
            self.instance_id = settings.instance_id
        elif settings.instance_id != self.instance_id:
            out.append(violation("OEV309", "settings.instance_id", settings.instance_id, self.instance_id,
                                 f"settings instance id {settings.instance_id!r} differs from discovery's {self.instance_id!r}"))
        if self.capability_revision is not None and settings.capability_revision != self.capability_revision:
            out.append(violation("OEV319", "settings.capability_revision", settings.capability_revision,
                                 str(self.capability_revision),
                                 f"the stream opened under capability revision {settings.capability_revision}, "
                                 f"discovery reported {self.capability_revision}"))
        load_limits = self.observability
        if load_limits is None:
            return
        actual = {"interval_ms": interval, "heartbeat_ms": heartbeat, "initial_snapshot": settings.initial_snapshot,
                  "per_rank": settings.per_rank}
        if self.request is not None:
            expected = effective_watch_settings(load_limits, self.request)
            for key, want in expected.items():
                if actual[key] != want:
                    out.append(violation("OEV316", f"settings.{key}", actual[key], str(want),
                                         f"effective {key} should be {want}, the settings say {actual[key]}"))
            return
        least, most = load_limits["min_watch_interval_ms"], load_limits["max_watch_interval_ms"]
        if interval == 0:
            if not load_limits["change_driven"]:
                out.append(violation("OEV316", "settings.interval_ms", 0, f"{least}..{most}",
                                     "interval 0 (change-driven) but the engine does not advertise change_driven"))
        elif not least <= interval <= most and interval != load_limits["default_watch_interval_ms"]:
            out.append(violation("OEV316", "settings.interval_ms", interval, f"{least}..{most}",
                                 f"interval {interval} ms is outside the clamping range {least}..{most}"))
        if heartbeat and not least <= heartbeat <= most and heartbeat != load_limits["default_heartbeat_ms"]:
            out.append(violation("OEV316", "settings.heartbeat_ms", heartbeat, f"0 or {least}..{most}",
                                 f"heartbeat {heartbeat} ms is outside the clamping range {least}..{most}"))
        if settings.per_rank and not load_limits["per_rank"]:
            out.append(violation("OEV316", "settings.per_rank", True, "false",
                                 "per_rank is true but the engine does not advertise per_rank"))

    def _bounds_ns(self, period_ms: int) -> tuple[int, int]:
        """(earliest, latest) gap in ns a period allows; (0, 0) for no period. An early bound of 0
        would switch the check off, so it is at least 1 ns."""
        if not period_ms:
            return 0, 0
        early = max(1, int((period_ms * (1 - self.early_tolerance) - self.early_slack_ms) * _NS_PER_MS))
        return early, int((period_ms * (1 + self.tolerance) + self.slack_ms) * _NS_PER_MS)

    # -- silence ------------------------------------------------------------------------------------
    def _allowed_silence_ms(self) -> float | None:
        """How long the stream may stay silent: its heartbeat (or, without heartbeats, its
        interval) with the tolerance; None while nothing bounds it (no settings, or no period)."""
        period = self.heartbeat_ms or self.interval_ms
        if self.settings is None or not period:
            return None
        return period * (1 + self.tolerance) + self.slack_ms

    @property
    def overdue_at(self) -> float | None:
        """When, on the checker's clock, `tick` would report the stream silent unless a message
        comes first; None while nothing bounds the silence (no settings or message yet)."""
        allowed, last = self._allowed_silence_ms(), self._last_received
        if allowed is None or last is None:
            return None
        return last + allowed / 1000.0

    def tick(self, now: float | None = None) -> list[Violation]:
        """Report a stream that has been silent for longer than it may be. Reported once per silence."""
        allowed, last = self._allowed_silence_ms(), self._last_received
        if allowed is None or last is None or self._silence_reported:
            return []
        now = self.clock() if now is None else now
        silent_ms = (now - last) * 1000.0
        if silent_ms <= allowed:
            return []
        self._silence_reported = True
        period = self.heartbeat_ms or self.interval_ms
        rule = "OEV312" if self.heartbeat_ms else "OEV311"
        what = "heartbeat" if self.heartbeat_ms else "interval"
        found = violation(rule, "heartbeat" if self.heartbeat_ms else "snapshot", round(silent_ms),
                          f"<= {period} ms", f"nothing received for {silent_ms:.0f} ms, the {what} is {period} ms")
        self.violations.append(found)
        return [found]

    def finish(self, now: float | None = None) -> list[Violation]:
        """The stream ended (or the recording did): report what never arrived."""
        found = self.tick(now)
        missing: list[Violation] = []
        if self.messages == 0:
            missing.append(violation("OEV301", "kind", None, "settings", "the stream carried no message at all"))
        elif self._initial_pending:
            self._missing_initial(missing, None)
        self.violations.extend(missing)
        return found + missing
