"""The compatibility aliases' protos (proto/openengine/legacy/) are wire contracts like v1's: removing
an alias method or changing an earlier message is a break `oespec breaking` reports as an error,
and no profile version bump can accept it (the aliases belong to no profile)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from oespec.breaking import Context
from oespec.breaking.wire import compare_protos, find_buf
from oespec.diagnostics import Severity
from oespec.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]
SERVICE = "openengine/legacy/services/openengine_service.proto"
MESSAGES = "openengine/legacy/rev3/v1/control.proto"

pytestmark = pytest.mark.skipif(find_buf() is None, reason="buf is not installed")


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    base, cur = tmp_path / "base", tmp_path / "cur"
    shutil.copytree(ROOT / "proto", base)
    shutil.copytree(ROOT / "proto", cur)
    return base, cur


def _errors(tmp_path, base, cur):
    registry = load_registry(ROOT / "profiles.yaml").registry
    diags = compare_protos(Context(registry, registry), cur, base)
    return [d for d in diags if d.severity >= Severity.ERROR]


def test_unchanged_alias_protos_are_no_break(tmp_path):
    base, cur = _trees(tmp_path)
    assert _errors(tmp_path, base, cur) == []


def test_removing_an_alias_method_is_a_break(tmp_path):
    base, cur = _trees(tmp_path)
    path = cur / SERVICE
    lines = path.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if "rpc Abort(" not in ln]
    assert len(kept) == len(lines) - 1
    path.write_text("".join(kept))
    errors = _errors(tmp_path, base, cur)
    assert [d.rule_id for d in errors] == ["buf:RPC_NO_DELETE"]
    assert "OpenEngine" in errors[0].message and "Abort" in errors[0].message


def test_changing_an_earlier_message_is_a_break(tmp_path):
    base, cur = _trees(tmp_path)
    path = cur / MESSAGES
    text = path.read_text()
    assert "  string request_id = 1;\n" in text
    path.write_text(text.replace("  string request_id = 1;\n", "  uint64 request_id = 1;\n", 1))
    errors = _errors(tmp_path, base, cur)
    assert errors and all(d.rule_id.startswith("buf:FIELD_SAME_") for d in errors)
