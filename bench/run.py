"""`make bench`: run every benchmark and write bench/results.json, bench/results.md and the plots
in bench/plots/.

    python -m bench.run                                  # everything: the only writer of bench/results.md
    python -m bench.run --only fleet,fanout --out /tmp/b # some sections, written elsewhere
    python -m bench.run --quick --out /tmp/b             # tiny sizes, short windows, few rounds (a smoke run)

Every goal is judged from rounds (bench/figures.py): each ratio is measured ROUNDS times, the two
sides alternating, and reported as the median with its spread. A goal is met when the whole
spread satisfies it, missed when none of it does, and inconclusive when it lies inside the spread.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import math
import os
import sys
import time
from pathlib import Path

from bench import soak, svg, testsuite
from bench.figures import INCONCLUSIVE, MET, MISSED, QUICK_ROUNDS, ROUNDS, Figure, Section, figure_table, format_value, machine, spread_text
from bench.measure import loadavg, tcp_header_bytes

HERE = Path(__file__).resolve().parent
SECTIONS = ("fleet", "fanout", "sdk", "toolkit", "validators", "watchers", "llama", "reliability")


def figure_record(f: Figure) -> dict:
    """The results.json record of one figure: {name, value, unit, goal, verdict, met, low, high, rounds}
    (+ group, note); JSON has no infinity or NaN, so a value that is not finite is null."""
    d = f.as_dict()
    for key in ("value", "low", "high"):
        if not (isinstance(d[key], (int, float)) and math.isfinite(d[key])):
            d[key] = None
    return d


def from_record(d: dict, group: str) -> Figure:
    """A figure from a plain {name, value, unit, goal, verdict, low, high, rounds} mapping
    (bench/validators.py)."""
    return Figure(d["name"], d["value"], d.get("unit", ""), d.get("goal") or "", d.get("verdict"),
                  group=d.get("group", group), note=d.get("note", ""), low=d.get("low"), high=d.get("high"),
                  rounds=d.get("rounds", 1))


# -- sections ---------------------------------------------------------------------------------

def fleet_section(quick: bool, plots: Path) -> Section:
    from bench import fleet

    if quick:
        section, results = fleet.run((2, 4), window_s=1.5, idle_s=0.5, rounds=QUICK_ROUNDS)
    else:
        section, results = fleet.run((10, 50, 200), window_s=4.0, idle_s=3.0, rounds=ROUNDS)
    xs = [r.engines for r in results]
    if len(xs) > 1:
        cpu = {
            "WatchLoad scheduler": [(r.engines, r.modes["watch"].client_cpu_pct()) for r in results],
            "polling scheduler": [(r.engines, r.modes["poll"].client_cpu_pct()) for r in results],
            "WatchLoad server": [(r.engines, r.server_net_pct("watch")) for r in results],
            "polling server": [(r.engines, r.server_net_pct("poll")) for r in results],
        }
        _plot(plots / "fleet_cpu.svg", "Fleet: CPU against N engines", "engines (N)",
              "CPU, % of one core (server: above idle)", cpu, section, log_x=True)
        stale = {
            "WatchLoad p99": [(r.engines, r.modes["watch"].staleness.quantile_ms(0.99)) for r in results],
            "polling p99": [(r.engines, r.modes["poll"].staleness.quantile_ms(0.99)) for r in results],
            "WatchLoad p50": [(r.engines, r.modes["watch"].staleness.quantile_ms(0.5)) for r in results],
            "polling p50": [(r.engines, r.modes["poll"].staleness.quantile_ms(0.5)) for r in results],
        }
        _plot(plots / "fleet_staleness.svg", "Fleet: staleness against N engines", "engines (N)",
              "staleness (ms)", stale, section, log_x=True)
        hdr = tcp_header_bytes()
        traffic = {
            "WatchLoad": [(r.engines, r.modes["watch"].tcp.on_wire(hdr) / r.modes["watch"].seconds / 1024)
                          for r in results],
            "polling": [(r.engines, r.modes["poll"].tcp.on_wire(hdr) / r.modes["poll"].seconds / 1024)
                        for r in results],
        }
        _plot(plots / "fleet_bytes.svg", "Fleet: bytes on the wire against N engines", "engines (N)",
              "KiB/s (incl. TCP/IP headers)", traffic, section, log_x=True)
    return section


def fanout_sections(quick: bool, plots: Path) -> list[Section]:
    from bench import fanout

    if quick:
        fan, limit, pairs = fanout.run((4, 20), window_s=1.0, rounds=QUICK_ROUNDS, limit_counts=(20,))
    else:
        fan, limit, pairs = fanout.run((10, 100, 1000), window_s=3.0, rounds=ROUNDS)
    if len(pairs) > 1:
        lag = {
            "p99": [(p.watchers, p.lag_p99_ms) for p, _ in pairs],
            "p99, a tenth stalled": [(p.watchers, s.lag_p99_ms) for p, s in pairs],
            "p50": [(p.watchers, p.lag_p50_ms) for p, _ in pairs],
            "p50, a tenth stalled": [(p.watchers, s.lag_p50_ms) for p, s in pairs],
        }
        _plot(plots / "fanout_lag.svg", "Fan-out: delivery lag against watchers", "watchers",
              "delivery lag (ms)", lag, fan, log_x=True)
    return [fan, limit]


def toolkit_section(quick: bool) -> Section:
    from bench import toolkit

    section = toolkit.run(repeats=QUICK_ROUNDS if quick else ROUNDS)
    section.discussion += "\n\n" + goal_summary(section)
    return section


def validators_section() -> Section:
    from bench import validators

    section = Section("Validators")
    section.figures = [from_record(d, "validators") for d in validators.collect()]
    section.discussion = ("The capability validators against general-purpose JSON Schema validators on the "
                          "same documents, and the WatchLoad checker against parsing the same messages "
                          "(bench/validators.py; method and earlier findings in bench/NOTES.md).")
    section.discussion += "\n\n" + goal_summary(section)
    return section


def goal_summary(section: Section) -> str:
    """One sentence naming each goal of a section and its verdict in this run."""
    goals = [f for f in section.figures if f.verdict is not None]
    if not goals:
        return ""
    parts = [f"`{f.name}` {format_value(f.value)} {f.unit}"
             + (f", spread {spread_text(f)}" if spread_text(f) else "") + f" (goal {f.goal}: {f.verdict})"
             for f in goals]
    return "Against the goals in this run: " + "; ".join(parts) + "."


def verdict_counts(figures: list[Figure]) -> dict[str, int]:
    goals = [f for f in figures if f.verdict is not None]
    return {v: sum(1 for f in goals if f.verdict == v) for v in (MET, MISSED, INCONCLUSIVE)}


def verdict_line(figures: list[Figure]) -> str:
    """`54 goals: 50 met, 1 missed, 3 inconclusive. Missed: ... Inconclusive: ...`"""
    goals = [f for f in figures if f.verdict is not None]
    counts = verdict_counts(figures)
    out = f"{len(goals)} goals: {counts[MET]} met, {counts[MISSED]} missed, {counts[INCONCLUSIVE]} inconclusive."
    for v in (MISSED, INCONCLUSIVE):
        named = [f for f in goals if f.verdict == v]
        if named:
            out += f" {v.capitalize()}: " + ", ".join(
                f"`{f.name}` ({format_value(f.value)}" + (f", spread {spread_text(f)}" if spread_text(f) else "")
                + f", goal {f.goal})" for f in named) + "."
    return out


def _plot(path: Path, title: str, x_label: str, y_label: str, series: dict, section: Section, *,
          log_x: bool = False) -> None:
    clean = {k: [(x, y) for x, y in pts if math.isfinite(y)] for k, pts in series.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg.line_chart(title, x_label, y_label, clean, log_x=log_x))
    section.plots.append(path.name)


# -- output -----------------------------------------------------------------------------------

def write_markdown(path: Path, meta: dict, sections: list[Section], plots_rel: str) -> None:
    figs = [f for s in sections for f in s.figures]
    m = meta["machine"]
    out = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m bench.run`) from one whole run on the machine below. Every ratio "
        "is measured in interleaved rounds (the two sides alternately) and reported as the median of the "
        "rounds with its spread (the interquartile range); a goal is met when the whole spread satisfies "
        "it, missed when none of it does, and inconclusive when the goal lies inside the spread. Do not "
        "edit by hand: re-run instead.",
        "",
        "| | |", "|---|---|",
        f"| date | {meta['date']} |",
        f"| machine | {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB |",
        f"| software | Python {m['python']}, grpcio {m['grpcio']}, {m['os']} |",
        f"| commit | {m['commit'] or 'n/a'} |",
        f"| load average at start / end | {meta['loadavg_start']} / {meta['loadavg_end']} |",
        f"| run time | {meta['seconds']:.0f} s |",
        "",
        f"**{verdict_line(figs)}**",
        "",
        "All processes share the machine's cores (the benchmark's server and client processes compete "
        "with each other and with anything else running), so absolute times move from run to run; the "
        "ratios compare the two sides round by round, each round taking both one after the other.",
        "",
    ]
    for s in sections:
        out += [f"## {s.title}", "", *figure_table(s.figures), ""]
        if s.discussion:
            out += [s.discussion, ""]
        for p in s.plots:
            out += [f"![{p}]({plots_rel}/{p})", ""]
    path.write_text("\n".join(out))


def write_json(path: Path, meta: dict, sections: list[Section]) -> None:
    doc = {**meta, "sections": [{"title": s.title, "plots": s.plots} for s in sections],
           "figures": [figure_record(f) for s in sections for f in s.figures]}
    path.write_text(json.dumps(doc, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated: {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, short windows and fewer rounds")
    parser.add_argument("--out", default=str(HERE), help="directory for results.md, results.json, plots/")
    args = parser.parse_args(argv)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    out = Path(args.out)
    if (args.quick or set(wanted) != set(SECTIONS)) and out.resolve() == HERE:
        parser.error("bench/results.md comes from a whole run only; give a partial or --quick run "
                     "its own --out DIR")
    plots = out / "plots"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "loadavg_start": loadavg(), "quick": args.quick}
    start = time.monotonic()
    sections: list[Section] = []
    for name in wanted:
        t0 = time.monotonic()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        if name == "fleet":
            sections.append(fleet_section(args.quick, plots))
        elif name == "fanout":
            sections += fanout_sections(args.quick, plots)
        elif name == "toolkit":
            sections.append(toolkit_section(args.quick))
        elif name == "validators":
            sections.append(validators_section())
        elif name == "watchers":
            from bench import watchers

            sections.append(watchers.section(args.quick))
        else:   # sdk, llama, reliability
            sections.append(importlib.import_module(f"bench.{name}").run(args.quick))
        print(f"bench: {name} done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    meta["seconds"] = time.monotonic() - start
    meta["loadavg_end"] = loadavg()
    write_json(out / "results.json", meta, sections)
    write_markdown(out / "results.md", meta, sections, os.path.relpath(plots, out))
    # The test-suite timings and the conformance soak are recorded by their own commands
    # (bench/testsuite.py, bench/soak.py); keep them in results.md.
    results = out / "results.md"
    text = testsuite.with_section(results.read_text(), testsuite.section(testsuite.load_record()))
    results.write_text(soak.with_section(text, soak.load_record()))
    figures = [f for s in sections for f in s.figures]
    print(f"bench: wrote {out / 'results.md'}: {verdict_line(figures)}", file=sys.stderr)
    # A missed goal is a regression the spread cannot explain; an inconclusive one is not.
    return 1 if verdict_counts(figures)[MISSED] else 0


if __name__ == "__main__":
    sys.exit(main())
