"""Generate JSON Schemas (draft 2020-12) of the proto3 JSON mapping, under `schemas/`.

So that frameworks in any language can validate what an engine answers, each schema accepts
exactly the JSON a proto3 JSON parser accepts (both field spellings, integers as numbers or
strings, enums by name or number, null as the default) plus what the registry says and a schema
can express: limit ranges and enum values, the core profile, capability messages only for
advertised profiles, and prerequisites. The rest is checked by the Python validators only (see
`openengine/validate/README.md`). Integer strings and Timestamps are held to the patterns of
`openengine.contractkit.jsonforms`, which the validators use too. Unknown `openengine.*` names and
majors are accepted, as clients must accept them (REQ-CAP-005).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from openengine.contractkit.naming import CANONICAL_NAME, enum_value_name
from oespec.generate import HEADER_TEXT, GenerationContext, GenerationError, Output, Problem
from oespec.registry.model import INTEGER_BOUNDS, Limit, Profile, Registry, VersionRange
from openengine.contractkit.jsonforms import TIMESTAMP_PATTERN, integer_pattern

SCHEMA_DIR = "schemas"
PACKAGE = "openengine.v1"
# Output file -> (root message, description).
ROOTS = {
    "capabilities.schema.json": ("Capabilities", "The answer of Discovery/GetCapabilities."),
    "server_info.schema.json": ("ServerInfo", "The answer of Control/GetServerInfo."),
    "model_info.schema.json": ("ModelInfo", "The answer of Control/GetModelInfo."),
    "load_info.schema.json": ("LoadInfo", "The answer of Control/GetLoad: one complete load snapshot."),
    "watch_load_response.schema.json": ("WatchLoadResponse", "One message of an Observability/WatchLoad stream."),
}
# The engine roles role-scoped profiles name: upstream's enum, with the proposal's additions.
ROLE_ENUM = "EngineRole"
_FLOAT = r"^(NaN|-?Infinity|[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)$"

_FD = FieldDescriptor
# Integer fields by their C++ type: the sint and fixed encodings read the same in JSON.
_INT_TYPES = {_FD.CPPTYPE_INT32: "int32", _FD.CPPTYPE_UINT32: "uint32", _FD.CPPTYPE_INT64: "int64",
              _FD.CPPTYPE_UINT64: "uint64"}
_SCALARS = {_FD.TYPE_BOOL: {"type": "boolean"}, _FD.TYPE_STRING: {"type": "string"},
            _FD.TYPE_BYTES: {"type": "string", "contentEncoding": "base64"}}
_BOUNDS = dict(INTEGER_BOUNDS, int64=(-(2**63), 2**63 - 1))
# Well-known types as the proto3 JSON mapping writes them.
WELL_KNOWN = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time", "pattern": TIMESTAMP_PATTERN,
                                  "description": "RFC 3339, UTC or with an offset"},
    "google.protobuf.Duration": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]{1,9})?s$"},
    "google.protobuf.Struct": {"type": "object"},
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array"},
    "google.protobuf.Empty": {"type": "object", "additionalProperties": False},
}


def _nullable(schema: dict) -> dict:
    """proto3 JSON reads null as the field's default."""
    return {"anyOf": [{"type": "null"}, schema]}


def _integer(kind: str, minimum=None, maximum=None) -> dict:
    lo, hi = _BOUNDS[kind]
    lo = lo if minimum is None else max(lo, minimum)
    hi = hi if maximum is None else min(hi, maximum)
    # Integers may be written as strings: the pattern checks their form and their range (digit
    # count and digit by digit), as minimum and maximum do for numbers.
    return {"type": ["integer", "string"], "minimum": lo, "maximum": hi, "pattern": integer_pattern(lo, hi)}


class SchemaBuilder:
    """Builds `$defs` for every message reachable from a root, with the registry's overlays."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self.defs: dict[str, Any] = {}
        # capability message full name -> profile; used to overlay limits.
        self.limit_profiles: dict[str, Profile] = {
            f"{registry.package}.{p.capability.message}": p for p in registry.profiles if p.capability}

    def ref(self, descriptor: Descriptor) -> dict:
        if descriptor.full_name not in self.defs:
            self.defs[descriptor.full_name] = {}   # placeholder: recursion ends here
            self.defs[descriptor.full_name] = self.message(descriptor)
        return {"$ref": f"#/$defs/{descriptor.full_name}"}

    # -- messages -----------------------------------------------------------------------------------
    def message(self, d: Descriptor) -> dict:
        if d.full_name in WELL_KNOWN:
            return dict(WELL_KNOWN[d.full_name])
        profile = self.limit_profiles.get(d.full_name)
        props: dict[str, Any] = {}
        rules: list[dict] = []
        for f in d.fields:
            limit = profile.limit(f.name) if profile else None
            props.update(dict.fromkeys((f.json_name, f.name), self.field(f, limit)))
            if f.json_name != f.name:
                rules.append({"not": {"required": [f.name, f.json_name]}})
        for oneof in d.oneofs:   # (a proto3 `optional` is a synthetic oneof of one field: no pairs)
            for a, b in itertools.combinations(oneof.fields, 2):
                rules.append({"not": {"allOf": [_present(a), _present(b)]}})
        out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
        if d.full_name == f"{PACKAGE}.ServiceProfile":   # REQ-CAP-001, REQ-CAP-002
            props.update(name={"type": "string", "pattern": CANONICAL_NAME},
                         major=_integer("uint32", minimum=1))
            out["required"] = ["name", "major"]
        elif d.full_name in (f"{PACKAGE}.Capabilities", f"{PACKAGE}.ModelCapabilities"):
            rules += self.capability_rules(d)
        if rules:
            out["allOf"] = rules
        return out

    # -- fields -------------------------------------------------------------------------------------
    def field(self, f: FieldDescriptor, limit: Limit | None) -> dict:
        sub = f.message_type
        if sub is not None and sub.GetOptions().map_entry:
            key, value = sub.fields_by_name["key"], sub.fields_by_name["value"]
            schema: dict[str, Any] = {"type": "object", "additionalProperties": self.element(value, None)}
            if key.cpp_type in _INT_TYPES:
                lo, hi = _BOUNDS[_INT_TYPES[key.cpp_type]]
                schema["propertyNames"] = {"pattern": integer_pattern(lo, hi)}
            return _nullable(schema)
        element = self.element(f, limit)
        schema = {"type": "array", "items": element} if f.is_repeated else element
        if limit is not None:
            schema = schema | {"description": limit.description.strip(), "default": self.default_json(f, limit)}
        return _nullable(schema)

    def element(self, f: FieldDescriptor, limit: Limit | None) -> dict:
        if f.message_type is not None:
            return self.ref(f.message_type)
        if f.enum_type is not None:
            if limit is not None:
                names, numbers = self.limit_enum(f, limit)
                return {"anyOf": [{"type": "string", "enum": names}, {"type": "integer", "enum": numbers}]}
            return {"anyOf": [{"type": "string", "enum": [v.name for v in f.enum_type.values]},
                              _integer("int32") | {"type": "integer"}]}
        if f.cpp_type in _INT_TYPES:
            return _integer(_INT_TYPES[f.cpp_type], *((limit.minimum, limit.maximum) if limit else ()))
        if f.type in _SCALARS:
            return dict(_SCALARS[f.type])
        if f.type in (_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT):
            bounds = {"minimum": limit.minimum, "maximum": limit.maximum} if limit else {}
            return {"type": ["number", "string"], "pattern": _FLOAT} | {
                k: v for k, v in bounds.items() if v is not None}
        raise GenerationError("jsonschemas", f"field {f.full_name} has a type the schema cannot map")

    def limit_enum(self, f: FieldDescriptor, limit: Limit) -> tuple[list[str], list[int]]:
        by_name = {v.name: v.number for v in f.enum_type.values}
        names = [enum_value_name(f.enum_type.name, value) for value in limit.type.enum_values]
        missing = [n for n in names if n not in by_name]
        if missing:
            lacks = f"{f.enum_type.full_name} lacks {', '.join(missing)}"
            raise GenerationError("jsonschemas", lacks, problems=[Problem(
                self.registry.path, limit.at("values"), lacks,
                "run the proto generator too (oespec generate without --only)")])
        return names, [by_name[n] for n in names]

    def default_json(self, f: FieldDescriptor, limit: Limit):
        if f.enum_type is not None:
            if isinstance(limit.default, list):
                return [enum_value_name(f.enum_type.name, v) for v in limit.default]
            return enum_value_name(f.enum_type.name, str(limit.default))
        if f.cpp_type in (_FD.CPPTYPE_INT64, _FD.CPPTYPE_UINT64):
            return str(limit.default)   # proto3 JSON prints 64-bit integers as strings
        return limit.default

    # -- profile-level rules ----------------------------------------------------------------------
    def capability_rules(self, d: Descriptor) -> list[dict]:
        registry = self.registry
        rules: list[dict] = []
        is_root = d.full_name == f"{PACKAGE}.Capabilities"
        if is_root and registry.core is not None:
            rules.append(_advertised(registry.core.name))
        fields = {f.name: f for f in d.fields}
        for p in registry.profiles:
            if p.capability is None or p.capability.field not in fields:
                continue
            rules.append({"if": {"not": _advertised(p.name)},
                          "then": {"not": _present(fields[p.capability.field])},
                          "description": f"{p.capability.field} only when {p.name} is listed (REQ-CAP-006)"})
        if is_root:
            for p in registry.profiles:
                for req in p.requires:
                    rules.append({"if": _advertised(p.name),
                                  "then": {"required": ["profiles"], "properties": {"profiles": {
                                      "type": "array",
                                      "contains": {"allOf": [_named(req.profile), _version_in(req.range)]}}}},
                                  "description": f"{p.name} requires {req.profile} {req.range} (REQ-CAP-010)"})
        return rules


def _present(f: FieldDescriptor) -> dict:
    """The field is given (under either name) with a value other than null."""
    alternatives = [{"required": [n], "properties": {n: {"not": {"type": "null"}}}}
                    for n in dict.fromkeys((f.json_name, f.name))]
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def _named(name: str) -> dict:
    return {"required": ["name"], "properties": {"name": {"const": name}}}


def _advertised(name: str) -> dict:
    return {"required": ["profiles"], "properties": {"profiles": {"type": "array", "contains": _named(name)}}}


def _major(schema: dict) -> dict:
    return {"required": ["major"], "properties": {"major": {"type": "integer"} | schema}}


def _minor(schema: dict, zero_satisfies: bool) -> dict:
    given = {"required": ["minor"], "properties": {"minor": {"type": "integer"} | schema}}
    if not zero_satisfies:
        return given
    return {"anyOf": [{"not": {"required": ["minor"]}}, {"properties": {"minor": {"type": "null"}}}, given]}


def _comparator(op: str, major: int, minor: int) -> dict:
    """(major, minor) of a ServiceProfile `op` the bound, minor defaulting to 0."""
    if op == "==":
        return {"allOf": [_major({"const": major}), _minor({"const": minor}, minor == 0)]}
    if op in (">=", ">"):
        low = minor if op == ">=" else minor + 1
        same = {"allOf": [_major({"const": major}), _minor({"minimum": low}, low <= 0)]}
        return {"anyOf": [_major({"minimum": major + 1}), same]}
    high = minor if op == "<=" else minor - 1
    options = [_major({"maximum": major - 1})]
    if high >= 0:
        options.append({"allOf": [_major({"const": major}), _minor({"maximum": high}, True)]})
    return {"anyOf": options}


def _version_in(rng: VersionRange) -> dict:
    return {"allOf": [_comparator(op, v.major, v.minor) for op, v in rng.comparators]}


def check_roles(registry: Registry, fds) -> None:
    """Every engine role a role-scoped profile names is a value of the contract's EngineRole: each
    one missing is a located problem (the runtime validators map wire numbers back to these names)."""
    found = [(e, f"proto/{f.name}") for f in fds.file if f.package == PACKAGE for e in f.enum_type
             if e.name == ROLE_ENUM]
    if not found:
        raise GenerationError("jsonschemas", "the registry names enum values the contract lacks", problems=[
            Problem(registry.path, registry.loc, f"enum {ROLE_ENUM} (the engine roles that role-scoped "
                    "profiles name) is not declared by any proto of openengine.v1",
                    f"restore upstream's enum {ROLE_ENUM} in proto/openengine/v1/server.proto")])
    roles, where = {v.name for v in found[0][0].value}, found[0][1]
    problems = [Problem(registry.path, p.locs.get(f"roles[{index}]", p.at("roles")),
                        f"{p.name} names role {role}, but enum {ROLE_ENUM} in {where} has no {value} "
                        f"(it has {', '.join(sorted(roles)) or 'no values'})",
                        f"restore {value} in {where} (a wire value is never renamed or removed), "
                        "or stop naming the role here")
                for p in registry.profiles if p.scope.kind == "role"
                for index, role in enumerate(p.scope.roles)
                for value in [enum_value_name(ROLE_ENUM, role)] if value not in roles]
    if problems:
        raise GenerationError("jsonschemas", "the registry names roles the contract lacks", problems=problems)


# Hand-written schemas of the runtime's input files (the runtime validates with its packaged copy),
# published beside the generated ones: package path -> published name.
INPUT_SCHEMAS = {
    "openengine/engine/engine_config.schema.json": "engine_config.schema.json",
    "openengine/conformance/expected_failures.schema.json": "expected_failures.schema.json",
}


def published_input_schemas(root) -> list[Output]:
    """Each input-file schema of the runtime in `root`, as published under schemas/: the same
    document, marked generated."""
    outputs = []
    for source, name in INPUT_SCHEMAS.items():
        path = Path(root) / source
        if not path.is_file():
            continue   # a registry checkout without the reference runtime publishes none
        try:
            schema = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise GenerationError("jsonschemas", f"{source} is not valid JSON: {err}") from None
        outputs.append(Output(f"{SCHEMA_DIR}/{name}", _published({"$comment": HEADER_TEXT, **schema})))
    return outputs


def _published(schema: dict) -> str:
    """A schema as JSON text, its header (`$comment`) on the first line as on every generated file
    (`make check` looks there)."""
    return "{" + json.dumps(schema, indent=2)[1:].lstrip() + "\n"


def generate(ctx: GenerationContext) -> list[Output]:
    fds = ctx.compiled("jsonschemas")[0]
    check_roles(ctx.registry, fds)
    pool = descriptor_pool.DescriptorPool()
    for file in fds.file:
        pool.Add(file)
    outputs = []
    for filename, (message, description) in ROOTS.items():
        builder = SchemaBuilder(ctx.registry)
        try:
            ref = builder.ref(pool.FindMessageTypeByName(f"{PACKAGE}.{message}"))
        except KeyError:
            raise GenerationError("jsonschemas",
                                  f"message {PACKAGE}.{message} is not in the contract") from None
        schema = {"$comment": HEADER_TEXT, "$schema": "https://json-schema.org/draft/2020-12/schema",
                  "title": f"{PACKAGE}.{message} (proto3 JSON)",
                  "description": f"{description} Generated from profiles.yaml; see openengine/validate/"
                                 "README.md for the rules only the Python validators check.",
                  "$ref": ref["$ref"], "$defs": dict(sorted(builder.defs.items()))}
        outputs.append(Output(f"{SCHEMA_DIR}/{filename}", _published(schema)))
    return outputs + published_input_schemas(ctx.root)
