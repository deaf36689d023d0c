"""The one record every benchmark reports, and the machine facts printed beside the results."""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable


MET, MISSED, INCONCLUSIVE = "met", "missed", "inconclusive"
# Rounds a ratio is measured in: each round measures both sides, one after the other, so the
# machine's drift reaches both alike, and the spread across rounds shows the noise.
ROUNDS = 5
QUICK_ROUNDS = 2     # a smoke run (--quick) only shows the machinery works; its verdicts mean little


@dataclass
class Figure:
    """One measured number, with the goal it is judged against (`verdict` is None without a
    goal). A figure measured in rounds reports their median as `value` and their spread as
    `low`..`high`; a figure measured once has no spread (`low` == `high` == `value`)."""

    name: str
    value: float
    unit: str
    goal: str = ""
    verdict: str | None = None
    group: str = ""
    note: str = ""
    low: float | None = None
    high: float | None = None
    rounds: int = 1

    @property
    def met(self) -> bool | None:
        """True when met, False when missed or inconclusive, None without a goal."""
        return None if self.verdict is None else self.verdict == MET

    def as_dict(self) -> dict:
        """The results.json record; JSON has no infinity or NaN, so a number that is not finite is null."""
        d = {**asdict(self), "met": self.met}
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in d.items()}


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high) of per-round values: the interquartile range from four rounds on (a
    round disturbed by something else on the machine falls outside it), the whole range below."""
    ordered = sorted(values)
    median = statistics.median(ordered)
    if len(ordered) >= 4:
        low, _, high = statistics.quantiles(ordered, n=4, method="inclusive")
        return median, low, high
    return median, ordered[0], ordered[-1]


def verdict(low: float, high: float, within: Callable[[float], bool]) -> str:
    """Met when the whole spread satisfies the goal, missed when none of it does, inconclusive
    when the goal lies inside the spread: the machine's noise alone could decide it."""
    inside = within(low), within(high)
    if all(inside):
        return MET
    return INCONCLUSIVE if any(inside) else MISSED


def _judged(name: str, measured, unit: str, goal: str, within: Callable[[float], bool], kw: dict) -> Figure:
    digits = kw.pop("digits", 3)
    values = list(measured) if isinstance(measured, (list, tuple)) else [measured]
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return Figure(name, float("nan"), unit, goal, MISSED, rounds=len(values), **kw)
    median, low, high = spread(finite)
    shown = (lambda v: round(v, digits)) if isinstance(median, float) else (lambda v: v)
    judged = verdict(low, high, within) if len(finite) == len(values) else MISSED
    return Figure(name, shown(median), unit, goal, judged, low=shown(low), high=shown(high),
                  rounds=len(values), **kw)


def at_most(name: str, measured, limit: float, unit: str = "ratio", **kw) -> Figure:
    """A goal `value <= limit`; `measured` is one value or the values of several rounds."""
    return _judged(name, measured, unit, f"<= {limit:g}", lambda v: v <= limit, kw)


def at_least(name: str, measured, limit: float, unit: str = "ratio", **kw) -> Figure:
    """A goal `value >= limit`; `measured` is one value or the values of several rounds."""
    return _judged(name, measured, unit, f">= {limit:g}", lambda v: v >= limit, kw)


def info(name: str, value: float, unit: str, **kw) -> Figure:
    return Figure(name, value, unit, **kw)


def ratio(top: float, bottom: float) -> float:
    """`top / bottom`, infinite when `bottom` is zero."""
    return top / bottom if bottom else float("inf")


def interleaved(measure: Callable[[str], float], sides: tuple, rounds: int = ROUNDS) -> list[tuple]:
    """`rounds` tuples of `measure(side)`, one per side in the order of `sides`; odd rounds measure
    the sides in reverse order, so that none always runs on a warmer (or busier) machine."""
    out = []
    for i in range(rounds):
        order = sides if i % 2 == 0 else sides[::-1]
        got = {side: measure(side) for side in order}
        out.append(tuple(got[side] for side in sides))
    return out


def quantile(sorted_values: list[int] | list[float], q: float) -> float:
    """Nearest-rank quantile (q in (0, 1]) of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def median_round(runs: list, key: Callable):
    """The round whose `key` is the median, for the figures that describe rather than judge."""
    return sorted(runs, key=key)[(len(runs) - 1) // 2]


def format_value(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v:,}"


def spread_text(f: Figure) -> str:
    """`low..high (n rounds)` of a figure measured in rounds; empty for one measurement."""
    if f.rounds < 2 or f.low is None:
        return ""
    return f"{format_value(f.low)}..{format_value(f.high)} ({f.rounds} rounds)"


def figure_table(figures: list[Figure]) -> list[str]:
    """The results.md table of `figures`, one line each: the median, its spread and the verdict."""
    lines = ["| figure | value | spread | unit | goal | verdict | note |", "|---|---:|---|---|---|---|---|"]
    for f in figures:
        mark = {None: "", MET: "met", MISSED: "**missed**", INCONCLUSIVE: "*inconclusive*"}[f.verdict]
        lines.append(f"| `{f.name}` | {format_value(f.value)} | {spread_text(f)} | {f.unit} | {f.goal} | {mark} "
                     f"| {f.note} |")
    return lines


@dataclass
class Section:
    """A benchmark's figures plus what they mean and what limits them (written to results.md)."""

    title: str
    figures: list[Figure] = field(default_factory=list)
    discussion: str = ""


def machine() -> dict:
    """The machine and software a run was taken on (the benchmark reads Linux's /proc throughout)."""
    import grpc

    cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    return {"cpu": names[0] if names else platform.machine(), "cores": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version(), "grpcio": grpc.__version__, "os": platform.platform(),
            "commit": commit.strip()}
