"""Staleness of a load signal, from two logs that share CLOCK_MONOTONIC (one Linux machine):

- the engines' change log: (engine, k, change time) for the k-th change of each engine;
- the scheduler's observation log: (engine, time, value) for every load value it received.

A change's staleness is the first time the scheduler holds a value >= k for that engine, minus
the change time. It works the same for polling (a later poll shows a larger counter) and for a
coalesced stream (one snapshot can cover several changes)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from bench.figures import quantile


@dataclass
class StalenessResult:
    samples_ns: list[int] = field(default_factory=list)   # one per change seen in time, sorted
    missed: int = 0        # changes in the window never seen before the scheduler stopped watching
    changes: int = 0       # changes in the window

    def quantile_ms(self, q: float) -> float:
        return quantile(self.samples_ns, q) / 1e6


def join(changes: Iterable[tuple[int, int, int]], observations: Iterable[tuple[int, int, int]], *,
         window: tuple[int, int], observed_until: int) -> StalenessResult:
    """Staleness of every change whose time falls in `window` ([start, end) ns).

    `observations` are (engine, time ns, value) in any order. A change not seen by
    `observed_until` counts as missed and adds `observed_until - change time` as a lower bound,
    so a lost update makes the percentiles worse instead of disappearing."""
    seen_at: dict[int, tuple[list[int], list[int]]] = {}
    by_engine: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for engine, t, value in observations:
        by_engine[engine].append((t, value))
    for engine, obs in by_engine.items():
        obs.sort()
        # Running maximum: the first time each counter value (or more) was held.
        times, highest = [], []
        top = -1
        for t, value in obs:
            if value > top:
                top = value
                times.append(t)
                highest.append(value)
        seen_at[engine] = (highest, times)

    result = StalenessResult()
    start, end = window
    for engine, k, t_change in changes:
        if not start <= t_change < end:
            continue
        result.changes += 1
        highest, times = seen_at.get(engine, ([], []))
        i = bisect.bisect_left(highest, k)
        if i < len(highest) and times[i] <= observed_until:
            result.samples_ns.append(max(0, times[i] - t_change))
        else:
            result.missed += 1
            result.samples_ns.append(max(0, observed_until - t_change))
    result.samples_ns.sort()
    return result
