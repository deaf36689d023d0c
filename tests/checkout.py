"""A checkout of the project to run its own commands in (make, .ci/pull-request, oespec), so a test
can change files, build and commit without touching the repository or racing other tests.

The working tree is copied once per run into a git repository whose `main` is the tree as it is
now (`shared_checkout`, a session fixture of tests/conftest.py); each test that needs a tree of
its own clones it, which takes a fraction of a copy. Every copy shares the repository's .venv; its
editable install is overridden by PYTHONPATH (`env_for`)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
# What `make setup` and `make llama` install from, and the stamp that says each is installed.
INSTALLED = {"requirements.txt": ".installed", "pyproject.toml": ".installed",
             "requirements-llama.txt": ".llama-installed"}
# The install test's wheels (`make wheelhouse`), a prerequisite of `make test` like the venv.
WHEELHOUSE = ROOT / "build" / "wheelhouse"


class NotSetUp(Exception):
    """The repository's .venv is not set up with `make setup llama`."""


def _tree_files() -> list[str]:
    """Tracked and new (not ignored) files: what a clone of this change would hold."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def env_for(tree: Path, **extra: str) -> dict[str, str]:
    """The environment to run commands in a copied tree: its own sources first on the path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_")) and k not in ("OPENENGINE_REGISTRY", "MAKEFLAGS", "MFLAGS")}
    env.update(PYTHONPATH=str(tree), NO_MKDOCS_2_WARNING="1", **extra)
    return env


def run(args: list[str], tree: Path, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=tree, env=env_for(tree, **extra), capture_output=True, text=True,
                          timeout=timeout)


def git(tree: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.invalid",
                           "-c", "commit.gpgsign=false", *args], cwd=tree, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _share_the_installs(tree: Path) -> None:
    """Link the repository's .venv, and date the install inputs before its stamps: make in the copy
    must never reinstall into that .venv (it would point the editable install at the copy). The
    wheelhouse is linked too once filled, so `make test` in the copy does not download it again."""
    stamps = {name: VENV / stamp for name, stamp in INSTALLED.items()}
    if not all(stamp.is_file() for stamp in stamps.values()):
        raise NotSetUp("the .venv is not set up (run `make setup llama`)")
    before = min(stamp.stat().st_mtime for stamp in stamps.values()) - 60
    for name in INSTALLED:
        os.utime(tree / name, (before, before))
    (tree / ".venv").symlink_to(VENV, target_is_directory=True)
    if (WHEELHOUSE / ".filled").is_file():
        (tree / "build").mkdir(exist_ok=True)
        (tree / "build" / "wheelhouse").symlink_to(WHEELHOUSE, target_is_directory=True)
    (tree / ".git" / "info" / "exclude").write_text(".venv\n", encoding="utf-8")


def once_per_run(tmp_path_factory, name: str, build) -> Path:
    """`build(folder)` run once per test run, even though pytest-xdist gives every worker a session
    of its own: the first worker to ask builds under a lock, the others wait for it and reuse its
    folder, so tests on several workers share one build."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent   # the run's folder, above each worker's own
    folder, done = base / f"shared-{name}", base / f"shared-{name}.done"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)   # what a failed attempt left
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def make_shared_checkout(dst: Path) -> Path:
    """The working tree's files under `dst`, as a git repository whose `main` holds them."""
    for rel in _tree_files():
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    git(dst, "init", "-q", "-b", "main")
    _share_the_installs(dst)
    git(dst, "add", "-A")
    git(dst, "commit", "-q", "-m", "base")
    return dst


def clone(shared: Path, dst: Path, *, branch: str | None = None) -> Path:
    """A tree of its own, cloned from the shared checkout (on `branch`, new, when given)."""
    git(dst.parent, "clone", "-q", str(shared), dst.name)
    _share_the_installs(dst)
    if branch:
        git(dst, "checkout", "-q", "-b", branch)
    return dst
