"""Where a registry file breaks its JSON Schema: each problem at the key or value concerned, with a hint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openengine.contractkit.locations import Loc
from openengine.contractkit.yamlsource import SourceFile, YMap, YNode, YSeq


def node_at(root: YNode, path) -> tuple[YNode | None, YMap | None, str | None]:
    """Follow a JSON path into the located tree: (node, parent mapping, key in parent)."""
    node: YNode | None = root
    parent, key = None, None
    for step in path:
        if isinstance(node, YMap) and isinstance(step, str):
            parent, key = node, step
            node = node.entries.get(step)
        elif isinstance(node, YSeq) and isinstance(step, int) and 0 <= step < len(node.items):
            parent, key = None, None
            node = node.items[step]
        else:
            break
    return node, parent, key


def describe_path(path) -> str:
    """`models[0].limits` for a JSON path; `(document)` for the root."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out or "(document)"


@dataclass(frozen=True)
class SchemaProblem:
    loc: Loc
    message: str
    hint: str
    path: tuple = ()       # the JSON path of the value concerned
    keyword: str = ""      # the schema keyword it breaks (`enum`, `pattern`, ...)


def schema_problems(source: SourceFile, schema: dict, schema_name: str, *,
                    instance: Any = None) -> list[SchemaProblem]:
    """Every way `source` breaks the JSON Schema `schema`, each at the key or value concerned, with
    a hint; an unknown key names the known keys closest to it (a typo's likely fix). `instance` is
    the data judged when it is not the tree's plain values (the same shape, other scalars)."""
    import difflib

    import jsonschema   # the toolkit extra's; imported here so a missing one is reported per command

    problems = []
    validator = jsonschema.Draft202012Validator(schema)
    data = source.root.plain() if instance is None else instance
    for error in validator.iter_errors(data):
        best = jsonschema.exceptions.best_match([error])
        while best.context:   # alternatives that tie: descend to the one that came closest
            best = max(best.context, key=lambda e: (len(e.absolute_path), e.validator not in ("type", "oneOf")))
        path = tuple(best.absolute_path)
        node, _parent, _key = node_at(source.root, path)
        loc = node.loc if node is not None else Loc(1, 1)
        where = describe_path(path)
        if best.validator == "additionalProperties" and isinstance(node, YMap):
            known = sorted(best.schema.get("properties", {}))
            for key in sorted(set(best.instance) - set(known)):
                close = difflib.get_close_matches(key, known, n=1)
                hint = (f"did you mean {close[0]!r}? " if close else "") + f"known keys: {', '.join(known)}"
                problems.append(SchemaProblem(node.key_loc(key), f"{where}: unknown key {key!r}", hint,
                                              (*path, key), "additionalProperties"))
            continue
        if best.validator == "enum":
            hint = "use one of: " + ", ".join(str(v) for v in best.validator_value)
        elif best.validator == "type":
            hint = f"write a value of type {best.validator_value}"
        elif best.validator == "pattern":
            hint = f"the value must match {best.validator_value}"
        elif best.validator == "required":
            hint = f"add the missing key; see {schema_name}"
        elif best.validator == "not":
            hint = f"see {schema_name}: these settings exclude each other"
        else:
            hint = f"see {schema_name}"
        problems.append(SchemaProblem(loc, f"{where}: {best.message}", hint, path, str(best.validator)))
    return sorted(problems, key=lambda p: (p.loc.line, p.loc.column))
