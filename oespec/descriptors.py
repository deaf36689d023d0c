"""The descriptor model: a compiled `FileDescriptorSet` as typed records with source positions.

`oespec.check` compares the registry against it (every RPC, message and field, located at its
line in the .proto). `walk` is the one reading of a compiled file on the toolkit side: these
records, upstream's elements (`oespec.upstream`), the ownership graph (`oespec.breaking`) and the
reference pages (`oespec.generate.protodoc`) are built from it. (The runtime reads its live
descriptors through `openengine.contract`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Iterator

from openengine.contractkit.locations import Loc
from openengine.contractkit.naming import streaming_shape

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2


@lru_cache(maxsize=1)
def scalar_names() -> dict[int, str]:
    """Field type number -> proto type word (`uint32`, `string`, ...); message and enum fields are
    named by their type instead. Built on first use: a command that reuses a generation plan never
    imports protobuf."""
    from google.protobuf import descriptor_pb2

    return {value: name.removeprefix("TYPE_").lower()
            for name, value in descriptor_pb2.FieldDescriptorProto.Type.items()}


@dataclass(frozen=True)
class MethodInfo:
    name: str                 # package.Service/Method
    request: str              # full message name, no leading dot
    response: str
    client_streaming: bool
    server_streaming: bool
    file: str
    loc: Loc

    @property
    def streaming(self) -> str:
        return streaming_shape(self.client_streaming, self.server_streaming)


@dataclass(frozen=True)
class FieldInfo:
    name: str
    number: int
    type: str                 # scalar name, or full enum/message name
    repeated: bool
    explicit_presence: bool   # proto3 `optional`
    file: str
    loc: Loc


@dataclass(frozen=True)
class EnumInfo:
    name: str
    values: dict[str, tuple[int, Loc]]   # value name -> (number, where it is declared)
    file: str
    loc: Loc


@dataclass(frozen=True)
class MessageInfo:
    name: str
    fields: dict[str, FieldInfo]
    file: str
    loc: Loc


@dataclass
class Contract:
    proto_root: str
    methods: dict[str, MethodInfo] = field(default_factory=dict)
    messages: dict[str, MessageInfo] = field(default_factory=dict)
    services: dict[str, tuple[str, Loc]] = field(default_factory=dict)
    enums: dict[str, EnumInfo] = field(default_factory=dict)
    # The request_limit options of request messages (filled by the check stage's loader).
    request_limits: list = field(default_factory=list)
    # What upstream OpenEngine v1 at the pin defines, read from its image (no source positions);
    # None when the check runs without the pin.
    upstream: "Contract | None" = None


def walk(fdp: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[str, str, object, tuple[int, ...], str]]:
    """Every element of one compiled file, depth first in declaration order: (kind, full name, its
    descriptor proto, its source-info path, the enclosing element's full name). Kinds are message,
    field, enum, enum_value, service and rpc; an rpc is named `package.Service/Method`."""
    def enum(e, prefix, path):
        full = f"{prefix}.{e.name}" if prefix else e.name
        yield "enum", full, e, path, prefix
        for j, v in enumerate(e.value):
            yield "enum_value", f"{full}.{v.name}", v, path + (2, j), full

    def message(m, prefix, path):
        full = f"{prefix}.{m.name}" if prefix else m.name
        yield "message", full, m, path, prefix
        for j, f in enumerate(m.field):
            yield "field", f"{full}.{f.name}", f, path + (2, j), full
        for j, nested in enumerate(m.nested_type):
            yield from message(nested, full, path + (3, j))
        for j, e in enumerate(m.enum_type):
            yield from enum(e, full, path + (4, j))

    for i, m in enumerate(fdp.message_type):
        yield from message(m, fdp.package, (4, i))
    for i, e in enumerate(fdp.enum_type):
        yield from enum(e, fdp.package, (5, i))
    for i, s in enumerate(fdp.service):
        full = f"{fdp.package}.{s.name}" if fdp.package else s.name
        yield "service", full, s, (6, i), fdp.package
        for j, m in enumerate(s.method):
            yield "rpc", f"{full}/{m.name}", m, (6, i, 2, j), full


def source_locs(fdp: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], Loc]:
    """Source-info path -> where it starts (1-based); empty for a file compiled without source info."""
    return {tuple(loc.path): Loc(loc.span[0] + 1, loc.span[1] + 1)
            for loc in fdp.source_code_info.location if len(loc.span) >= 2}


def add_file(contract: Contract, fdp: descriptor_pb2.FileDescriptorProto, display: str) -> None:
    """Add one compiled file's messages, enums, services and methods, located in `display`."""
    locs = source_locs(fdp)
    for kind, full, proto, path, parent in walk(fdp):
        loc = locs.get(path, Loc(1, 1))
        if kind == "message":
            contract.messages[full] = MessageInfo(full, {}, display, loc)
        elif kind == "field":
            ftype = proto.type_name.lstrip(".") if proto.type_name else scalar_names()[proto.type]
            contract.messages[parent].fields[proto.name] = FieldInfo(
                proto.name, proto.number, ftype, proto.label == proto.LABEL_REPEATED, proto.proto3_optional,
                display, loc)
        elif kind == "enum":
            contract.enums[full] = EnumInfo(full, {}, display, loc)
        elif kind == "enum_value":
            contract.enums[parent].values[proto.name] = (proto.number, loc)
        elif kind == "service":
            contract.services[full] = (display, loc)
        else:
            contract.methods[full] = MethodInfo(
                full, proto.input_type.lstrip("."), proto.output_type.lstrip("."), proto.client_streaming,
                proto.server_streaming, display, loc)


def standard_health(contract: Contract) -> None:
    """The standard health service is referenced, never redefined: take it from grpcio-health-checking."""
    from google.protobuf import descriptor_pb2
    from grpc_health.v1 import health_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    health_pb2.DESCRIPTOR.CopyToProto(fdp)
    add_file(contract, fdp, f"(grpcio-health-checking) {fdp.name}")
