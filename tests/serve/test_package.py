"""The SDK package stands on its own: it never imports the reference engine (which builds on it),
and no fault or hook point of the reference engine's test machinery appears in it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_direction import imported_modules

SDK = Path(__file__).resolve().parents[2] / "openengine" / "serve"


def test_the_sdk_never_imports_the_reference_engine():
    found = [f"{path.name}:{line}: {module}" for path in sorted(SDK.rglob("*.py"))
             for line, module in imported_modules(path) if module.startswith("openengine.engine")]
    assert found == []


def test_the_sdk_has_no_fault_and_no_hook():
    words = re.compile(r"\b(hooks?|faults?|faulty)\b", re.IGNORECASE)
    found = [f"{path.name}:{n}: {line.strip()}" for path in sorted(SDK.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if words.search(line)]
    assert found == []
