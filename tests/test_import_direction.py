"""Imports run one way: the runtime (`openengine`) and the toolkit (`oespec`) never import each
other, the composition layer (`oespec/cli.py`, `oespec/commands/`, `oespec/catalogues.py` and
`oespec/generate_with_catalogues.py`, which compose the stages) is the only code that uses both,
the check and generate stages never import each other, and `openengine.contractkit` sits below
everything.

Every import is found with the AST, including imports inside functions and
`importlib.import_module("...")` calls with a literal name, so a lazy import cannot slip through.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = ("oespec/cli.py", "oespec/commands/", "oespec/catalogues.py", "oespec/generate_with_catalogues.py")
LOWER_LAYER = "openengine.contractkit"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a Python file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.append((node.lineno, node.args[0].value))
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in files:
        for line, module in imported_modules(path):
            if _within(module, LOWER_LAYER):
                continue   # below everything: every side may use it
            if any(_within(module, f) for f in forbidden):
                out.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    return sorted(set(out))


def python_files(folder: str, *, exclude: tuple[str, ...] = ()) -> list[Path]:
    files = sorted((ROOT / folder).rglob("*.py"))
    return [p for p in files if not any(p.relative_to(ROOT).as_posix().startswith(e) for e in exclude)]


@pytest.mark.parametrize(("folder", "exclude", "forbidden"), [
    ("openengine", (), ("oespec",)),
    ("oespec", CLI, ("openengine",)),
    ("oespec/check", (), ("oespec.generate", "oespec.breaking")),
    ("oespec/generate", (), ("oespec.check", "oespec.breaking")),
    ("oespec/breaking", (), ("oespec.check", "oespec.generate")),
    ("oespec/registry", (), ("oespec.check", "oespec.generate", "oespec.breaking")),
], ids=["runtime-not-toolkit", "toolkit-not-runtime", "check-not-generate", "generate-not-check",
        "breaking-alone", "registry-below-stages"])
def test_imports_run_one_way(folder, exclude, forbidden):
    files = python_files(folder, exclude=exclude)
    assert files, f"no Python files under {folder}"
    assert violations(files, forbidden) == []


def test_the_lower_layer_imports_nothing_above_it():
    files = python_files("openengine/contractkit")
    assert files
    lower = [f"{path.relative_to(ROOT)}:{line}: imports {module}" for path in files
             for line, module in imported_modules(path)
             if (_within(module, "openengine") and not _within(module, LOWER_LAYER)) or _within(module, "oespec")]
    assert lower == []


def test_the_runtime_does_not_even_mention_the_toolkit():
    """No toolkit module is named anywhere in `openengine/`: no import, lazy import or comment
    pointing at one (the command name `oespec` itself may appear in messages)."""
    mentions = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "openengine").rglob("*"))
                if p.is_file() and p.suffix in (".py", ".pyi", ".json", ".md", ".j2")
                for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                if re.search(r"\boespec[./]\w", line)]
    assert mentions == []


def test_the_checker_finds_what_it_must(tmp_path):
    """The rules above cannot pass vacuously: each kind of import is seen."""
    sample = tmp_path / "sample.py"
    sample.write_text("import oespec.spec\nfrom oespec.check import run_rules\n"
                      "def later():\n    from oespec.generate import plan\n"
                      "    importlib.import_module('oespec.breaking')\n"
                      "from . import relative_is_fine\nimport codegenerator\n", encoding="utf-8")
    found = {module for _, module in imported_modules(sample)}
    assert {"oespec.spec", "oespec.check", "oespec.generate", "oespec.breaking"} <= found
    assert not _within("codegenerator", "oespec")
    assert len([m for m in found if _within(m, "oespec")]) >= 4
