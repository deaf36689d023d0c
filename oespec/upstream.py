"""Upstream OpenEngine v1 at the pinned commit: the image, the gate, and what the repository adds.

The pin is `upstream/openengine-v1.binpb`, a FileDescriptorSet of upstream's
`proto/openengine/v1/*.proto` with their imports and without source info (names, numbers and types
only), and `upstream/PIN.md`, which records the commit, its date and the image's SHA-256. `pin`
builds both from an upstream checkout; moving the pin to a newer commit is the same step.

`check` is the gate. It compiles the repository's `proto/` and fails on any change to an element
upstream defines (message, field, enum, enum value, service, method) while accepting additions.
The primary comparison is our own, in Python, rather than `buf breaking --against` the image alone:
  - buf names the element only in its prose; here every finding names it
    (`openengine.v1.SamplingParams.temperature`), shows upstream's definition and ours, and sits at
    file:line:column of our source, in the project's one diagnostic record;
  - no buf category fits on its own: WIRE_JSON says nothing about services and methods, FILE flags
    upstream's services for living in other files (`control_service.proto`), which no client sees
    on the wire, and a missing message or service comes with no place in our tree to point at;
  - the reviewer's reading (`additions`) needs the same element-by-element walk anyway.
What it compares, per element: for a field its number, name, type and type name, label (proto3
`optional` included), oneof and JSON name; for an enum value its name at its number; for a method
its request, response and both streaming flags. File names and options are not on the wire and are
not compared.

buf's PACKAGE category then runs as a second opinion (when buf is installed): it accepts additions
and file moves, and it judges what the walk above leaves out (for example a field's UTF-8
validation or a method's idempotency level); its rules about code-generation options (go_package,
jstype, ...) are left out, as they change nothing on the wire. Its findings are kept only at places
the walk found nothing, so one change is reported once, with the walk's clearer message.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from openengine.contractkit.rules import RuleSpec

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2

IMAGE = "upstream/openengine-v1.binpb"
PIN = "upstream/PIN.md"
UPSTREAM_DIR = "openengine/v1"          # where upstream keeps its protos, under its proto/
REPOSITORY = "ai-dynamo/openengine"
PIN_STEP = "oespec upstream pin --from <upstream checkout> --commit <sha> --date <YYYY-MM-DD>"

# The gate's ids live in the breaking family: each is a change that breaks upstream's clients and
# engines, and no profile bump can accept it.
MISSING = "OEB100"
FIELD_CHANGED = "OEB101"
VALUE_CHANGED = "OEB102"
METHOD_CHANGED = "OEB103"
PIN_MISMATCH = "OEB104"
UNUSABLE = "OEB105"
BUF_SECOND_OPINION = "OEB106"
BUF_CATEGORY = "PACKAGE"
BUF_TIMEOUT_S = 300
# PACKAGE's rules about code-generation options (go_package, java_package, jstype, ...): they
# change no byte on the wire and no JSON name, and the repository's files may carry their own.
BUF_EXCEPT = (
    "FILE_SAME_CC_ENABLE_ARENAS", "FILE_SAME_CC_GENERIC_SERVICES", "FILE_SAME_CSHARP_NAMESPACE",
    "FILE_SAME_GO_PACKAGE", "FILE_SAME_JAVA_GENERIC_SERVICES", "FILE_SAME_JAVA_MULTIPLE_FILES",
    "FILE_SAME_JAVA_OUTER_CLASSNAME", "FILE_SAME_JAVA_PACKAGE", "FILE_SAME_OBJC_CLASS_PREFIX",
    "FILE_SAME_OPTIMIZE_FOR", "FILE_SAME_PHP_CLASS_PREFIX", "FILE_SAME_PHP_METADATA_NAMESPACE",
    "FILE_SAME_PHP_NAMESPACE", "FILE_SAME_PY_GENERIC_SERVICES", "FILE_SAME_RUBY_PACKAGE", "FILE_SAME_SWIFT_PREFIX",
    "FIELD_SAME_CPP_STRING_TYPE", "FIELD_SAME_JAVA_UTF8_VALIDATION", "FIELD_SAME_JSTYPE",
)


def _spec(rule_id: str, name: str, purpose: str, requirements: tuple[str, ...] = ("REQ-REV-011",)) -> RuleSpec:
    return RuleSpec(rule_id, name, "breaking", "upstream", purpose, Severity.ERROR, requirements=requirements,
                    facts=(("breaks", "both"),))


RULES = (
    _spec(MISSING, "upstream-element-missing",
          "every message, field, enum, enum value, service and method of upstream v1 at the pin exists"),
    _spec(FIELD_CHANGED, "upstream-field-changed",
          "a field upstream defines keeps its number, name, type, label, oneof and JSON name"),
    _spec(VALUE_CHANGED, "upstream-enum-value-changed",
          "an enum value upstream defines keeps its name and number"),
    _spec(METHOD_CHANGED, "upstream-method-changed",
          "a method upstream defines keeps its request, response and streaming shape"),
    _spec(PIN_MISMATCH, "upstream-pin-mismatch",
          "upstream/openengine-v1.binpb has the SHA-256 that upstream/PIN.md records", ()),
    _spec(UNUSABLE, "upstream-pin-unusable",
          "the pinned image and PIN.md exist and can be read (an upstream checkout builds, for `pin`)", ()),
    _spec(BUF_SECOND_OPINION, "upstream-buf-package",
          f"buf's {BUF_CATEGORY} breaking rules find no change to upstream's elements that the element "
          "comparison did not already report"),
)


class UpstreamError(Exception):
    """The pin or the checkout cannot be used at all: exit status 2, with a located record."""

    def __init__(self, path: str, message: str, hint: str = ""):
        super().__init__(message)
        self.path, self.message, self.hint = path, message, hint

    def diagnostic(self) -> Diagnostic:
        return Diagnostic(self.path, 0, 0, UNUSABLE, Severity.ERROR, self.message, self.hint)


# ---------------------------------------------------------------------------------------------
# The pin: building the image and PIN.md


@dataclass(frozen=True)
class Pin:
    commit: str
    date: str
    image_sha256: str
    schema_revision: int | None = None
    sources: tuple[tuple[str, str], ...] = ()      # (path under proto/, SHA-256) of each compiled file


def build_image(checkout: Path) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    """The image of `checkout`'s proto/openengine/v1/*.proto, and each source's SHA-256. The same
    sources give the same bytes: protoc writes files in dependency order of the sorted inputs, and
    the set is written back with deterministic serialization."""
    from oespec.protoc import ProtocError, compile_descriptor_set

    folder = Path(checkout) / "proto" / UPSTREAM_DIR
    files = sorted(folder.glob("*.proto"))
    if not files:
        raise UpstreamError(str(folder), f"no .proto files in {folder}",
                            "give --from the root of an upstream checkout (the folder that holds proto/)")
    raw = {f"{UPSTREAM_DIR}/{p.name}": p.read_bytes() for p in files}
    try:
        fds = compile_descriptor_set({k: v.decode("utf-8") for k, v in raw.items()}, source_info=False)
    except ProtocError as err:
        raise UpstreamError(str(folder), f"upstream's protos do not compile: {err.message}",
                            "check out a commit whose protos build") from None
    return (fds.SerializeToString(deterministic=True),
            tuple((name, hashlib.sha256(body).hexdigest()) for name, body in sorted(raw.items())))


def render_pin(pin: Pin, fds: descriptor_pb2.FileDescriptorSet) -> str:
    """PIN.md: what the image is, where it comes from, and how to rebuild it."""
    from importlib.metadata import version

    services = [f"{fdp.package}.{s.name}" for fdp in fds.file for s in fdp.service]
    own = [fdp for fdp in fds.file if not fdp.name.startswith("google/")]
    imports = [fdp.name for fdp in fds.file if fdp.name.startswith("google/")]
    revision = f", schema revision {pin.schema_revision}" if pin.schema_revision is not None else ""
    tools = version("grpcio-tools")
    lines = [
        "# Upstream pin",
        "",
        f"- Upstream: {REPOSITORY}, commit `{pin.commit}` ({pin.date}{revision})",
        f"- Image: `openengine-v1.binpb`, SHA-256 `{pin.image_sha256}`",
        "",
        "The image is a FileDescriptorSet compiled from upstream's `proto/openengine/v1/*.proto` by the",
        f"protoc of grpcio-tools {tools}, imports included and source info left out: names,",
        "numbers, types, labels, oneofs and services, no comments.",
        "",
        f"- Upstream's files: {', '.join(sorted(fdp.name for fdp in own))}",
        f"- Services: {', '.join(services)}",
        f"- Imports: {', '.join(imports) or '(none)'}",
        "",
        "buf reads it with `--against`;",
        "`python -m grpc_tools.protoc --descriptor_set_in=upstream/openengine-v1.binpb` generates stubs.",
        "`oespec upstream check` (part of `make check`) compares proto/ against it.",
        "",
        "Attribution: derived from ai-dynamo/openengine (Apache-2.0); the image holds its schema facts only.",
        "",
        "## Rebuilding or moving the pin",
        "",
        "From a checkout of upstream at the commit to pin:",
        "",
        "```",
        "make upstream-pin UPSTREAM=<checkout> COMMIT=<sha> DATE=<YYYY-MM-DD> REVISION=<schema revision>",
        "```",
        "",
        "(`oespec upstream pin --from <checkout> --commit <sha> --date <date> --schema-revision <n>`.)",
        "The same sources give the same bytes. After moving the pin, `oespec upstream check` lists",
        "every element upstream changed under the repository.",
        "",
        "## Sources compiled (SHA-256)",
        "",
        "```",
        *(f"{digest}  {name}" for name, digest in pin.sources),
        "```",
        "",
    ]
    return "\n".join(lines)


_PIN_FIELDS = re.compile(r"commit `(?P<commit>[0-9a-f]+)` \((?P<date>[0-9-]+)(?:, schema revision (?P<rev>\d+))?\)")
_PIN_SHA = re.compile(r"SHA-256 `(?P<sha>[0-9a-f]{64})`")


def read_pin(path: Path) -> Pin:
    """The commit, date and image SHA-256 that PIN.md records."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UpstreamError(str(path), f"cannot read the pin record: {err.strerror}",
                            f"rebuild it with `{PIN_STEP}`") from None
    fields, sha = _PIN_FIELDS.search(text), _PIN_SHA.search(text)
    if fields is None or sha is None:
        raise UpstreamError(str(path), "the pin record names no upstream commit or no image SHA-256",
                            f"rebuild it with `{PIN_STEP}`")
    rev = fields["rev"]
    return Pin(fields["commit"], fields["date"], sha["sha"], int(rev) if rev else None)


def pin(checkout: Path, commit: str, date: str, *, schema_revision: int | None = None,
        out_dir: Path = Path("upstream")) -> Pin:
    """Build the image from `checkout` and write it and PIN.md into `out_dir`."""
    from google.protobuf import descriptor_pb2

    data, sources = build_image(checkout)
    record = Pin(commit, date, hashlib.sha256(data).hexdigest(), schema_revision, sources)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / Path(IMAGE).name).write_bytes(data)
    (out_dir / Path(PIN).name).write_text(render_pin(record, descriptor_pb2.FileDescriptorSet.FromString(data)),
                                          encoding="utf-8")
    return record


def load_image(image: Path) -> descriptor_pb2.FileDescriptorSet:
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        data = image.read_bytes()
    except OSError as err:
        raise UpstreamError(str(image), f"cannot read the upstream image: {err.strerror}",
                            f"rebuild it with `{PIN_STEP}`") from None
    try:
        return descriptor_pb2.FileDescriptorSet.FromString(data)
    except DecodeError:
        raise UpstreamError(str(image), "the upstream image is not a FileDescriptorSet",
                            f"rebuild it with `{PIN_STEP}`") from None


# ---------------------------------------------------------------------------------------------
# One walk over a descriptor set: every element by full name, located when source info exists


@dataclass(frozen=True)
class Element:
    kind: str                 # message, field, enum, enum_value, service, rpc
    name: str                 # full name: package.Message.field, package.Service/Method for an rpc
    proto: object             # its descriptor proto
    file: str                 # the file as shown in findings
    loc: Loc
    parent: str = ""          # the enclosing element's full name
    extra: dict = field(default_factory=dict, compare=False)   # a field's oneof and map spelling


def elements(fds: descriptor_pb2.FileDescriptorSet, *, only: set[str] | None = None,
             display: str = "") -> dict[str, Element]:
    """Every element of the files of `fds` (those named in `only`, when given), by full name.
    `display` is prefixed to file names in locations (e.g. `proto`)."""
    from oespec.descriptors import source_locs, walk

    out: dict[str, Element] = {}
    for fdp in fds.file:
        if only is not None and fdp.name not in only:
            continue
        shown = f"{display}/{fdp.name}" if display else fdp.name
        locs = source_locs(fdp)
        for kind, name, proto, path, parent in walk(fdp):
            extra = _field_extra(out[parent].proto, parent, proto) if kind == "field" else {}
            out[name] = Element(kind, name, proto, shown, locs.get(path, Loc(0, 0)), parent, extra)
    return out


def _field_extra(message, full: str, f) -> dict:
    """A field's oneof (none for a proto3 `optional`) and, for a map field, `map<K, V>`: its entry
    type is the compiler's, not the author's."""
    oneof = ""
    if f.HasField("oneof_index") and not f.proto3_optional:
        oneof = message.oneof_decl[f.oneof_index].name
    entry = next((n for n in message.nested_type if n.options.map_entry and f.type_name == f".{full}.{n.name}"), None)
    spelled = f"map<{_type_word(entry.field[0])}, {_type_word(entry.field[1])}>" if entry else ""
    return {"oneof": oneof, "map": spelled}


def _own_files(fds: descriptor_pb2.FileDescriptorSet) -> set[str]:
    """Upstream's own files of the image (its imports, google/protobuf/*, are not upstream's)."""
    return {fdp.name for fdp in fds.file if not fdp.name.startswith("google/protobuf/")}


# ---------------------------------------------------------------------------------------------
# Rendering elements as proto text, for messages that show both sides


def _type_word(f) -> str:
    from oespec.descriptors import scalar_names

    return f.type_name.lstrip(".") if f.type_name else scalar_names()[f.type]


def _label(f) -> str:
    if f.label == f.LABEL_REPEATED:
        return "repeated "
    if f.proto3_optional:
        return "optional "
    if f.label == f.LABEL_REQUIRED:
        return "required "
    return ""


def field_text(e: Element) -> str:
    f = e.proto
    kind = e.extra.get("map") or f"{_label(f)}{_type_word(f)}"
    text = f"{kind} {f.name} = {f.number}"
    if e.extra.get("oneof"):
        text += f" (in oneof {e.extra['oneof']})"
    return text


def method_text(m) -> str:
    req = ("stream " if m.client_streaming else "") + m.input_type.lstrip(".")
    res = ("stream " if m.server_streaming else "") + m.output_type.lstrip(".")
    return f"rpc {m.name}({req}) returns ({res})"


def _field_aspects(up: Element, here: Element) -> list[str]:
    a, b = up.proto, here.proto
    differs = (("name", a.name != b.name), ("number", a.number != b.number),
               ("type", a.type != b.type or a.type_name != b.type_name), ("label", _label(a) != _label(b)),
               ("oneof", up.extra.get("oneof", "") != here.extra.get("oneof", "")),
               ("json_name", bool(a.json_name and b.json_name and a.json_name != b.json_name)))
    return [aspect for aspect, differ in differs if differ]


# ---------------------------------------------------------------------------------------------
# The gate


_FIX = "upstream's elements stay as they are; new fields and values take numbers from 100 up"


def compare(upstream: descriptor_pb2.FileDescriptorSet, ours: descriptor_pb2.FileDescriptorSet,
            ours_files: set[str], display: str) -> list[Diagnostic]:
    """Every change `ours` (its files `ours_files`, shown under `display`) makes to what
    `upstream` defines."""
    up = elements(upstream, only=_own_files(upstream))
    here = elements(ours, only=ours_files, display=display)
    files_here = {e.file for e in here.values()}
    diags: list[Diagnostic] = []

    def place(parent: str, upstream_file: str) -> tuple[str, Loc]:
        """Where a missing element is reported: its parent here, else upstream's file name here,
        else the proto root."""
        if parent in here:
            return here[parent].file, here[parent].loc
        shown = f"{display}/{upstream_file}"
        return (shown if shown in files_here else display), Loc(0, 0)

    def missing(e: Element, what: str) -> None:
        path, loc = place(e.parent, e.file)
        diags.append(Diagnostic.at(
            path, loc, MISSING, Severity.ERROR, f"{e.name}: upstream defines {what} (in its {e.file}); it is missing here",
            f"restore it as upstream defines it ({_FIX})"))

    # Fields and values are matched by number (wire identity) first, then by name.
    fields_by_number = {(e.parent, e.proto.number): e for e in here.values() if e.kind == "field"}
    values_by_number: dict[tuple[str, int], list[Element]] = {}
    for e in here.values():
        if e.kind == "enum_value":
            values_by_number.setdefault((e.parent, e.proto.number), []).append(e)

    for name, e in up.items():
        if e.kind in ("message", "enum", "service"):
            if name not in here or here[name].kind != e.kind:
                missing(e, f"{e.kind} {name}")
        elif e.kind == "field":
            if e.parent not in here:
                continue                       # reported once, as the missing message
            mine = fields_by_number.get((e.parent, e.proto.number)) or here.get(name)
            if mine is None or mine.kind != "field":
                missing(e, f"field `{field_text(e)}`")
                continue
            aspects = _field_aspects(e, mine)
            if aspects:
                diags.append(Diagnostic.at(
                    mine.file, mine.loc, FIELD_CHANGED, Severity.ERROR,
                    f"{name}: upstream has `{field_text(e)}`, here it is `{field_text(mine)}` "
                    f"({', '.join(aspects)} differ{'s' if len(aspects) == 1 else ''})",
                    f"restore `{field_text(e)}` ({_FIX})"))
        elif e.kind == "enum_value":
            if e.parent not in here:
                continue
            same_number = values_by_number.get((e.parent, e.proto.number), [])
            if any(v.proto.name == e.proto.name for v in same_number):
                continue
            mine = here.get(name) if here.get(name) is not None and here[name].kind == "enum_value" else None
            if mine is None and same_number:
                mine = same_number[0]
            if mine is None:
                missing(e, f"enum value `{e.proto.name} = {e.proto.number}`")
                continue
            diags.append(Diagnostic.at(
                mine.file, mine.loc, VALUE_CHANGED, Severity.ERROR,
                f"{name}: upstream has `{e.proto.name} = {e.proto.number}`, "
                f"here it is `{mine.proto.name} = {mine.proto.number}`",
                f"restore `{e.proto.name} = {e.proto.number}` ({_FIX})"))
        elif e.kind == "rpc":
            if e.parent not in here:
                continue
            mine = here.get(name)
            if mine is None:
                missing(e, f"`{method_text(e.proto)}` in service {e.parent}")
                continue
            if method_text(e.proto) != method_text(mine.proto):
                diags.append(Diagnostic.at(
                    mine.file, mine.loc, METHOD_CHANGED, Severity.ERROR,
                    f"{name}: upstream has `{method_text(e.proto)}`, here it is `{method_text(mine.proto)}`",
                    f"restore `{method_text(e.proto)}`; a new shape is a new method in a new sibling service"))
    return diags


def compile_ours(proto_root: Path, display: str) -> tuple[descriptor_pb2.FileDescriptorSet | None, set[str],
                                                           list[Diagnostic]]:
    """The repository's compiled protos (with source info) and their file names, or the located
    compile errors."""
    from oespec.check.proto_crosscheck import _protoc_diagnostics
    from oespec.protoc import ProtocError, compile_descriptor_set, read_sources

    sources = read_sources(proto_root)
    if not sources:
        raise UpstreamError(display, f"no .proto files under {display}", "give --proto the repository's proto root")
    try:
        return compile_descriptor_set(sources, source_info=True), set(sources), []
    except ProtocError as err:
        return None, set(sources), _protoc_diagnostics(err.message, display)


def buf_findings(proto_root: Path, image: Path, display: str) -> list[Diagnostic]:
    """buf's PACKAGE findings of `proto_root` against the image ([] when buf is not installed:
    the element comparison is the gate, buf only a second opinion)."""
    import json
    import subprocess

    from oespec.breaking.buf_breaking import find_buf

    buf = find_buf()
    if buf is None:
        return []
    config = json.dumps({"version": "v2", "breaking": {"use": [BUF_CATEGORY], "except": list(BUF_EXCEPT)}})
    cmd = [buf, "breaking", ".", "--against", str(image.resolve()), "--config", config, "--error-format", "json"]
    try:
        proc = subprocess.run(cmd, cwd=proto_root, capture_output=True, text=True, timeout=BUF_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        return [Diagnostic(display, 0, 0, BUF_SECOND_OPINION, Severity.ERROR, f"could not run buf: {err}",
                           "run `make setup` (buf-bin is pinned in requirements.txt)")]
    diags = []
    for line in proc.stdout.splitlines():
        try:
            f = json.loads(line)
        except json.JSONDecodeError:
            continue
        rel = f.get("path")
        diags.append(Diagnostic(f"{display}/{rel}" if rel else display, int(f.get("start_line", 0)),
                                int(f.get("start_column", 0)), BUF_SECOND_OPINION, Severity.ERROR,
                                f"buf {f.get('type', '?')}: {str(f.get('message', '')).strip()}",
                                f"restore upstream's definition ({_FIX})"))
    if proc.returncode not in (0, 100) and not diags:
        detail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[:3])
        diags.append(Diagnostic(display, 0, 0, BUF_SECOND_OPINION, Severity.ERROR,
                                f"buf could not compare proto/ with the image: {detail}",
                                "make sure proto/ builds with `buf build`"))
    return diags


def check(proto_root: Path = Path("proto"), image: Path = Path(IMAGE), pin_file: Path = Path(PIN),
          display: str | None = None, *, use_buf: bool = True) -> list[Diagnostic]:
    """The gate: the image matches PIN.md, and proto/ keeps every element upstream defines."""
    display = display if display is not None else proto_root.as_posix().rstrip("/")
    upstream = load_image(image)
    recorded = read_pin(pin_file)
    diags = []
    actual = hashlib.sha256(image.read_bytes()).hexdigest()
    if actual != recorded.image_sha256:
        diags.append(Diagnostic(str(pin_file), 0, 0, PIN_MISMATCH, Severity.ERROR,
                                f"{image} has SHA-256 {actual}, but {pin_file} records {recorded.image_sha256}",
                                f"rebuild both with `{PIN_STEP}`; never edit the image by hand"))
    ours, files, errors = compile_ours(proto_root, display)
    if ours is None:
        return diags + errors
    found = compare(upstream, ours, files, display)
    if use_buf:
        seen = {(d.path, d.line) for d in found}
        # The walk reports every deletion itself, each with a place; buf's are placeless repeats.
        found += [d for d in buf_findings(proto_root, image, display)
                  if (d.path, d.line) not in seen and "_NO_DELETE:" not in d.message]
    return diags + found


# ---------------------------------------------------------------------------------------------
# The reverse reading: what the repository adds


@dataclass(frozen=True)
class Addition:
    """One element the repository defines that upstream at the pin does not."""

    kind: str          # service, rpc, message, field, enum, enum_value
    name: str          # full name (package.Service/Method for an rpc)
    parent: str        # the enclosing element's full name (a package for top-level ones)
    extends_upstream: bool  # the parent is upstream's: a field or value added to an upstream element
    file: str
    line: int
    definition: str    # the element as proto text (a field `optional uint32 x = 101`), or its name


def additions(upstream: descriptor_pb2.FileDescriptorSet, ours: descriptor_pb2.FileDescriptorSet,
              ours_files: set[str], display: str) -> list[Addition]:
    """What `ours` adds to `upstream`. A new message, enum or service is one entry (its fields and
    values belong to it), except that a new service lists each of its RPCs too: they are what a
    reviewer reads first."""
    up = elements(upstream, only=_own_files(upstream))
    here = elements(ours, only=ours_files, display=display)
    out = []
    for name, e in here.items():
        if name in up:
            continue
        parent_new = e.parent in here and e.parent not in up
        if parent_new and e.kind != "rpc":
            continue
        if e.kind == "message" and e.proto.options.map_entry:
            continue                  # a map field's entry type: the field is the addition
        if e.kind == "field":
            definition = field_text(e)
        elif e.kind == "enum_value":
            definition = f"{e.proto.name} = {e.proto.number}"
        elif e.kind == "rpc":
            definition = method_text(e.proto)
        else:
            definition = f"{e.kind} {name}"
        out.append(Addition(e.kind, name, e.parent, e.parent in up, e.file, e.loc.line, definition))
    return sorted(out, key=lambda a: (a.file, a.line, a.name))


def diff(proto_root: Path = Path("proto"), image: Path = Path(IMAGE),
         display: str | None = None) -> tuple[list[Addition], list[Diagnostic]]:
    """The repository's additions to the pinned upstream, or the compile errors that prevent it."""
    display = display if display is not None else proto_root.as_posix().rstrip("/")
    upstream = load_image(image)
    ours, files, errors = compile_ours(proto_root, display)
    if ours is None:
        return [], errors
    return additions(upstream, ours, files, display), []
