"""Proto3 JSON (as grpcurl prints it) to protobuf messages, reporting every bad field.

`json_format.ParseDict` stops at the first error. Here each field is converted on its own, so a
document with three wrong fields yields three violations (with proto field paths) and a message
holding everything that was valid; the validators then judge that message.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from openengine.contractkit.jsonforms import TIMESTAMP_PATTERN, integer_pattern, matches
from openengine.v1 import options_pb2
from openengine.validate._rules import Violation, violation

# Messages whose proto3 JSON form is not an object of their fields.
_SPECIAL_JSON = {
    "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.Struct",
    "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.FieldMask",
    "google.protobuf.Any", "google.protobuf.Empty",
} | {f"google.protobuf.{w}Value" for w in ("Bool", "Int32", "Int64", "UInt32", "UInt64", "Float",
                                           "Double", "String", "Bytes")}


def _short_error(err: Exception) -> str:
    text = str(err)
    while text.startswith("Failed to parse ") and " field: " in text:
        text = text.split(" field: ", 1)[1]
    return text.split(" at ", 1)[0].rstrip(".") if " at " in text else text.rstrip(".")


def _fields(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    """A message's fields by proto name and by JSON name."""
    return {key: f for f in descriptor.fields for key in (f.name, f.json_name)}


_INT_BOUNDS = {
    **dict.fromkeys((FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32),
                    (-(2**31), 2**31 - 1)),
    **dict.fromkeys((FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32), (0, 2**32 - 1)),
    **dict.fromkeys((FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64),
                    (-(2**63), 2**63 - 1)),
    **dict.fromkeys((FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64), (0, 2**64 - 1)),
}


def _form_problem(field: FieldDescriptor, value: Any) -> str | None:
    """What is wrong with the form of a string the protobuf parser would take but the proto3 JSON
    mapping (and the JSON Schemas, `openengine.contractkit.jsonforms`) does not: an integer string that is not
    plain decimal digits within the type's range, a Timestamp that is not a real RFC 3339 time."""
    values = value if field.is_repeated and isinstance(value, list) else [value]
    for item in values:
        if not isinstance(item, str):
            continue
        if field.message_type is not None and field.message_type.full_name == "google.protobuf.Timestamp":
            if not matches(TIMESTAMP_PATTERN, item):
                return (f"{item!r} is not an RFC 3339 time (YYYY-MM-DDThh:mm:ss[.fraction]Z or an offset, "
                        "with a real date and time of day)")
        elif field.enum_type is None and field.type in _INT_BOUNDS:
            low, high = _INT_BOUNDS[field.type]
            if not matches(integer_pattern(low, high), item):
                return f"{item!r} is not a decimal integer within {low}..{high}"
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _clean(obj: Any, descriptor: Descriptor, path: str, out: list[Violation]) -> dict | None:
    """A copy of `obj` with only the fields ParseDict accepts; a violation for each other one."""
    if not isinstance(obj, dict):
        out.append(violation("OEV002", path, obj, f"a JSON object ({descriptor.name})",
                             f"expected a JSON object for {descriptor.full_name}"))
        return None
    keys = _fields(descriptor)
    clean: dict[str, Any] = {}
    used: dict[str, str] = {}
    oneofs: dict[str, str] = {}
    for key, value in obj.items():
        field = keys.get(key)
        if field is None:
            out.append(violation("OEV002", _join(path, str(key)), value, f"a field of {descriptor.full_name}",
                                 f"{descriptor.full_name} has no field {key!r}"))
            continue
        fpath = _join(path, field.name)
        if field.name in used:
            out.append(violation("OEV002", fpath, value, "the field once",
                                 f"{field.name} is given twice (as {used[field.name]!r} and {key!r})"))
            continue
        used[field.name] = key
        if value is None:
            continue   # proto3 JSON: null means the field's default
        oneof = field.containing_oneof
        if oneof is not None and not oneof.name.startswith("_"):   # `_name`: proto3 `optional`
            if oneof.name in oneofs:
                out.append(violation("OEV002", fpath, value, f"one field of oneof {oneof.name}",
                                     f"{field.name} and {oneofs[oneof.name]} are both set, but only one "
                                     f"of oneof {oneof.name} may be"))
                continue
            oneofs[oneof.name] = field.name
        sub = field.message_type
        is_map = sub is not None and sub.GetOptions().map_entry
        if sub is not None and not is_map and sub.full_name not in _SPECIAL_JSON:
            if field.is_repeated:
                if not isinstance(value, list):
                    out.append(violation("OEV002", fpath, value, "a JSON array", f"{field.name} must be a list"))
                    continue
                items = []
                for i, item in enumerate(value):
                    if item is None:
                        out.append(violation("OEV002", f"{fpath}[{i}]", None, "an object",
                                             "null is not allowed as an element of a list"))
                        continue
                    cleaned = _clean(item, sub, f"{fpath}[{i}]", out)
                    if cleaned is not None:
                        items.append(cleaned)
                clean[field.name] = items
            else:
                cleaned = _clean(value, sub, fpath, out)
                if cleaned is not None:
                    clean[field.name] = cleaned
            continue
        problem = _form_problem(field, value)
        try:
            if problem is None:
                json_format.ParseDict({field.name: value}, message_factory.GetMessageClass(descriptor)())
        except (json_format.ParseError, ValueError, TypeError) as err:
            problem = _short_error(err)
        if problem is not None:
            rule = "OEV113" if field.GetOptions().HasExtension(options_pb2.limit) else "OEV002"
            if field.enum_type is not None:   # the names proto3 JSON accepts, UNSPECIFIED left out
                problem = f"{problem}; valid values: " + ", ".join(
                    v.name for v in field.enum_type.values if v.number != 0)
            type_name = (field.enum_type.name if field.enum_type else
                         sub.full_name if sub else _TYPE_NAMES.get(field.type, "value"))
            out.append(violation(rule, fpath, value, ("list of " if field.is_repeated
                                                      else "") + type_name, problem))
            continue
        clean[field.name] = value
    return clean


# Scalar types by name as the proto writes them (`TYPE_INT32` -> `int32`); bytes are base64 in JSON.
_TYPE_NAMES = {getattr(FieldDescriptor, name): name.removeprefix("TYPE_").lower()
               for name in dir(FieldDescriptor) if name.startswith("TYPE_")}
_TYPE_NAMES[FieldDescriptor.TYPE_BYTES] = "bytes (base64)"


def message_from_json(obj: Any, message_class, *, path: str = ""):
    """Convert a proto3 JSON value to `message_class`. Returns (message, violations): every field
    that could not be converted is reported and left out of the message."""
    out: list[Violation] = []
    cleaned = _clean(obj, message_class.DESCRIPTOR, path, out)
    msg = message_class()
    if cleaned is not None:
        try:
            json_format.ParseDict(cleaned, msg)
        except json_format.ParseError as err:   # a combination the per-field pass could not see
            out.append(violation("OEV002", path, None, message_class.DESCRIPTOR.full_name, _short_error(err)))
    return msg, out
