"""Names say what a thing is: no module alias, variable, parameter or function of the project is
one of the terse names a reader had to look up (`rt` for the engine's backend, `lm` for its
model module, `ES`/`L`/`G` for generated modules, `_v` for the variant constructor)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TERSE = {"rt", "lm", "ES", "L", "G", "_v"}
TREES = ("oespec", "openengine", "bench", "tests", "site")


def _python_files():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if "_pb2" not in path.name and "__pycache__" not in path.parts:
                yield path


def terse_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of every binding of a terse name: an import alias, an assignment target, a
    parameter, a function or a class."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.alias):
            name = node.asname or node.name.split(".")[0]
            if name in TERSE:
                found.append((node.lineno, name))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in TERSE:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.arg) and node.arg in TERSE:
            found.append((node.lineno, node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in TERSE:
            found.append((node.lineno, node.name))
    return found


def test_the_finder_sees_each_kind_of_binding():
    source = ("from x import events_pb2 as ES\nimport y as lm\nL = 1\n"
              "def _v(rt):\n    pass\nfor G in ():\n    pass\n")
    assert sorted(name for _, name in terse_names(source)) == ["ES", "G", "L", "_v", "lm", "rt"]
    assert terse_names("from x import events_pb2\nbackend = 1\n") == []


def test_no_terse_names_in_the_project():
    found = [f"{path.relative_to(ROOT)}:{line}: {name}"
             for path in _python_files() for line, name in terse_names(path.read_text(encoding="utf-8"))]
    assert found == [], "terse names; name what the thing is:\n" + "\n".join(found)
