"""No import cycles and no upward imports: the modules of `openengine/` (but the generated bindings
`openengine/v1`) and of `oespec/` form a graph without a cycle, lazy imports inside functions
included, and a toolkit module imports only from its own layer or the layers below it
(`TOOLKIT_LAYERS`).

An edge is every import a module runs: `import a.b`, `from a.b import c` (to the module `a.b.c`
when that is a module, else to `a.b`), relative imports resolved, and `importlib.import_module`
with a literal name. Imports under `if TYPE_CHECKING:` are edges too: a type checker runs them,
and a cycle hidden from the interpreter is still two modules that cannot be understood apart. A
cycle is reported as its modules, each with the line that imports the next.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("openengine", "oespec")
GENERATED = ("openengine/v1/",)
# The toolkit's layers, lowest first; a module belongs to the layer of its longest listed prefix.
TOOLKIT_LAYERS = (
    # what every stage stands on: the package, the registry model, proto compiling and descriptors
    ("oespec", "oespec.registry", "oespec.markdown_blocks", "oespec.protoc", "oespec.descriptors", "oespec.buildcache"),
    # the stages
    ("oespec.check", "oespec.generate", "oespec.breaking", "oespec.spec", "oespec.upstream"),
    # the composition of stages and the runtime's catalogues
    ("oespec.catalogues", "oespec.generate_with_catalogues"),
    # the command line
    ("oespec.commands", "oespec.cli"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    files = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
    return {module_name(p): p for p in files if not p.relative_to(ROOT).as_posix().startswith(GENERATED)}


def imports(path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) of every import `path` runs that lands on one of `modules`."""
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def nearest(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((node.lineno, nearest(a.name)) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((node.lineno, full if full in modules else nearest(base)))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.append((node.lineno, nearest(node.args[0].value)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return [(line, m) for line, m in found if m is not None and m != this]


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first import of it}."""
    modules = project_modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for line, target in imports(path, modules):
            edges.setdefault(target, line)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(graph[step])))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    return "; ".join(f"{m} imports {', '.join(f'{t} (line {line})' for t, line in sorted(graph[m].items()) if t in members)}"
                     for m in component)


def layer(module: str) -> int:
    """The toolkit layer a module of `oespec` belongs to."""
    prefixes = [(len(p), i) for i, names in enumerate(TOOLKIT_LAYERS) for p in names
                if module == p or module.startswith(p + ".")]
    assert prefixes, f"{module} is in no layer of TOOLKIT_LAYERS"
    return max(prefixes)[1]


def test_the_packages_have_no_import_cycle():
    graph = import_graph()
    assert sum(m.startswith("openengine.") for m in graph) > 50 and sum(m.startswith("oespec.") for m in graph) > 50
    found = cycles(graph)
    assert found == [], "import cycles (break each by moving what both sides need below them): " + \
        " | ".join(describe(c, graph) for c in found)


def test_the_toolkit_imports_no_layer_above_its_own():
    graph = import_graph()
    upward = [f"{source} (layer {layer(source)}) imports {target} (layer {layer(target)}) at line {line}"
              for source, edges in graph.items() if source.split(".")[0] == "oespec"
              for target, line in edges.items() if target.split(".")[0] == "oespec" and layer(target) > layer(source)]
    assert upward == []


def test_a_cycle_is_found_and_named():
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert "c imports a (line 7)" in describe(["a", "b", "c"], graph)


def test_type_only_and_lazy_imports_are_edges(tmp_path, monkeypatch):
    pkg = tmp_path / "openengine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "one.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from openengine import two\n")
    (pkg / "two.py").write_text("def f():\n    from . import one\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    modules = {module_name(p): p for p in sorted(pkg.rglob("*.py"))}
    assert imports(pkg / "one.py", modules) == [(3, "openengine.two")]
    assert imports(pkg / "two.py", modules) == [(2, "openengine.one")]
    graph = {name: {t: line for line, t in imports(path, modules)} for name, path in modules.items()}
    assert cycles(graph) == [["openengine.one", "openengine.two"]]
