"""The registry and protos as the last commit (git HEAD) has them, for the rule that asks for a
`registry.revision` bump before a change is committed (REQ-VER-006). Only git plumbing that works
offline is used; outside a git checkout, or when git is missing, there is no last commit to read
and the rule does not run."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from openengine.contractkit.yamlsource import SourceError, SourceFile, YMap, parse_text


@dataclass(frozen=True)
class LastCommit:
    revision: int | None          # registry.revision at HEAD; None when HEAD has no such registry
    changed: tuple[str, ...]      # paths (relative to the repository) that differ from HEAD


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None


def last_commit_state(registry: Path, proto_root: Path | None = None, *,
               current: SourceFile | None = None) -> LastCommit | None:
    """What differs from HEAD among the registry and (when given) the proto tree, and HEAD's
    revision. None outside a git checkout or before the first commit. `current` is the registry
    as already parsed: when HEAD holds the same text, its tree is reused instead of parsed again."""
    folder = registry.resolve().parent
    top = _git(["rev-parse", "--show-toplevel"], folder)
    if top is None or top.returncode != 0:
        return None
    root = Path(top.stdout.strip())
    try:
        rel = Path(os.path.relpath(registry.resolve(), root)).as_posix()
    except ValueError:
        return None
    paths = [rel]
    if proto_root is not None and proto_root.is_dir():
        paths.append(Path(os.path.relpath(proto_root.resolve(), root)).as_posix())
    status = _git(["status", "--porcelain", "--untracked-files=all", "--", *paths], root)
    shown = _git(["show", f"HEAD:{rel}"], root)
    if status is None or status.returncode != 0 or shown is None:
        return None
    changed = tuple(sorted(line[3:].strip() for line in status.stdout.splitlines() if line.strip()))
    revision = None
    if shown.returncode == 0:
        if current is not None and current.text == shown.stdout:
            doc = current.root
        else:
            try:
                doc = parse_text(shown.stdout, f"HEAD:{rel}").root
            except SourceError:
                doc = None
        header = doc.get("registry") if isinstance(doc, YMap) else None
        value = header.plain().get("revision") if isinstance(header, YMap) else None
        revision = value if isinstance(value, int) and not isinstance(value, bool) else None
    return LastCommit(revision, changed)
