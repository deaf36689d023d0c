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

from bench.figures import ROUNDS, Section, at_most, info, interleaved, ratio

try:
    from oespec.buildcache import DISABLE_ENV
except ImportError:   # no cache to switch off: every run is cold
    DISABLE_ENV = None

ROOT = Path(__file__).resolve().parents[1]
# Commands that keep work in build/oespec-cache; their run without it is also timed, against the
# goal in seconds when there is one.
COLD = {"check": None, "generate": 1.5} if DISABLE_ENV else {}
BIN = Path(sys.executable).parent


def _once(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[float, int]:
    """Wall time of one run of a whole command, and its exit status."""
    start = time.perf_counter()
    code = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
    return time.perf_counter() - start, code


def _time(cmd: list[str], cwd: Path, repeats: int, env: dict | None = None) -> tuple[list[float], int]:
    """Wall times of `repeats` runs (after one warm-up run), and the last exit status."""
    _once(cmd, cwd, env)
    runs = [_once(cmd, cwd, env) for _ in range(repeats)]
    return [t for t, _ in runs], runs[-1][1]


def _baseline_repo(tmp: Path) -> Path:
    """A copy of the working tree as a one-commit git repository, with one edit on top, so both
    breaking checks compare the same two trees."""
    repo = tmp / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".venv", ".git", "build", "__pycache__",
                                                                 "site", "node_modules", ".hypothesis"))
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "baseline"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
    return repo


def run(repeats: int = ROUNDS) -> Section:
    section = Section("Toolkit speed")
    oespec, buf = str(BIN / "oespec"), str(BIN / "buf")
    with tempfile.TemporaryDirectory(prefix="oespec-bench-") as tmp:
        repo = _baseline_repo(Path(tmp))
        pairs = [
            ("check", [oespec, "check"], [buf, "lint", "proto"], 2.0,
             "oespec check (schema, rules and the descriptor cross-check) against buf lint"),
            ("generate", [oespec, "generate", "--check"], [buf, "build", "proto", "-o", os.devnull], 3.0,
             "oespec generate --check (check the registry, plan and render every generated file, compile the protos once) against buf build"),
            ("breaking", [oespec, "breaking", "--against", "HEAD"],
             [buf, "breaking", "proto", "--against", ".git#ref=HEAD,subdir=proto"], 1.5,
             "the whole oespec breaking (buf breaking plus the registry rules) against buf breaking alone"),
        ]
        cold_env = {**os.environ, DISABLE_ENV: "1"} if DISABLE_ENV else None
        for name, ours, theirs, goal, what in pairs:
            if name in COLD:   # first, while build/ holds nothing the warm runs would leave
                cold, _ = _time(ours, repo, repeats, env=cold_env)
                cold_note = f"{DISABLE_ENV}=1: nothing reused from build/, {repeats} runs"
                section.figures.append(
                    at_most(f"toolkit.{name}.oespec_cold_s", cold, COLD[name], "s", group="toolkit", note=cold_note)
                    if COLD[name] else
                    info(f"toolkit.{name}.oespec_cold_s", round(statistics.median(cold), 3), "s", group="toolkit",
                         note=cold_note))
            _once(ours, repo)
            _once(theirs, repo)
            rounds = interleaved(lambda cmd: _once(cmd, repo), (ours, theirs), repeats)
            t_ours = statistics.median(o for (o, _), _ in rounds)
            t_theirs = statistics.median(t for _, (t, _) in rounds)
            code_ours = rounds[-1][0][1]
            section.figures.append(info(f"toolkit.{name}.oespec_s", round(t_ours, 3), "s", group="toolkit"))
            section.figures.append(info(f"toolkit.{name}.buf_s", round(t_theirs, 3), "s", group="toolkit"))
            note = what + ("" if code_ours in (0, 1) else f" (oespec exited {code_ours})")
            section.figures.append(at_most(f"toolkit.{name}.ratio", [ratio(o, t) for (o, _), (t, _) in rounds], goal,
                                           group="toolkit", note=note, digits=2))
        section.figures += scaling_figures(Path(tmp), repeats)
    section.discussion = (f"Wall time of each whole command in {repeats} rounds after a warm-up, ours and buf's "
                          "alternating, on a copy of this repository; each ratio is judged from its rounds. "
                          + (f"The cold figures set {DISABLE_ENV}=1. " if DISABLE_ENV else "")
                          + "Method and history: bench/NOTES.md.")
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


def scaling_figures(tmp: Path, repeats: int) -> list:
    """oespec check on 2,000 added profiles against 1,000: linear rules keep the ratio near 2."""
    oespec = str(BIN / "oespec")
    registries = {count: _synthetic_registry(tmp / f"profiles-{count}.yaml", count) for count in (1000, 2000)}

    def check(count: int) -> float:
        return _once([oespec, "check", str(registries[count]), "--no-contract", "--no-head"], tmp)[0]
    check(1000)
    rounds = interleaved(check, (1000, 2000), repeats)
    return [info("toolkit.check.profiles_1000_s", round(statistics.median(a for a, _ in rounds), 3), "s", group="toolkit"),
            info("toolkit.check.profiles_2000_s", round(statistics.median(b for _, b in rounds), 3), "s", group="toolkit"),
            at_most("toolkit.check.scaling_ratio", [b / a for a, b in rounds], 2.0, group="toolkit", digits=2,
                    note="oespec check of a registry with 2,000 added profiles against one with 1,000, per round")]


if __name__ == "__main__":
    for f in run().figures:
        print(f.as_dict())
