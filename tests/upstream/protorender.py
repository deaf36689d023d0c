"""Render a FileDescriptorSet back to .proto text: enough of proto3 for upstream's files (messages,
nested types, oneofs, proto3 `optional`, enums, services, imports), so the tests build an upstream
tree from the pinned image alone. `render` also says where each element's declaration starts
(line and column, 1-based), which is where protoc's source info puts it."""

from __future__ import annotations

from google.protobuf import descriptor_pb2 as d

SCALARS = {v: k.removeprefix("TYPE_").lower() for k, v in d.FieldDescriptorProto.Type.items()}


def _default_json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


class _Writer:
    def __init__(self):
        self.lines: list[str] = []
        self.where: dict[str, tuple[int, int]] = {}

    def emit(self, depth: int, text: str, name: str | None = None) -> None:
        self.lines.append("  " * depth + text)
        if name is not None:
            self.where[name] = (len(self.lines), 2 * depth + 1)


def _field(w: _Writer, f, depth: int, full: str) -> None:
    kind = f.type_name if f.type_name else SCALARS[f.type]
    label = "repeated " if f.label == f.LABEL_REPEATED else "optional " if f.proto3_optional else ""
    option = f' [json_name = "{f.json_name}"]' if f.json_name and f.json_name != _default_json_name(f.name) else ""
    w.emit(depth, f"{label}{kind} {f.name} = {f.number}{option};", f"{full}.{f.name}")


def _enum(w: _Writer, e, depth: int, prefix: str) -> None:
    full = f"{prefix}.{e.name}"
    w.emit(depth, f"enum {e.name} {{", full)
    for v in e.value:
        w.emit(depth + 1, f"{v.name} = {v.number};", f"{full}.{v.name}")
    w.emit(depth, "}")


def _message(w: _Writer, m, depth: int, prefix: str) -> None:
    full = f"{prefix}.{m.name}"
    w.emit(depth, f"message {m.name} {{", full)
    open_oneof = None
    for f in m.field:
        oneof = m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") and not f.proto3_optional else None
        if oneof != open_oneof:
            if open_oneof is not None:
                w.emit(depth + 1, "}")
            if oneof is not None:
                w.emit(depth + 1, f"oneof {oneof} {{")
            open_oneof = oneof
        _field(w, f, depth + 1 + (oneof is not None), full)
    if open_oneof is not None:
        w.emit(depth + 1, "}")
    for nested in m.nested_type:
        _message(w, nested, depth + 1, full)
    for e in m.enum_type:
        _enum(w, e, depth + 1, full)
    w.emit(depth, "}")


def render(fdp: d.FileDescriptorProto) -> tuple[str, dict[str, tuple[int, int]]]:
    """The file's text, and each element's (line, column) by full name (`pkg.Service/Method` for
    a method)."""
    w = _Writer()
    w.emit(0, f'syntax = "{fdp.syntax or "proto2"}";')
    w.emit(0, f"package {fdp.package};")
    for dep in fdp.dependency:
        w.emit(0, f'import "{dep}";')
    for m in fdp.message_type:
        _message(w, m, 0, fdp.package)
    for e in fdp.enum_type:
        _enum(w, e, 0, fdp.package)
    for s in fdp.service:
        full = f"{fdp.package}.{s.name}"
        w.emit(0, f"service {s.name} {{", full)
        for m in s.method:
            req = ("stream " if m.client_streaming else "") + m.input_type
            res = ("stream " if m.server_streaming else "") + m.output_type
            w.emit(1, f"rpc {m.name}({req}) returns ({res});", f"{full}/{m.name}")
        w.emit(0, "}")
    return "\n".join(w.lines) + "\n", w.where


def render_set(fds: d.FileDescriptorSet, *, skip_prefix: str = "google/protobuf/") -> dict[str, str]:
    """Path -> text of every file of the set but the well-known imports."""
    return {fdp.name: render(fdp)[0] for fdp in fds.file if not fdp.name.startswith(skip_prefix)}
