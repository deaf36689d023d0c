"""The toolkit's own speed: oespec check / generate / breaking beside buf lint / build / breaking
on the same inputs, each a whole command as a maintainer runs it (process start included)."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.figures import QUICK_ROUNDS, ROUNDS, Section, at_most, info, interleaved

try:
    from oespec.buildcache import DISABLE_ENV
except ImportError:   # no cache to switch off: every run is cold
    DISABLE_ENV = None

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _once(cmd: list[str], cwd: Path, env: dict | None = None, *, check: bool = False) -> float:
    """Wall time of one run of a whole command (`check`: it must succeed, or its time means nothing)."""
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=check)
    return time.perf_counter() - start


def _median(values) -> float:
    return round(statistics.median(values), 3)


def _baseline_repo(tmp: Path) -> Path:
    """A copy of the working tree as a one-commit git repository, so both breaking checks compare
    the same two trees."""
    repo = tmp / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".venv", ".git", "build", "__pycache__",
                                                                 "node_modules", ".hypothesis"))
    commit = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "baseline"]
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], commit):
        subprocess.run(cmd, cwd=repo, check=True, stdout=subprocess.DEVNULL)
    return repo


def run(quick: bool = False) -> Section:
    rounds = QUICK_ROUNDS if quick else ROUNDS
    section = Section("Toolkit speed")
    oespec, buf = str(BIN / "oespec"), str(BIN / "buf")
    cold_env = {**os.environ, DISABLE_ENV: "1"} if DISABLE_ENV else None
    g = "toolkit"
    with tempfile.TemporaryDirectory(prefix="oespec-bench-") as tmp:
        repo = _baseline_repo(Path(tmp))
        pairs = [
            ("check", [oespec, "check"], [buf, "lint", "proto"], 2.0,
             "oespec check (schema, rules and the descriptor cross-check) against buf lint"),
            ("generate", [oespec, "generate", "--check"], [buf, "build", "proto", "-o", os.devnull], 3.0,
             "oespec generate --check (check the registry, plan and render every generated file, compile the "
             "protos once) against buf build"),
            ("breaking", [oespec, "breaking", "--against", "HEAD"],
             [buf, "breaking", "proto", "--against", ".git#ref=HEAD,subdir=proto"], 1.5,
             "the whole oespec breaking (buf breaking plus the registry rules) against buf breaking alone"),
        ]
        for name, ours, theirs, goal, what in pairs:
            # check and generate keep work in build/oespec-cache: their run without it is a third side.
            sides = ("ours", "buf", "cold") if cold_env and name != "breaking" else ("ours", "buf")
            commands = {"ours": (ours, None), "buf": (theirs, None), "cold": (ours, cold_env)}
            for side in sides:   # a warm-up run of each
                _once(commands[side][0], repo, commands[side][1], check=True)
            times = interleaved(lambda side: _once(commands[side][0], repo, commands[side][1]), sides, rounds)
            section.figures += [
                info(f"toolkit.{name}.oespec_s", _median(t[0] for t in times), "s", group=g),
                info(f"toolkit.{name}.buf_s", _median(t[1] for t in times), "s", group=g),
                at_most(f"toolkit.{name}.ratio", [t[0] / t[1] for t in times], goal, group=g, note=what,
                        digits=2)]
            if "cold" in sides:
                section.figures.append(info(
                    f"toolkit.{name}.cold_ratio", _median(t[2] / t[1] for t in times), "ratio", group=g,
                    note=f"the same with {DISABLE_ENV}=1 (nothing reused from build/), median round"))
        section.figures += scaling_figures(Path(tmp), rounds)
    section.discussion = (f"Wall time of each whole command in {rounds} interleaved rounds after a warm-up, "
                          "on a copy of this repository; each ratio is judged from its rounds. Method and "
                          "history: bench/NOTES.md.")
    return section


def _synthetic_registry(path: Path, profiles: int) -> Path:
    """The checkout's registry plus `profiles` vendor profiles, each with one RPC and requiring the core."""
    entries = [(ROOT / "profiles.yaml").read_text(encoding="utf-8").rstrip("\n"), ""]
    for i in range(profiles):
        entries.append(
            f"  - name: vendor.p{i}\n    version: \"1.0\"\n    scope: engine\n    summary: Synthetic {i}.\n"
            f"    description: Synthetic.\n    history:\n      - version: \"1.0\"\n        changes: First version.\n"
            f"    rpcs:\n      - name: vendor.v1.S{i}/Call\n        request: Call{i}Request\n"
            f"        response: Call{i}Response\n        streaming: unary\n        since: \"1.0\"\n"
            f"        description: A call.\n    requires:\n      - profile: openengine.core\n"
            f"        version: \">= 1.0\"\n")
    path.write_text("\n".join(entries), encoding="utf-8")
    return path


def scaling_figures(tmp: Path, rounds: int) -> list:
    """oespec check on 2,000 added profiles against 1,000: linear rules keep the ratio near 2."""
    oespec = str(BIN / "oespec")
    registries = {count: _synthetic_registry(tmp / f"profiles-{count}.yaml", count) for count in (1000, 2000)}

    def check(count: int) -> float:
        return _once([oespec, "check", str(registries[count]), "--no-contract", "--no-head"], tmp, check=True)
    check(1000)
    times = interleaved(check, (1000, 2000), rounds)
    return [info("toolkit.check.profiles_1000_s", _median(a for a, _ in times), "s", group="toolkit"),
            info("toolkit.check.profiles_2000_s", _median(b for _, b in times), "s", group="toolkit"),
            at_most("toolkit.check.scaling_ratio", [b / a for a, b in times], 2.0, group="toolkit", digits=2,
                    note="oespec check of a registry with 2,000 added profiles against one with 1,000, per round")]
