"""Materialize the baseline: the registry and proto tree as they are at a git ref, in a directory.

Only git plumbing that works offline is used (`rev-parse`, `ls-tree`, `archive`), and only the
paths that exist at the ref are asked for, so a baseline from before the protos (or the registry)
existed is simply empty there.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path


class BaselineError(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class Baseline:
    registry: Path | None     # the extracted registry, None when the ref has none
    proto: Path | None        # the extracted proto root, None when the ref has none


def _git(args: list[str], cwd: Path, *, binary: bool = False) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=not binary, timeout=120)
    except FileNotFoundError:
        raise BaselineError("git is not installed", "install git; the baseline is read from the repository") from None
    except subprocess.TimeoutExpired:
        raise BaselineError(f"git {args[0]} did not finish") from None


def repo_root(start: Path) -> Path:
    proc = _git(["rev-parse", "--show-toplevel"], start)
    if proc.returncode != 0:
        raise BaselineError(f"{start} is not inside a git repository",
                            "run oespec breaking from a clone of the repository")
    return Path(proc.stdout.strip())


def resolve_ref(ref: str, repo: Path) -> str:
    if not ref or ref.startswith("-"):
        raise BaselineError(f"{ref!r} is not a git ref", "pass a branch, tag or commit, e.g. --against origin/main")
    proc = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], repo)
    if proc.returncode != 0:
        raise BaselineError(f"unknown git ref {ref!r}",
                            "fetch it first (in CI: actions/checkout with fetch-depth: 0), "
                            "or pass a branch, tag or commit that exists")
    return proc.stdout.strip()


def materialize(ref: str, *, repo: Path, registry_rel: str, proto_rel: str, dest: Path) -> Baseline:
    """Extract `registry_rel` and `proto_rel` (paths relative to the repository) as of `ref`."""
    commit = resolve_ref(ref, repo)
    listing = _git(["ls-tree", "--name-only", commit, "--", registry_rel, proto_rel], repo)
    if listing.returncode != 0:
        raise BaselineError(f"cannot list {ref}: {listing.stderr.strip()}")
    present = [p for p in listing.stdout.splitlines() if p]
    if present:
        archive = _git(["archive", "--format=tar", commit, "--", *present], repo, binary=True)
        if archive.returncode != 0:
            raise BaselineError(f"cannot read {', '.join(present)} at {ref}: "
                                f"{archive.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(dest, filter="data")
    registry = dest / registry_rel
    proto = dest / proto_rel
    return Baseline(registry if registry.is_file() else None, proto if proto.is_dir() else None)
