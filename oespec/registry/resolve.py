"""Resolve stage: validate the located YAML tree against the registry's JSON Schema, then build
the typed `Registry` model.

Schema problems become diagnostics (rule OE001) located at the offending key or value. The model is
only built from a schema-valid tree, so the semantic rules in `oespec.check` never meet a value of
the wrong shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from oespec.registry.model import (
    Capability, Condition, HistoryEntry, Incompatibility, Limit, LimitType, MessageRef, Profile,
    Registry, Requirement, Rpc, Scope, Version, VersionRange,
)
from openengine.contractkit.conditions import CONDITION_OPERATORS
from openengine.contractkit.yamlsource import SourceFile, YMap, YNode, YScalar, YSeq
from oespec.registry.schema_problems import SchemaProblem, describe_path, node_at, schema_problems

SCHEMA_RULE = "OE001"
SCHEMA_FILE = "oespec/registry/profiles.schema.json"


@lru_cache(maxsize=1)
def registry_schema() -> dict:
    return json.loads(resources.files("oespec.registry").joinpath("profiles.schema.json").read_text())


def _registry_problem(source: SourceFile, problem: SchemaProblem) -> Diagnostic:
    """A schema problem as a finding, worded for the registry where it has more to say: versions
    and ranges by example, and where an unknown unit is added."""
    message, hint = problem.message, problem.hint
    where = describe_path(problem.path)
    if problem.keyword == "pattern" and problem.path and problem.path[-1] in ("version", "since"):
        value = _text(node_at(source.root, problem.path)[0])
        if "requires" in problem.path:
            message = f"{where}: {value!r} is not a version range such as '>= 1.0, < 2.0'"
        else:
            message = f"{where}: {value!r} is not a MAJOR.MINOR version string"
    if problem.keyword == "enum" and problem.path[-1:] == ("unit",):
        hint += f"; a quantity none of these describes gets its unit added to $defs/unit in {SCHEMA_FILE}"
    return Diagnostic.at(source.path, problem.loc, SCHEMA_RULE, Severity.ERROR, message, hint)


def _text(node: YNode | None) -> str:
    if isinstance(node, YScalar):
        return node.raw if node.tag.endswith((":float", ":int")) else ("" if node.value is None else str(node.value))
    return ""


def _locs(node: YMap) -> dict[str, Loc]:
    """Location of each key's value, plus `key[i]` for the items of list values (enum values,
    roles), so a finding about one list item can point at that item; for a mapping value (enum
    values with numbers), `key[i]` is the i-th key and `key.<name>` its value."""
    out: dict[str, Loc] = {}
    for key, child in node.entries.items():
        out[key] = child.loc
        if isinstance(child, YSeq):
            for index, item in enumerate(child.items):
                out[f"{key}[{index}]"] = item.loc
        elif isinstance(child, YMap):
            for index, (sub, item) in enumerate(child.entries.items()):
                out[f"{key}[{index}]"] = child.key_loc(sub)
                out[f"{key}.{sub}"] = item.loc
    return out


def _where(node: YMap) -> dict:
    return {"loc": node.loc, "locs": _locs(node)}


def _version(node: YMap, key: str) -> Version:
    return Version.parse(_text(node.get(key)))


def _history(node: YMap) -> HistoryEntry:
    return HistoryEntry(_version(node, "version"), str(node.get("changes").plain()), **_where(node))


def _rpc(node: YMap) -> Rpc:
    p = node.plain()
    return Rpc(p["name"], p["request"], p["response"], p["streaming"], _version(node, "since"),
               p["description"], p.get("deprecated"), **_where(node))


def _message(node: YMap) -> MessageRef:
    p = node.plain()
    return MessageRef(p["name"], _version(node, "since"), p["description"], p.get("deprecated"),
                      **_where(node))


def _limit(node: YMap) -> Limit:
    p = node.plain()
    name = p["name"]
    enum_name = p.get("enum") or "".join(w.capitalize() for w in name.split("_"))
    ltype = LimitType.parse(p["type"], enum_name, p.get("values") or ())
    return Limit(name=name, type=ltype, field=p["field"], default=p["default"],
                 description=p["description"], since=_version(node, "since"),
                 minimum=p.get("minimum"), maximum=p.get("maximum"), unit=p.get("unit"),
                 deprecated=p.get("deprecated"), **_where(node),
                 updatable=bool(p.get("updatable", False)))


def _condition(node: YMap) -> Condition:
    p = node.plain()
    reference = p["limit"]
    profile, _, limit = reference.rpartition(".")
    operator = next(op for op in CONDITION_OPERATORS if op in p)
    return Condition(profile, limit, operator, p[operator], **_where(node))


def _incompatibility(node: YMap) -> Incompatibility:
    when = node.get("when")
    conditions = tuple(_condition(c) for c in when.items) if isinstance(when, YSeq) else ()
    profile = node.get("profile")
    return Incompatibility(None if profile is None else str(profile.plain()), conditions,
                           str(node.get("reason").plain()), **_where(node))


def _requirement(node: YMap) -> Requirement:
    text = _text(node.get("version"))
    return Requirement(str(node.get("profile").plain()), VersionRange.parse(text), **_where(node))


def _items(node: YMap, key: str) -> list[YMap]:
    child = node.get(key)
    return [item for item in child.items if isinstance(item, YMap)] if isinstance(child, YSeq) else []


def _profile(node: YMap) -> Profile:
    p = node.plain()
    cap_node = node.get("capability")
    capability = None
    if isinstance(cap_node, YMap):
        c = cap_node.plain()
        capability = Capability(c["field"], c["number"], c["message"], **_where(cap_node))
    scope = Scope(p["scope"], tuple(p.get("roles") or ()), node.value_loc("scope"))
    return Profile(
        name=p["name"],
        version=_version(node, "version"),
        mandatory=bool(p.get("mandatory", False)),
        scope=scope,
        summary=p["summary"],
        description=p["description"],
        history=tuple(_history(h) for h in _items(node, "history")),
        rpcs=tuple(_rpc(r) for r in _items(node, "rpcs")),
        messages=tuple(_message(m) for m in _items(node, "messages")),
        capability=capability,
        limits=tuple(_limit(lim) for lim in _items(node, "limits")),
        requires=tuple(_requirement(r) for r in _items(node, "requires")),
        incompatible_with=tuple(_incompatibility(i) for i in _items(node, "incompatible_with")),
        deprecated=p.get("deprecated"),
        **_where(node),
        stability_given=p.get("stability"),
        requirement_areas_given=tuple(p.get("requirement_areas") or ()),
    )


@dataclass
class Resolved:
    """The result of load + resolve: a model when the file was usable, and what was found."""

    source: SourceFile
    registry: Registry | None
    diagnostics: list[Diagnostic]


def _check_version_texts(source: SourceFile) -> list[Diagnostic]:
    """Versions and ranges the schema judged only by pattern, parsed the way the model will parse
    them, so that building the model can never fail on them."""
    diags = []

    def check(node: YNode | None, parse) -> None:
        if not isinstance(node, YScalar):
            return
        try:
            parse(_text(node))
        except ValueError as err:
            diags.append(Diagnostic.at(source.path, node.loc, SCHEMA_RULE, Severity.ERROR, str(err),
                                       "write versions as MAJOR.MINOR (e.g. \"1.2\") and ranges as '>= 1.0'"))

    root = source.root
    for profile in _items(root, "profiles") if isinstance(root, YMap) else []:
        check(profile.get("version"), Version.parse)
        for entry in _items(profile, "history"):
            check(entry.get("version"), Version.parse)
        for key in ("rpcs", "messages", "limits"):
            for entry in _items(profile, key):
                check(entry.get("since"), Version.parse)
        for entry in _items(profile, "requires"):
            check(entry.get("version"), VersionRange.parse)
    return diags


def _stringify_versions(source: SourceFile) -> dict:
    """The plain data the schema sees, with unquoted numeric versions read as their source text."""

    def plain(node: YNode, key: str | None) -> Any:
        if isinstance(node, YMap):
            return {k: plain(child, k) for k, child in node.entries.items()}
        if isinstance(node, YSeq):
            return [plain(child, key) for child in node.items]
        if key in ("version", "since") and isinstance(node, YScalar) and node.tag.endswith((":float", ":int")):
            return node.raw
        return node.value

    return plain(source.root, None)


def resolve(source: SourceFile) -> Resolved:
    """Schema-check `source` and build the model."""
    problems = schema_problems(source, registry_schema(), SCHEMA_FILE, instance=_stringify_versions(source))
    diags = [_registry_problem(source, problem) for problem in problems]
    if not diags:
        diags += _check_version_texts(source)
    if diags:
        return Resolved(source, None, diags)
    return Resolved(source, build_registry(source), [])


def build_registry(source: SourceFile) -> Registry:
    """The model of a registry tree. `resolve` builds it only from a tree the schema accepted; on
    another (an older baseline, read leniently) it may raise AttributeError, KeyError, TypeError,
    ValueError or StopIteration."""
    root = source.root
    header = root.get("registry")
    plain = header.plain()
    return Registry(
        path=source.path,
        revision=plain["revision"],
        package=plain["package"],
        profiles=tuple(_profile(p) for p in _items(root, "profiles")),
        schema_revision=plain.get("schema_revision"),
        minimum_client_revision=plain.get("minimum_client_revision"),
        loc=root.loc,
        locs={**_locs(header), "registry": root.key_loc("registry"), "profiles": root.key_loc("profiles")},
    )
