"""The proto files as plain data: the one view model of the protos.

The generator builds it from the registry and prints it as `.proto` text (`oespec.generate.proto`);
`describe` reads it back from a compiled descriptor set for the reference pages, with the comments
from the source info (protoc `--include_source_info`), so the reference shows exactly what the
`.proto` files say. Only files of the given sources are described; imports (google/protobuf/...)
are referred to by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import descriptor_pb2

from oespec.descriptors import scalar_names, walk


# A text-format message literal as (field, value) pairs; a value is the literal text of a scalar
# (`"1.0"`, `true`, `2`) or a nested literal.
Literal = tuple[tuple[str, "str | Literal"], ...]


@dataclass(frozen=True)
class Option:
    """A custom option as the generator writes it: `(openengine.v1.limit) = {...}`."""

    name: str
    value: "str | Literal"


@dataclass(frozen=True)
class FieldDoc:
    name: str
    number: int
    type: str                 # scalar name or type name (full, without the leading dot, when described)
    is_reference: bool        # type names a message or enum
    label: str                # "", "repeated", "optional", "map"
    oneof: str | None
    comment: str
    deprecated: bool = False
    map_types: tuple[str, str] | None = None    # (key, value) of a map field
    options: tuple[Option, ...] = ()            # generated files: the field's custom options


@dataclass(frozen=True)
class EnumValueDoc:
    name: str
    number: int
    comment: str


@dataclass(frozen=True)
class EnumDoc:
    full_name: str
    name: str                 # name within the package, e.g. `WatchLoadResponse.Kind`
    comment: str
    values: tuple[EnumValueDoc, ...]


@dataclass(frozen=True)
class MessageDoc:
    full_name: str
    name: str
    comment: str
    fields: tuple[FieldDoc, ...]
    options: tuple[Option, ...] = ()


@dataclass(frozen=True)
class MethodDoc:
    name: str
    request: str
    response: str
    client_streaming: bool
    server_streaming: bool
    comment: str
    deprecated: bool = False
    options: tuple[Option, ...] = ()


@dataclass(frozen=True)
class ServiceDoc:
    full_name: str
    name: str
    comment: str
    methods: tuple[MethodDoc, ...]
    options: tuple[Option, ...] = ()


@dataclass(frozen=True)
class FileDoc:
    path: str
    package: str
    messages: tuple[MessageDoc, ...]
    enums: tuple[EnumDoc, ...]
    services: tuple[ServiceDoc, ...]
    imports: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()


def _comment(loc: descriptor_pb2.SourceCodeInfo.Location | None) -> str:
    if loc is None:
        return ""
    text = loc.leading_comments or loc.trailing_comments
    lines = [line.strip() for line in text.strip("\n").splitlines()]
    # Keep blank lines (paragraph breaks); fold the rest later when rendering.
    return "\n".join(lines).strip()


def describe(fds: descriptor_pb2.FileDescriptorSet, files: set[str]) -> list[FileDoc]:
    """Docs for the files of `fds` whose names are in `files`, in name order."""
    docs = []
    for fd in sorted(fds.file, key=lambda f: f.name):
        if fd.name not in files:
            continue
        where = {tuple(loc.path): loc for loc in fd.source_code_info.location}
        seen: dict[str, tuple[str, object, str]] = {}   # full name -> (kind, descriptor proto, comment)
        parts: dict[str, list] = {}   # a message's fields, an enum's values, a service's methods
        for kind, full, proto, path, parent in walk(fd):
            comment = _comment(where.get(path))
            seen[full] = (kind, proto, comment)
            parts[full] = []
            if kind == "field":
                parts[parent].append(_field(proto, seen[parent][1], parent, comment))
            elif kind == "enum_value":
                parts[parent].append(EnumValueDoc(proto.name, proto.number, comment))
            elif kind == "rpc":
                parts[parent].append(MethodDoc(
                    proto.name, proto.input_type.lstrip("."), proto.output_type.lstrip("."),
                    proto.client_streaming, proto.server_streaming, comment, proto.options.deprecated))

        def of_kind(kind: str) -> list:
            """(full name, descriptor proto, comment, parts) of each element of `kind`, in order."""
            return [(full, proto, comment, tuple(parts[full])) for full, (k, proto, comment) in seen.items()
                    if k == kind]

        within = len(fd.package) + 1 if fd.package else 0   # where a name within the package starts
        messages = tuple(MessageDoc(full, full[within:], comment, fields)
                         for full, proto, comment, fields in of_kind("message")
                         if not proto.options.map_entry)
        enums = tuple(EnumDoc(full, full[within:], comment, values)
                      for full, _, comment, values in of_kind("enum"))
        services = tuple(ServiceDoc(full, proto.name, comment, methods)
                         for full, proto, comment, methods in of_kind("service"))
        docs.append(FileDoc(fd.name, fd.package, messages, enums, services))
    return docs


def _field(fdesc: descriptor_pb2.FieldDescriptorProto, msg: descriptor_pb2.DescriptorProto, full: str,
           comment: str) -> FieldDoc:
    F = descriptor_pb2.FieldDescriptorProto
    is_ref = fdesc.type in (F.TYPE_MESSAGE, F.TYPE_ENUM)
    type_name = fdesc.type_name.lstrip(".") if is_ref else scalar_names()[fdesc.type]
    oneof = None
    if fdesc.HasField("oneof_index") and not fdesc.proto3_optional:
        oneof = msg.oneof_decl[fdesc.oneof_index].name
    label = ""
    map_types = None
    if fdesc.label == F.LABEL_REPEATED:
        entry = next((n for n in msg.nested_type
                      if n.options.map_entry and type_name == f"{full}.{n.name}"), None)
        if entry is not None:
            key, value = entry.field[0], entry.field[1]
            map_types = (scalar_names()[key.type],
                         value.type_name.lstrip(".") if value.type in (F.TYPE_MESSAGE, F.TYPE_ENUM)
                         else scalar_names()[value.type])
            label = "map"
            is_ref = value.type in (F.TYPE_MESSAGE, F.TYPE_ENUM)
            type_name = map_types[1]
        else:
            label = "repeated"
    elif fdesc.proto3_optional:
        label = "optional"
    return FieldDoc(fdesc.name, fdesc.number, type_name, is_ref, label, oneof, comment,
                    fdesc.options.deprecated, map_types)
