"""The descriptor model: a compiled `FileDescriptorSet` as typed records with source positions.

`oespec.check` compares the registry against it (every RPC, message and field, located at its
line in the .proto); anything else that needs the compiled contract as data builds on the same
records, so there is one reading of descriptors on the toolkit side. (The runtime reads its live
descriptors through `openengine.contract`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

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


def add_file(contract: Contract, fdp: descriptor_pb2.FileDescriptorProto, display: str) -> None:
    """Add one compiled file's messages, services and methods, located in `display`."""
    locs = {tuple(loc.path): Loc(loc.span[0] + 1, loc.span[1] + 1)
            for loc in fdp.source_code_info.location if len(loc.span) >= 2}
    package = fdp.package

    def add_enum(enum: descriptor_pb2.EnumDescriptorProto, prefix: str, path: tuple[int, ...]):
        full = f"{prefix}.{enum.name}"
        values = {v.name: (v.number, locs.get(path + (2, i), Loc(1, 1))) for i, v in enumerate(enum.value)}
        contract.enums[full] = EnumInfo(full, values, display, locs.get(path, Loc(1, 1)))

    def add_message(msg: descriptor_pb2.DescriptorProto, prefix: str, path: tuple[int, ...]):
        full = f"{prefix}.{msg.name}" if prefix else msg.name
        fields = {}
        for i, f in enumerate(msg.field):
            ftype = f.type_name.lstrip(".") if f.type_name else scalar_names()[f.type]
            fields[f.name] = FieldInfo(f.name, f.number, ftype, f.label == f.LABEL_REPEATED,
                                       f.proto3_optional, display, locs.get(path + (2, i), Loc(1, 1)))
        contract.messages[full] = MessageInfo(full, fields, display, locs.get(path, Loc(1, 1)))
        for j, nested in enumerate(msg.nested_type):
            add_message(nested, full, path + (3, j))
        for j, enum in enumerate(msg.enum_type):
            add_enum(enum, full, path + (4, j))

    for i, msg in enumerate(fdp.message_type):
        add_message(msg, package, (4, i))
    for i, enum in enumerate(fdp.enum_type):
        add_enum(enum, package, (5, i))
    for i, svc in enumerate(fdp.service):
        service = f"{package}.{svc.name}"
        contract.services[service] = (display, locs.get((6, i), Loc(1, 1)))
        for j, m in enumerate(svc.method):
            name = f"{service}/{m.name}"
            contract.methods[name] = MethodInfo(name, m.input_type.lstrip("."), m.output_type.lstrip("."),
                                                m.client_streaming, m.server_streaming, display,
                                                locs.get((6, i, 2, j), Loc(1, 1)))


def standard_health(contract: Contract) -> None:
    """The standard health service is referenced, never redefined: take it from grpcio-health-checking."""
    from google.protobuf import descriptor_pb2
    from grpc_health.v1 import health_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    health_pb2.DESCRIPTOR.CopyToProto(fdp)
    add_file(contract, fdp, f"(grpcio-health-checking) {fdp.name}")
