"""One catalogue holds every id any command can emit.

Statically: every string literal in the toolkit and the runtime that has the shape of a rule id
(OE, OEB, OEV, SPEC, DOC and three digits) must be a catalogue entry; and every place that makes
a finding (a `Diagnostic`, a validator `violation`, a generation `Problem`, or a function that
passes its rule id on to one) names a catalogued id, or takes it from a catalogued object at one
of the few places listed below. Dynamically: the ids real commands print on the repository's bad
fixtures, and a conformance run against a faulty engine, are all in the catalogue. And `oespec
rules` prints every family in every format.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from oespec.cli import run
from oespec.catalogues import all_specs, family_specs
from openengine.contractkit.rules import FAMILIES, RuleCatalogue, RuleSpec, Severity, find_spec

# The families the product catalogues: every one but the faults, which are test machinery.
PRODUCT_FAMILIES = tuple(f for f in FAMILIES if f != "fault")

ROOT = Path(__file__).resolve().parents[1]
ID_SHAPE = re.compile(r"\b(?:OEB|OEV|OE|SPEC|DOC)[0-9]{3}\b")
SOURCES = ("oespec", "openengine.contractkit", "openengine")


def _literal_ids() -> dict[str, list[str]]:
    """id -> where it appears as (part of) a string literal in the sources."""
    found: dict[str, list[str]] = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "v1" in path.relative_to(ROOT).parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    for rid in ID_SHAPE.findall(node.value):
                        found.setdefault(rid, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_id_written_in_the_sources_is_catalogued():
    known = all_specs()
    missing = {rid: where[:3] for rid, where in _literal_ids().items() if rid not in known}
    assert not missing, f"ids emitted or named but not in the catalogue: {missing}"


# Record makers: name -> (position, keyword) of the rule id among their arguments.
RECORD_MAKERS = {"Diagnostic": (3, "rule_id"), "Diagnostic.at": (2, "rule_id"), "violation": (0, "rule_id"),
                 "Problem": (4, "rule_id")}

# Places whose rule id is computed from an object that is itself catalogued: (file, function) ->
# why. A new computed id elsewhere fails the scan until it is listed here with its reason.
COMPUTED_IDS = {
    ("oespec/check/__init__.py", "run_rules"): "the id of a rule in the check catalogue",
    ("oespec/breaking/judge.py", "compare"): "the id of a rule in the breaking catalogue",
    ("oespec/breaking/buf_breaking.py", "fold"): "buf's rule type under the catalogue's `buf:*` entry",
    ("oespec/commands/validate.py", "_diag"): "a violation's id, made by violation() (scanned)",
    ("oespec/commands/validate.py", "_watchload"): "a violation's id, made by violation() (scanned)",
    ("oespec/commands/generate.py", "generation_diagnostics"): "a Problem's id (scanned), else OE900",
    ("oespec/generate/docs.py", "generate"): "a marker finding's id (scanned in markers.py)",
    ("openengine/conformance/report.py", "case_diagnostic"): "a case id: cases register in the catalogue",
    ("openengine/validate/_preflight.py", "capped"): "the id of a violation left out, made by violation() (scanned)",
}


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return ""


def _rule_argument(node: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for kw in node.keywords:
        if kw.arg == keyword:
            return kw.value
    return node.args[position] if len(node.args) > position else None


def _functions(tree: ast.AST):
    """(name it is called by, function) for every function: a class's __init__ by the class."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    yield node.name, item
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
            yield node.name, node


def _constant_ids(expr: ast.expr, function, module_globals: dict) -> set[str] | None:
    """The ids `expr` can be, when they are all written in the source; None when computed."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        body, orelse = (_constant_ids(e, function, module_globals) for e in (expr.body, expr.orelse))
        return None if body is None or orelse is None else body | orelse
    if isinstance(expr, ast.Name):
        assigned = [n.value for n in ast.walk(function) if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == expr.id for t in n.targets)] if function else []
        if assigned:
            found = [_constant_ids(value, function, module_globals) for value in assigned]
            return None if any(f is None for f in found) else set().union(*found)
        value = module_globals.get(expr.id)
        return {value} if isinstance(value, str) else None
    return None


def _source_modules() -> dict[str, tuple[str, ast.AST]]:
    """dotted module name -> (file, syntax tree) of the toolkit's and the runtime's sources."""
    modules = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "v1" not in rel.parts:
                dotted = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
                modules[dotted] = (rel.as_posix(), ast.parse(path.read_text(encoding="utf-8")))
    return modules


def _emission_sites(modules: dict[str, tuple[str, ast.AST]]):
    """(where, ids or None when computed, file, function) of every call to a record maker whose
    rule id is not a parameter handed on. A function that hands a parameter on as the rule id is a
    record maker too, so its own callers are scanned."""
    import importlib

    def imported(tree) -> dict[str, str]:
        return {alias.asname or alias.name: node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}

    imports = {dotted: imported(tree) for dotted, (_, tree) in modules.items()}
    makers: dict[tuple[str, str], tuple[int, str]] = {}   # (module, name) -> (position, keyword)

    def maker(dotted: str, call: ast.Call):
        name = _call_name(call)
        for where in (dotted, imports[dotted].get(name)):
            if (where, name) in makers:
                return makers[where, name]
        return RECORD_MAKERS.get(name)

    changed = True
    while changed:
        changed = False
        for dotted, (_, tree) in modules.items():
            for name, fn in _functions(tree):
                params = [a.arg for a in fn.args.args]
                for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                    found = maker(dotted, call)
                    arg = _rule_argument(call, *found) if found else None
                    if isinstance(arg, ast.Name) and arg.id in params and (dotted, name) not in makers:
                        shift = 1 if params[:1] in (["self"], ["cls"]) else 0
                        makers[dotted, name] = (params.index(arg.id) - shift, arg.id)
                        changed = True
    sites = []
    for dotted, (rel, tree) in modules.items():
        try:
            module_globals = vars(importlib.import_module(dotted))
        except ImportError:
            module_globals = {}
        owner = {id(n): (name, fn) for name, fn in _functions(tree) for n in ast.walk(fn)}
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            found = maker(dotted, call)
            arg = _rule_argument(call, *found) if found else None
            if arg is None:
                continue          # not a record maker, or the maker's default applies
            name, fn = owner.get(id(call), ("<module>", None))
            if isinstance(arg, ast.Name) and (dotted, name) in makers and makers[dotted, name][1] == arg.id:
                continue          # handed on: scanned at the callers
            sites.append((f"{rel}:{call.lineno}", _constant_ids(arg, fn, module_globals), rel, name))
        for name, fn in _functions(tree):   # a default of a rule-id parameter is an id too
            if (dotted, name) in makers:
                keyword = makers[dotted, name][1]
                args, defaults = fn.args.args, fn.args.defaults
                for a, default in zip(args[len(args) - len(defaults):], defaults):
                    if a.arg == keyword:
                        sites.append((f"{rel}:{default.lineno}", _constant_ids(default, fn, module_globals),
                                      rel, name))
    return sites


def test_every_emission_site_names_a_catalogued_id():
    known = all_specs()
    sites = _emission_sites(_source_modules())
    assert len(sites) > 50, "the scan found too few places that make findings"
    unknown = {where: sorted(i for i in ids if find_spec(known, i) is None)
               for where, ids, _, _ in sites if ids is not None}
    assert not {w: i for w, i in unknown.items() if i}, f"findings made under uncatalogued ids: {unknown}"
    computed = {(rel, fn) for _, ids, rel, fn in sites if ids is None}
    unlisted = computed - set(COMPUTED_IDS)
    assert not unlisted, f"rule ids computed at places not listed in COMPUTED_IDS: {sorted(unlisted)}"
    assert not set(COMPUTED_IDS) - computed, "COMPUTED_IDS lists places that no longer compute an id"


def test_the_emission_scan_follows_handed_on_ids_and_finds_computed_ones():
    """The scan itself: a literal id, an id handed through a helper, a default, and a computed id."""
    source = (
        "from openengine.contractkit.diagnostics import Diagnostic\n"
        "def literal():\n    return Diagnostic('f', 1, 1, 'OE777', 3, 'm')\n"
        "def handed(path, rule='OE779'):\n    return Diagnostic(path, 1, 1, rule, 3, 'm')\n"
        "def caller():\n    return handed('f', 'OE778')\n"
        "def branch(x):\n    rule = 'OE775' if x else 'OE776'\n    return Diagnostic('f', 1, 1, rule, 3, 'm')\n"
        "def computed(r):\n    return Diagnostic('f', 1, 1, r.id, 3, 'm')\n")
    sites = _emission_sites({"scanned.example": ("scanned/example.py", ast.parse(source))})
    by_function = {fn: ids for _, ids, _, fn in sites}
    assert by_function == {"literal": {"OE777"}, "caller": {"OE778"}, "handed": {"OE779"},
                           "branch": {"OE775", "OE776"}, "computed": None}


def test_every_family_is_present_and_ids_are_unique():
    families = family_specs()
    assert set(families) == set(PRODUCT_FAMILIES)
    assert all(families[f] for f in PRODUCT_FAMILIES)
    total = sum(len(v) for v in families.values())
    assert len(all_specs()) == total      # merged() refuses an id claimed twice
    for rid in ("OE000", "OE100", "OE900", "OE901", "OEB000", "SPEC001", "SPEC005", "DOC001", "DOC007"):
        assert rid in all_specs(), rid


def test_a_catalogue_refuses_duplicates_and_foreign_families():
    cat: RuleCatalogue[None] = RuleCatalogue("spec")
    spec = RuleSpec("SPEC999", "x", "spec", "c", "p", Severity.ERROR)
    cat.register(spec)
    with pytest.raises(ValueError, match="twice"):
        cat.register(spec)
    with pytest.raises(ValueError, match="family"):
        cat.register(RuleSpec("OE999", "x", "check", "c", "p", Severity.ERROR))
    with pytest.raises(ValueError, match="malformed requirement"):
        RuleSpec("OE998", "x", "check", "c", "p", Severity.ERROR, requirements=("REQ-x",))
    with pytest.raises(ValueError, match="unknown rule family"):
        RuleCatalogue("lint")


def test_the_registrar_stores_the_familys_payload_and_returns_the_handler():
    cat: RuleCatalogue[tuple] = RuleCatalogue("check")
    spec = RuleSpec("OE990", "x", "check", "c", "p", Severity.ERROR)

    @cat.registrar(spec, lambda fn: ("wrapped", fn))
    def handler():
        return 7

    assert handler() == 7                       # the decorated function is unchanged
    assert cat["OE990"] == ("wrapped", handler) and cat.spec("OE990") is spec
    cat.register(RuleSpec("OE989", "y", "check", "c", "p", Severity.ERROR))   # a spec alone
    assert list(cat) == ["OE990", "OE989"] and cat.payloads() == [("wrapped", handler)]
    assert [s.id for s in cat.specs()] == ["OE989", "OE990"]


def test_every_family_registers_through_the_one_catalogue_type():
    """Check rules, breaking rules, validator rules, conformance cases, and the spec, docs and
    generate ids all live in a `RuleCatalogue`, each payload of its family's own type. (The faults
    that break an engine on purpose are test machinery, tests/faults, not a family of the product.)"""
    from oespec.breaking import Rule as BreakingRule
    from oespec.check import Rule as CheckRule
    from oespec.catalogues import family_catalogues
    from openengine.conformance.cases import Case
    from openengine.validate import Rule as ValidatorRule

    cats = family_catalogues()
    assert set(cats) == set(PRODUCT_FAMILIES)
    payload_type = {"check": CheckRule, "breaking": BreakingRule, "validator": ValidatorRule,
                    "conformance": Case}
    for family, cat in cats.items():
        assert isinstance(cat, RuleCatalogue) and cat.family == family
        for rule_id in cat:
            payload = cat[rule_id]
            if family in payload_type:
                assert payload is None or isinstance(payload, payload_type[family]), rule_id
            else:
                assert payload is None, rule_id     # spec, docs, generate: ids with no handler
    # The handlers the runners call are the registered ones, and a spec alone has none.
    assert all(callable(r.handler) for r in cats["check"].payloads())
    assert cats["check"]["OE000"] is None and cats["breaking"]["OEB000"] is None
    assert all(callable(c.fn) for c in cats["conformance"].payloads())


def test_a_wildcard_entry_stands_for_the_ids_it_names():
    specs = all_specs()
    assert find_spec(specs, "buf:FIELD_NO_DELETE").id == "buf:*"
    assert find_spec(specs, "OE003").id == "OE003"
    assert find_spec(specs, "OE999") is None


def _emitted(argv: list[str], capsys) -> set[str]:
    run(argv)
    out = capsys.readouterr().out
    return {d["rule_id"] for d in json.loads(out)["diagnostics"]} if out.strip() else set()


def test_ids_real_commands_emit_are_catalogued(capsys):
    known = all_specs()
    emitted: set[str] = set()
    for fixture in sorted((ROOT / "tests" / "data").rglob("*.yaml"))[:40]:
        emitted |= _emitted(["check", str(fixture), "--no-contract", "--no-head", "--format", "json"], capsys)
    for doc in sorted((ROOT / "tests" / "data" / "validate" / "corpus").glob("invalid-*.json")):
        emitted |= _emitted(["validate", str(doc), "--format", "json"], capsys)
    emitted |= _emitted(["check", str(ROOT / "no-such-registry.yaml"), "--format", "json"], capsys)
    emitted |= _emitted(["validate", str(ROOT / "no-such.json"), "--format", "json"], capsys)
    emitted |= _emitted(["breaking", "--against", "no-such-ref-for-the-catalogue", "--format", "json"], capsys)
    emitted |= _emitted(["generate", str(ROOT / "no-such-registry.yaml"), "--check", "--format", "json"], capsys)
    emitted |= _emitted(["generate", "--check", "--format", "json"], capsys)
    emitted |= _emitted(["spec", "--format", "json"], capsys)
    assert emitted, "the fixtures produced no findings at all"
    assert {"OE000", "OEV101", "OEV001", "OEB000"} <= emitted
    assert not {rid for rid in emitted if find_spec(known, rid) is None}, sorted(emitted - set(known))


def test_ids_a_conformance_run_emits_are_catalogued(capsys):
    """Every record a conformance run prints names a catalogued case."""
    pytest.importorskip("openengine.v1.capabilities_pb2", reason="run `make bindings` first")
    from openengine.engine import EngineConfig
    from tests.faults import faulty_engine

    # The cases that judge the missing core profile, and core cases it makes fail. Not all of
    # core.*: its saturation cases stream long requests for seconds to add records of the same kind.
    selection = ("capabilities.*", "core.profiles.*", "core.discovery.*", "core.numbers.*", "core.generate.limits")
    with faulty_engine(EngineConfig(port=0), ["capabilities-missing-core"]) as engine:
        code = run(["conformance", "--target", engine.address, *(f"--case={c}" for c in selection),
                    "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    emitted = {r["case"] for r in data["results"] if r["outcome"] != "pass"}
    assert code == 1 and len(emitted) >= 2, sorted(emitted)
    assert emitted <= set(all_specs()), sorted(emitted - set(all_specs()))


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_oespec_rules_prints_every_family(fmt, capsys):
    assert run(["rules", "--format", fmt]) == 0
    out = capsys.readouterr().out
    for rid in ("OE003", "OEB055", "OEV101", "SPEC002", "DOC003", "OE901", "load.watch.settings-first"):
        assert rid in out, (fmt, rid)
    if fmt == "json":
        rows = json.loads(out)
        assert {r["family"] for r in rows} == set(PRODUCT_FAMILIES)
        assert len(rows) == len(all_specs())


def test_oespec_rules_filters_by_family(capsys):
    assert run(["rules", "--family", "spec", "--family", "docs"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert ids and all(i.startswith(("SPEC", "DOC")) for i in ids)


def test_every_rule_a_module_defines_is_in_the_list_that_runs():
    """Rules are plain lists (`RULES`): a rule left out of its module's list, or a module left out
    of its family's, would silently never run."""
    import importlib
    import pkgutil

    from oespec import check
    from oespec.breaking import registry_rules as breaking_rules, rule as breaking_rule
    from oespec.check import proto_crosscheck, rule as check_rule, rules as registry_rules

    modules = [proto_crosscheck, breaking_rules] + [importlib.import_module(f"oespec.check.rules.{m.name}")
                                            for m in pkgutil.iter_modules(registry_rules.__path__)]
    for module in modules:
        defined = [v for v in vars(module).values() if isinstance(v, (check_rule.Rule, breaking_rule.Rule))]
        if module is not proto_crosscheck and module is not breaking_rules and not defined:
            continue   # a helper module of the rule modules
        # The breaking rules that differ only in data are rows of a table (`DATA_RULES`), not names.
        ids = [r.id for r in defined] + [row[0] for row in getattr(module, "DATA_RULES", ())]
        assert sorted(ids) == sorted(r.id for r in module.RULES), module.__name__
        if module.__name__.startswith("oespec.check.rules."):
            assert all(r in registry_rules.RULES for r in module.RULES), module.__name__
    assert {r.id for r in check.RULES} == {r.id for r in registry_rules.RULES} | {r.id for r in proto_crosscheck.RULES}
