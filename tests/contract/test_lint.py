"""`buf lint` over proto/ with the repository's buf.yaml: the style and documentation rules hold."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUF = Path(sys.executable).parent / "buf"


def _lint(root: Path, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, BUF_CACHE_DIR=str(cache))
    return subprocess.run([str(BUF), "lint", "--error-format", "json"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "buf.yaml", root / "buf.yaml")
    shutil.copytree(ROOT / "proto", root / "proto")
    return root


def test_buf_is_installed():
    assert BUF.is_file(), "buf comes from buf-bin in requirements.txt; run `make setup`"


def test_contract_passes_buf_lint(tree: Path, tmp_path: Path):
    result = _lint(tree, tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_undocumented_field_is_rejected(tree: Path, tmp_path: Path):
    path = tree / "proto" / "openengine" / "v1" / "load.proto"
    text = path.read_text()
    marker = "  uint64 coalesced = 2;\n"
    assert marker in text
    path.write_text(text.replace(marker, marker + "  uint32 undocumented = 3;\n"))
    result = _lint(tree, tmp_path / "cache")
    assert result.returncode != 0
    assert '"type":"COMMENT_FIELD"' in result.stdout.replace(" ", "")
    assert "load.proto" in result.stdout


def test_unprefixed_enum_value_is_rejected(tree: Path, tmp_path: Path):
    path = tree / "proto" / "openengine" / "v1" / "server.proto"
    text = path.read_text()
    marker = "  ENGINE_ROLE_ENCODER = 100;\n"
    assert marker in text
    path.write_text(text.replace(marker, marker + "  // A value without the enum prefix.\n  ENCODER_ONLY = 101;\n"))
    result = _lint(tree, tmp_path / "cache")
    assert result.returncode != 0
    assert '"type":"ENUM_VALUE_PREFIX"' in result.stdout.replace(" ", "")
