"""Fixture cases stored as a shared base plus an edit (a unified diff), built into real files.

`tests/data/breaking/<case>/`: `baseline.diff` (optional, against `breaking/base/`) and
`current.diff` (against the case's baseline); `tests/data/registry/invalid/<case>/profiles.diff`
(against `registry/valid/minimal/`). A diff may touch several files and create new ones
(`--- /dev/null`). Each hunk must match its base exactly where it says, so a case's lines are
the lines its expected.yaml names; the folders' README.md says how to write one.
"""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
BREAKING = DATA / "breaking"
INVALID_REGISTRIES = DATA / "registry" / "invalid"
INVALID_BASE = DATA / "registry" / "valid" / "minimal"
CONTRACT_CASES = DATA / "contract"
HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class DiffError(ValueError):
    """A fixture diff that does not parse or does not fit its base."""


def _header_path(line: str, marker: str, source: str, number: int) -> str | None:
    if not line.startswith(marker):
        raise DiffError(f"{source}:{number}: expected a '{marker}' line, found {line.rstrip()!r}")
    path = line[len(marker):].split("\t")[0].strip()
    if path == "/dev/null":
        return None
    return path[2:] if path.startswith(("a/", "b/")) else path


def apply_diff(tree: dict[str, str], diff: str, source: str) -> dict[str, str]:
    """The tree (relative path -> text) after the unified diff `diff`; `source` names it in errors."""
    lines = diff.splitlines(keepends=True)
    result = dict(tree)
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):   # `diff`, `index` and blank lines between files
            i += 1
            continue
        old = _header_path(lines[i], "--- ", source, i + 1)
        new = _header_path(lines[i + 1] if i + 1 < len(lines) else "", "+++ ", source, i + 2)
        i += 2
        if old is not None and old not in result:
            raise DiffError(f"{source}:{i - 1}: the base has no file {old}")
        original = result.pop(old).splitlines(keepends=True) if old is not None else []
        out: list[str] = []
        pos = 0
        while i < len(lines) and lines[i].startswith("@@ "):
            match = HUNK.match(lines[i])
            if not match:
                raise DiffError(f"{source}:{i + 1}: malformed hunk header {lines[i].rstrip()!r}")
            start, old_count = int(match[1]), int(match[2] or 1)
            new_count = int(match[4] or 1)
            first = start - 1 if old_count else start    # an empty range names the line it follows
            if first < pos:
                raise DiffError(f"{source}:{i + 1}: hunks overlap or are out of order")
            out += original[pos:first]
            pos = first
            i += 1
            while old_count or new_count:
                line = lines[i] if i < len(lines) else ""
                tag, body = line[:1], line[1:]
                if not tag or tag not in " -+":
                    raise DiffError(f"{source}:{i + 1}: the hunk ends early (expected ' ', '-' or '+')")
                if not line.endswith("\n") or (i + 1 < len(lines) and lines[i + 1].startswith("\\")):
                    raise DiffError(f"{source}:{i + 1}: fixture files must end with a newline")
                if tag in " -":
                    if pos >= len(original) or original[pos] != body:
                        found = original[pos].rstrip("\n") if pos < len(original) else "the end of the file"
                        raise DiffError(f"{source}:{i + 1}: {old} line {pos + 1} is {found!r}, "
                                        f"the diff expects {body.rstrip()!r}")
                    pos += 1
                    old_count -= 1
                if tag in " +":
                    out.append(body)
                    new_count -= 1
                if old_count < 0 or new_count < 0:
                    raise DiffError(f"{source}:{i + 1}: the hunk has more lines than its header says")
                i += 1
        out += original[pos:]
        if new is not None:
            result[new] = "".join(out)
    return result


def _read_tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _applied(tree: dict[str, str], diff: Path) -> dict[str, str]:
    return apply_diff(tree, diff.read_text(), str(diff.relative_to(DATA.parent.parent))) if diff.is_file() else tree


@functools.cache
def _scratch() -> Path:
    root = Path(tempfile.mkdtemp(prefix="oe-fixture-cases-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _written(tree: dict[str, str], *where: str) -> Path:
    root = _scratch().joinpath(*where)
    for name, text in tree.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def breaking_tree(case: str, side: str) -> dict[str, str]:
    """The files of one side ("baseline" or "current") of a breaking case."""
    baseline = _applied(_read_tree(BREAKING / "base"), BREAKING / case / "baseline.diff")
    return baseline if side == "baseline" else _applied(baseline, BREAKING / case / "current.diff")


@functools.cache
def breaking_side(case: str, side: str) -> Path:
    """A folder holding one side of a breaking case (profiles.yaml, and proto/ when the case has one)."""
    return _written(breaking_tree(case, side), "breaking", case, side)


@functools.cache
def invalid_registry(case: str) -> Path:
    """The profiles.yaml of an invalid-registry case, written out."""
    tree = _applied(_read_tree(INVALID_BASE), INVALID_REGISTRIES / case / "profiles.diff")
    return _written(tree, "invalid", case) / "profiles.yaml"


@functools.cache
def contract_case(case: str) -> Path:
    """The repository's proto/ with a contract case's proto.diff applied, written out: the proto root."""
    repo = DATA.parent.parent
    tree = {f"proto/{name}": text for name, text in _read_tree(repo / "proto").items()}
    return _written(_applied(tree, CONTRACT_CASES / case / "proto.diff"), "contract", case) / "proto"
