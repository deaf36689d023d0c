"""The one record every benchmark reports, and the machine facts printed beside the results."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Figure:
    """One measured number, with the goal it is judged against (`met` is None without a goal)."""

    name: str
    value: float
    unit: str
    goal: str = ""
    met: bool | None = None
    group: str = ""
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def at_most(name: str, value: float, limit: float, unit: str = "ratio", **kw) -> Figure:
    return Figure(name, value, unit, f"<= {limit:g}", value <= limit, **kw)


def at_least(name: str, value: float, limit: float, unit: str = "ratio", **kw) -> Figure:
    return Figure(name, value, unit, f">= {limit:g}", value >= limit, **kw)


def info(name: str, value: float, unit: str, **kw) -> Figure:
    return Figure(name, value, unit, **kw)


def ratio(top: float, bottom: float) -> float:
    """`top / bottom`, infinite when `bottom` is zero."""
    return top / bottom if bottom else float("inf")


def format_value(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v:,}"


def figure_table(figures: list[Figure]) -> list[str]:
    """The results.md table of `figures`, one line each."""
    lines = ["| figure | value | unit | goal | met | note |", "|---|---:|---|---|---|---|"]
    for f in figures:
        mark = "" if f.met is None else ("yes" if f.met else "**no**")
        lines.append(f"| `{f.name}` | {format_value(f.value)} | {f.unit} | {f.goal} | {mark} | {f.note} |")
    return lines


@dataclass
class Section:
    """A benchmark's figures plus what they mean and what limits them (written to results.md)."""

    title: str
    figures: list[Figure] = field(default_factory=list)
    discussion: str = ""
    plots: list[str] = field(default_factory=list)


def with_block(text: str, begin: str, end: str, block: str) -> str:
    """`text` with the block between the `begin` and `end` markers replaced by `block` (which
    carries its own markers), or `block` appended when the markers are not there yet. Sections
    recorded by their own commands live in results.md this way, so that `make bench` keeps them."""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1].lstrip("\n")
    return text.rstrip("\n") + "\n\n" + block if block else text


def read_record(path: Path) -> dict | None:
    """A JSON record a benchmark command keeps beside results.md; None when absent or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        pass
    try:
        import grpc

        grpc_version = grpc.__version__
    except ImportError:
        grpc_version = "?"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=False).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "python": platform.python_version(),
        "grpcio": grpc_version,
        "os": platform.platform(),
        "commit": commit,
    }
