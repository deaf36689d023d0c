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
        within = len(fd.package) + 1 if fd.package else 0   # where a name within the package starts
        protos: dict[str, object] = {}
        parts: dict[str, list] = {}   # a message's fields, an enum's values, a service's methods
        tops: list[tuple] = []        # (kind, full name, descriptor proto, comment) of the others
        for kind, full, proto, path, parent in walk(fd):
            comment = _comment(where.get(path))
            protos[full], parts[full] = proto, []
            if kind == "field":
                parts[parent].append(_field(proto, protos[parent], parent, comment))
            elif kind == "enum_value":
                parts[parent].append(EnumValueDoc(proto.name, proto.number, comment))
            elif kind == "rpc":
                parts[parent].append(MethodDoc(
                    proto.name, proto.input_type.lstrip("."), proto.output_type.lstrip("."),
                    proto.client_streaming, proto.server_streaming, comment, proto.options.deprecated))
            else:
                tops.append((kind, full, proto, comment))
        messages = tuple(MessageDoc(full, full[within:], comment, tuple(parts[full]))
                         for kind, full, proto, comment in tops
                         if kind == "message" and not proto.options.map_entry)
        enums = tuple(EnumDoc(full, full[within:], comment, tuple(parts[full]))
                      for kind, full, _, comment in tops if kind == "enum")
        services = tuple(ServiceDoc(full, proto.name, comment, tuple(parts[full]))
                         for kind, full, proto, comment in tops if kind == "service")
        docs.append(FileDoc(fd.name, fd.package, messages, enums, services))
    return docs


def _type_of(fdesc: descriptor_pb2.FieldDescriptorProto) -> tuple[str, bool]:
    """A field's type name (full for a message or enum, else the scalar's), and whether it names one."""
    if fdesc.type in (fdesc.TYPE_MESSAGE, fdesc.TYPE_ENUM):
        return fdesc.type_name.lstrip("."), True
    return scalar_names()[fdesc.type], False


def _field(fdesc: descriptor_pb2.FieldDescriptorProto, msg: descriptor_pb2.DescriptorProto, full: str,
           comment: str) -> FieldDoc:
    type_name, is_ref = _type_of(fdesc)
    oneof = msg.oneof_decl[fdesc.oneof_index].name \
        if fdesc.HasField("oneof_index") and not fdesc.proto3_optional else None
    label, map_types = "optional" if fdesc.proto3_optional else "", None
    if fdesc.label == fdesc.LABEL_REPEATED:
        label = "repeated"
        entry = next((n for n in msg.nested_type
                      if n.options.map_entry and type_name == f"{full}.{n.name}"), None)
        if entry is not None:
            (type_name, is_ref), label = _type_of(entry.field[1]), "map"
            map_types = (_type_of(entry.field[0])[0], type_name)
    return FieldDoc(fdesc.name, fdesc.number, type_name, is_ref, label, oneof, comment,
                    fdesc.options.deprecated, map_types)
