"""`make bench`: run every benchmark and write bench/results.json and bench/results.md.

    python -m bench.run                                  # everything: the only writer of bench/results.md
    python -m bench.run --only fleet,fanout --out /tmp/b # some sections, written elsewhere
    python -m bench.run --quick --out /tmp/b             # tiny sizes, short windows, few rounds (a smoke run)

Every goal is judged from rounds (bench/figures.py): each ratio is measured ROUNDS times, the two
sides alternating, and reported as the median with its spread. A goal is met when the whole
spread satisfies it, missed when none of it does, and inconclusive when it lies inside the spread.
Each section is the module of its name, whose `run(quick)` returns its Section.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import sys
import time
from pathlib import Path

from bench.figures import (INCONCLUSIVE, MET, MISSED, Figure, Section, figure_table, format_value, machine,
                           spread_text)
from bench.measure import loadavg

HERE = Path(__file__).resolve().parent
SECTIONS = ("fleet", "fanout", "sdk", "toolkit", "validators", "watchers", "llama", "reliability")


def verdict_line(figures: list[Figure]) -> str:
    """`54 goals: 50 met, 1 missed, 3 inconclusive. Missed: ... Inconclusive: ...`"""
    goals = [f for f in figures if f.verdict is not None]
    named = {v: [f for f in goals if f.verdict == v] for v in (MET, MISSED, INCONCLUSIVE)}
    out = (f"{len(goals)} goals: {len(named[MET])} met, {len(named[MISSED])} missed, "
           f"{len(named[INCONCLUSIVE])} inconclusive.")
    for v in (MISSED, INCONCLUSIVE):
        if named[v]:
            out += f" {v.capitalize()}: " + ", ".join(
                f"`{f.name}` ({format_value(f.value)}" + (f", spread {spread_text(f)}" if spread_text(f) else "")
                + f", goal {f.goal})" for f in named[v]) + "."
    return out


def write_markdown(path: Path, meta: dict, sections: list[Section]) -> None:
    m = meta["machine"]
    out = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m bench.run`) from one whole run on the machine below. Every ratio "
        "is measured in interleaved rounds (the two sides alternately) and reported as the median of the "
        "rounds with its spread (the interquartile range); a goal is met when the whole spread satisfies "
        "it, missed when none of it does, and inconclusive when the goal lies inside the spread. Do not "
        "edit by hand: re-run instead. How the figures are taken: [NOTES.md](NOTES.md).",
        "",
        "| | |", "|---|---|",
        f"| date | {meta['date']} |",
        f"| machine | {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB |",
        f"| software | Python {m['python']}, grpcio {m['grpcio']}, {m['os']} |",
        f"| commit | {m['commit'] or 'n/a'} |",
        f"| load average at start / end | {meta['loadavg_start']} / {meta['loadavg_end']} |",
        f"| run time | {meta['seconds']:.0f} s |",
        "",
        f"**{verdict_line([f for s in sections for f in s.figures])}**",
        "",
    ]
    for s in sections:
        out += [f"## {s.title}", "", *figure_table(s.figures), ""]
        if s.discussion:
            out += [s.discussion, ""]
    path.write_text("\n".join(out))


def write_json(path: Path, meta: dict, sections: list[Section]) -> None:
    doc = {**meta, "sections": [s.title for s in sections],
           "figures": [f.as_dict() for s in sections for f in s.figures]}
    path.write_text(json.dumps(doc, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated: {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, short windows and fewer rounds")
    parser.add_argument("--out", default=str(HERE), help="directory for results.md and results.json")
    args = parser.parse_args(argv)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    out = Path(args.out)
    if (args.quick or set(wanted) != set(SECTIONS)) and out.resolve() == HERE:
        parser.error("bench/results.md comes from a whole run only; give a partial or --quick run "
                     "its own --out DIR")
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "loadavg_start": loadavg(), "quick": args.quick}
    start = time.monotonic()
    sections: list[Section] = []
    for name in wanted:
        t0 = time.monotonic()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        sections.append(importlib.import_module(f"bench.{name}").run(args.quick))
        print(f"bench: {name} done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    meta["seconds"] = time.monotonic() - start
    meta["loadavg_end"] = loadavg()
    write_json(out / "results.json", meta, sections)
    write_markdown(out / "results.md", meta, sections)
    figures = [f for s in sections for f in s.figures]
    print(f"bench: wrote {out / 'results.md'}: {verdict_line(figures)}", file=sys.stderr)
    # A missed goal is a regression the spread cannot explain; an inconclusive one is not.
    return 1 if any(f.verdict == MISSED for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
