"""Every message of the contract survives binary and JSON encoding, through the built bindings.

The messages are not listed by hand: the test walks the descriptors of every file in package
openengine.v1, builds instances with every field set to a non-default value (one instance per
oneof alternative), and round-trips each. A new message or field is covered the moment it lands.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto" / "openengine" / "v1"
PACKAGE = "openengine.v1"
MAX_DEPTH = 4


def _proto_files() -> list[str]:
    return sorted(p.stem for p in PROTO_DIR.glob("*.proto"))


def _binding(stem: str):
    try:
        return importlib.import_module(f"openengine.v1.{stem}_pb2")
    except ModuleNotFoundError as err:  # a clear cause instead of a bare import error
        raise AssertionError(f"no binding for proto/openengine/v1/{stem}.proto ({err}); "
                             "run `make bindings`") from None


def _files() -> list[FileDescriptor]:
    return [_binding(stem).DESCRIPTOR for stem in _proto_files()]


def _messages(descriptor: Descriptor | FileDescriptor):
    for msg in descriptor.message_types_by_name.values() if isinstance(descriptor, FileDescriptor) \
            else descriptor.nested_types:
        if msg.GetOptions().map_entry:
            continue
        yield msg
        yield from _messages(msg)


def _all_messages() -> list[Descriptor]:
    out = [m for f in _files() if f.package == PACKAGE for m in _messages(f)]
    return sorted(out, key=lambda m: m.full_name)


MESSAGES = _all_messages()


# ---------------------------------------------------------------------------------------------
# Generic population

_SCALAR_VALUES = {
    FieldDescriptor.TYPE_BOOL: True,
    FieldDescriptor.TYPE_STRING: "h\u00e9llo \u2713",
    FieldDescriptor.TYPE_BYTES: b"\x00\xff\x10",
    FieldDescriptor.TYPE_INT32: -(2**31),
    FieldDescriptor.TYPE_SINT32: -7,
    FieldDescriptor.TYPE_SFIXED32: -7,
    FieldDescriptor.TYPE_INT64: -(2**63),
    FieldDescriptor.TYPE_SINT64: -7,
    FieldDescriptor.TYPE_SFIXED64: -7,
    FieldDescriptor.TYPE_UINT32: 2**32 - 1,
    FieldDescriptor.TYPE_FIXED32: 2**32 - 1,
    # Above 2**53: JSON must carry 64-bit integers as strings to keep them exact.
    FieldDescriptor.TYPE_UINT64: 2**64 - 1,
    FieldDescriptor.TYPE_FIXED64: 2**64 - 1,
    FieldDescriptor.TYPE_FLOAT: 0.5,        # exactly representable in 32 bits
    FieldDescriptor.TYPE_DOUBLE: 1.0e300,
}

_SECOND_VALUES = {
    FieldDescriptor.TYPE_BOOL: False,
    FieldDescriptor.TYPE_STRING: "second",
    FieldDescriptor.TYPE_BYTES: b"",
    FieldDescriptor.TYPE_FLOAT: -2.25,
    FieldDescriptor.TYPE_DOUBLE: -0.125,
}


def _scalar(field: FieldDescriptor, second: bool = False):
    if field.type == FieldDescriptor.TYPE_ENUM:
        values = field.enum_type.values
        return values[-1].number if not second else values[min(1, len(values) - 1)].number
    if second:
        return _SECOND_VALUES.get(field.type, 1)
    return _SCALAR_VALUES[field.type]


def _populate_well_known(msg: Message) -> bool:
    name = msg.DESCRIPTOR.full_name
    if name == "google.protobuf.Timestamp":
        msg.seconds, msg.nanos = 1_767_225_600, 123_000_000
        return True
    if name == "google.protobuf.Duration":
        msg.seconds, msg.nanos = 90, 500_000_000
        return True
    return False


def _populate(msg: Message, variant: int, depth: int = 0) -> None:
    """Set every field of `msg`; of each oneof, only alternative `variant` (modulo its size)."""
    if _populate_well_known(msg):
        return
    desc = msg.DESCRIPTOR
    chosen = {}
    for oneof in desc.oneofs:
        if oneof.fields and not (len(oneof.fields) == 1 and oneof.fields[0].has_presence
                                 and oneof.name.startswith("_")):
            chosen[oneof.name] = oneof.fields[variant % len(oneof.fields)].name
    for field in desc.fields:
        real_oneof = field.containing_oneof
        if real_oneof is not None and real_oneof.name in chosen and chosen[real_oneof.name] != field.name:
            continue
        _set_field(msg, field, variant, depth)


def _set_field(msg: Message, field: FieldDescriptor, variant: int, depth: int) -> None:
    is_message = field.type == FieldDescriptor.TYPE_MESSAGE
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        container = getattr(msg, field.name)
        for second in (False, True):
            key = _scalar(key_field, second)
            if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                if depth < MAX_DEPTH:
                    _populate(container[key], variant, depth + 1)
            else:
                container[key] = _scalar(value_field, second)
        return
    if field.is_repeated:
        container = getattr(msg, field.name)
        if is_message:
            if depth < MAX_DEPTH:
                for _ in range(2):
                    _populate(container.add(), variant, depth + 1)
        else:
            container.extend([_scalar(field), _scalar(field, second=True)])
        return
    if is_message:
        child = getattr(msg, field.name)
        child.SetInParent()  # present even when it has no fields (an empty marker message)
        if depth < MAX_DEPTH:
            _populate(child, variant, depth + 1)
        return
    setattr(msg, field.name, _scalar(field))


def _variants(desc: Descriptor) -> int:
    """Instances needed so that every alternative of every oneof, at any depth, is set once."""
    seen: set[str] = set()

    def widest(d: Descriptor, depth: int) -> int:
        if d.full_name in seen or depth > MAX_DEPTH:
            return 1
        seen.add(d.full_name)
        n = max([len(o.fields) for o in d.oneofs] + [1])
        for f in d.fields:
            if f.message_type is not None:
                n = max(n, widest(f.message_type, depth + 1))
        seen.discard(d.full_name)
        return n

    return widest(desc, 0)


def _instances(desc: Descriptor) -> list[Message]:
    cls = GetMessageClass(desc)
    out = []
    for variant in range(_variants(desc)):
        msg = cls()
        _populate(msg, variant)
        out.append(msg)
    return out


# ---------------------------------------------------------------------------------------------
# Tests


def test_every_proto_file_has_a_binding_in_the_package():
    stems = _proto_files()
    assert "common" in stems and "capabilities" in stems
    for stem in stems:
        module = _binding(stem)
        assert module.DESCRIPTOR.package == PACKAGE, stem
        assert module.DESCRIPTOR.name == f"openengine/v1/{stem}.proto"


def test_hand_written_files_declare_no_services():
    # Services are generated from the registry; a hand-written one would bypass it.
    for fd in _files():
        if not fd.name.endswith("_service.proto"):
            assert not fd.services_by_name, f"{fd.name} declares {list(fd.services_by_name)}"


@pytest.mark.parametrize("desc", MESSAGES, ids=lambda d: d.full_name)
def test_binary_round_trip(desc: Descriptor):
    for msg in _instances(desc):
        data = msg.SerializeToString(deterministic=True)
        back = GetMessageClass(desc)()
        back.ParseFromString(data)
        assert back == msg
        assert back.SerializeToString(deterministic=True) == data
        assert [f.name for f, _ in back.ListFields()] == [f.name for f, _ in msg.ListFields()]


@pytest.mark.parametrize("desc", MESSAGES, ids=lambda d: d.full_name)
def test_json_round_trip(desc: Descriptor):
    for msg in _instances(desc):
        for original_names in (False, True):
            text = json_format.MessageToJson(msg, preserving_proto_field_name=original_names)
            back = json_format.Parse(text, GetMessageClass(desc)())
            assert back == msg, text


@pytest.mark.parametrize("desc", MESSAGES, ids=lambda d: d.full_name)
def test_instances_set_every_field(desc: Descriptor):
    # Guards the generator above: a field it skipped would be a field the round trips never saw.
    instances = _instances(desc)
    seen = {f.name for msg in instances for f, _ in msg.ListFields()}
    missing = {f.name for f in desc.fields} - seen
    assert not missing, f"{desc.full_name}: never set {sorted(missing)}"


def _optional_scalars() -> list[tuple[Descriptor, FieldDescriptor]]:
    return [(m, f) for m in MESSAGES for f in m.fields
            if f.has_presence and f.containing_oneof is not None
            and f.containing_oneof.name.startswith("_") and f.type != FieldDescriptor.TYPE_MESSAGE]


OPTIONAL_SCALARS = _optional_scalars()


def test_presence_aware_fields_exist():
    names = {f"{m.name}.{f.name}" for m, f in OPTIONAL_SCALARS}
    # The WatchLoad settings the spec gives explicit zero and absent meanings.
    assert {"WatchLoadRequest.interval_ms", "WatchLoadRequest.heartbeat_ms",
            "WatchLoadRequest.initial_snapshot"} <= names


@pytest.mark.parametrize("desc,field", OPTIONAL_SCALARS, ids=lambda x: getattr(x, "full_name", ""))
def test_explicit_zero_keeps_presence(desc: Descriptor, field: FieldDescriptor):
    cls = GetMessageClass(desc)
    msg = cls()
    zero = field.default_value
    setattr(msg, field.name, zero)
    assert msg.HasField(field.name)
    binary = cls.FromString(msg.SerializeToString())
    assert binary.HasField(field.name) and getattr(binary, field.name) == zero
    parsed = json_format.Parse(json_format.MessageToJson(msg), cls())
    assert parsed.HasField(field.name) and getattr(parsed, field.name) == zero
    assert not cls().HasField(field.name)


def test_json_names_follow_proto3_mapping():
    from openengine.v1 import load_pb2

    msg = load_pb2.WatchLoadResponse(sequence=2**64 - 1)
    msg.snapshot.load.instance_id = "engine-0"
    msg.snapshot.coalesced = 3
    text = json_format.MessageToDict(msg)
    assert text["sequence"] == str(2**64 - 1)      # 64-bit integers are JSON strings
    assert text["snapshot"]["load"]["instanceId"] == "engine-0"
    assert text["snapshot"]["coalesced"] == "3"


def test_descriptor_set_is_self_contained():
    # Every file's dependencies resolve inside the bindings (or are well-known types).
    for fd in _files():
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        for dep in proto.dependency:
            assert dep.startswith("openengine/v1/") or dep.startswith("google/protobuf/"), \
                f"{fd.name} imports {dep}"
