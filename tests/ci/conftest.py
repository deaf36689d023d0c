"""Trees of their own to run the project's own commands in (make, .ci/pull-request): clones of the
run's shared checkout (tests/checkout.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkout import clone, git, run  # noqa: F401  (the tests run and commit in their tree)


@pytest.fixture
def tree(shared_checkout, tmp_path) -> Path:
    return clone(shared_checkout, tmp_path / "repo")


@pytest.fixture
def git_tree(shared_checkout, tmp_path) -> Path:
    """A tree whose `main` is the working tree as it is now, on a new branch `change`."""
    return clone(shared_checkout, tmp_path / "repo", branch="change")
