"""A copy of the working tree to run the project's own commands in (make, .ci/pull-request), so a
test can change files, build and commit without touching the repository or racing other tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tree_files() -> list[str]:
    """Tracked and new (not ignored) files: what a clone of this change would hold."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


# What `make setup` installs from; older than its stamp in a copy, so make never reinstalls.
INSTALL_INPUTS = ("requirements.txt", "pyproject.toml")
STAMP = ROOT / ".venv" / ".installed"


def copy_tree(dst: Path) -> Path:
    """The working tree's files under `dst`, sharing the repository's .venv (its editable install
    is overridden by PYTHONPATH, see `env_for`). make in the copy must never reinstall into that
    .venv (it would point the editable install and the scripts at the copy), so the install inputs
    are dated before the .venv's stamp."""
    if not STAMP.is_file():
        pytest.skip("the .venv is not set up (run `make setup`)")
    for rel in _tree_files():
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    before = STAMP.stat().st_mtime - 60
    for name in INSTALL_INPUTS:
        os.utime(dst / name, (before, before))
    (dst / ".venv").symlink_to(ROOT / ".venv")
    return dst


def env_for(tree: Path, **extra: str) -> dict[str, str]:
    """The environment to run commands in a copied tree: its own sources first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
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


@pytest.fixture
def tree(tmp_path) -> Path:
    return copy_tree(tmp_path / "repo")


@pytest.fixture
def git_tree(tree) -> Path:
    """The copied tree as a git repository whose `main` is the working tree as it is now."""
    git(tree, "init", "-q", "-b", "main")
    (tree / ".git" / "info" / "exclude").write_text(".venv\n", encoding="utf-8")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "base")
    git(tree, "checkout", "-q", "-b", "change")
    return tree
