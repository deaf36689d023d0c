"""Generate the parts of the wire contract the registry knows: the `Capabilities` message with
one typed capability message per profile, and one service definition per service.

Pure functions build each file as the one proto view model (`oespec.generate.protodoc`: `FileDoc`,
`MessageDoc`, ...) that the reference pages also read back from the compiled descriptors; the
template `templates/proto/file.proto.j2` only prints it, laid out as `buf format` does.
"""

from __future__ import annotations

import json
import re

from openengine.contractkit.locations import Loc, NOWHERE
from oespec.generate import GenerationContext, GenerationError, Output, Problem
from oespec.generate.protodoc import (
    EnumDoc, EnumValueDoc, FieldDoc, FileDoc, Literal, MessageDoc, MethodDoc, Option, ServiceDoc,
)
from oespec.generate.templating import render
from oespec.registry.model import Condition, Limit, Profile, Registry
from openengine.contractkit.naming import enum_value_name, snake_case

PROTO_DIR = "proto"
V1_DIR = "openengine/v1/"
CAPABILITIES_FILE = V1_DIR + "capabilities.proto"
_TOP_LEVEL_TYPE = re.compile(r"^(?:message|enum)\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


LIMIT_OPTION = "(openengine.v1.limit)"


def text_literal(value: "str | Literal", indent: str = "") -> str:
    """A text-format value as `buf format` lays it out: a scalar as written, a literal of one
    scalar field on one line, any other literal one field per line, indented under `indent`."""
    if isinstance(value, str):
        return value
    if not value:
        return "{}"
    if len(value) == 1 and isinstance(value[0][1], str):
        return f"{{{value[0][0]}: {value[0][1]}}}"
    inner = indent + "  "
    lines = [f"{inner}{key}: {text_literal(item, inner)}" for key, item in value]
    return "{\n" + "\n".join(lines) + f"\n{indent}}}"


def option_statement(option: Option, indent: str = "") -> str:
    """`option NAME = VALUE;` at `indent`."""
    return f"{indent}option {option.name} = {text_literal(option.value, indent)};"


def field_options(options: tuple[Option, ...], deprecated: bool, indent: str = "") -> str:
    """A field's ` [...]`: one option on the field's line, several one per line (as `buf format`)."""
    written = ((Option("deprecated", "true"),) if deprecated else ()) + tuple(options)
    if not written:
        return ""
    if len(written) == 1:
        return f" [{written[0].name} = {text_literal(written[0].value, indent)}]"
    inner = indent + "  "
    lines = [f"{inner}{o.name} = {text_literal(o.value, inner)}" for o in written]
    return " [\n" + ",\n".join(lines) + f"\n{indent}]"


def _quote(text: str) -> str:
    return json.dumps(text)


def _registry_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return "" if value is None else str(value)


def _limit_comment(profile: Profile, limit: Limit) -> str:
    ranged = limit.minimum is not None or limit.maximum is not None
    facts = [f"Default: {_registry_text(limit.default) or 'empty'}.",
             f"Range: {_registry_text(limit.minimum)}..{_registry_text(limit.maximum)}." if ranged else "",
             f"Unit: {limit.unit}." if limit.unit else "", f"Since {profile.name} {limit.since}.",
             "UpdateConfig may change it while the engine runs." if limit.updatable else "",
             "An empty list means the default." if limit.type.repeated else "Absent means the default.",
             f"Deprecated: {limit.deprecated}" if limit.deprecated else ""]
    return f"{limit.description.strip()}\n\n{' '.join(f for f in facts if f)}"


def _limit_field(profile: Profile, limit: Limit) -> FieldDoc:
    literal = [(key, _quote(_registry_text(value))) for key, value in (
        ("default", limit.default), ("minimum", limit.minimum), ("maximum", limit.maximum),
        ("unit", limit.unit), ("since", limit.since)) if key == "default" or value not in (None, "")]
    if limit.updatable:
        literal.append(("updatable", "true"))
    is_enum = limit.type.base == "enum"
    return FieldDoc(limit.name, limit.field, limit.type.enum_name if is_enum else limit.type.base, is_enum,
                    "repeated" if limit.type.repeated else "optional", None, _limit_comment(profile, limit),
                    bool(limit.deprecated), options=(Option(LIMIT_OPTION, tuple(literal)),))


def _capability_message(registry: Registry, profile: Profile) -> MessageDoc:
    assert profile.capability is not None
    literal = (("profile", _quote(profile.name)), ("version", _quote(str(profile.version))),
               ("scope", _quote(profile.scope.kind)), *(("roles", _quote(r)) for r in profile.scope.roles))
    comment = (f"Typed limits of the {profile.name} profile ({profile.version}, {profile.scope} scope). "
               f"{profile.summary.strip()}\n\nValid only when {profile.name} is advertised.")
    fields = tuple(_limit_field(profile, lim) for lim in sorted(profile.limits, key=lambda l: l.field))
    return MessageDoc(f"{registry.package}.{profile.capability.message}", profile.capability.message, comment,
                      fields, (Option("(openengine.v1.capability_profile)", literal),))


def _enums(registry: Registry, declared: dict[str, str], sources: dict[str, str]) -> tuple[list[EnumDoc], set[str]]:
    """The enums of the registry's enum limits, and the files to import for those a hand-written
    file already declares (upstream's `GuidedDecodingMode`, `Modality`): those are reused, never
    declared twice, and must have the registry's values."""
    enums: dict[str, EnumDoc] = {}
    imports: set[str] = set()
    for profile in registry.profiles:
        for limit in profile.limits:
            if limit.type.base != "enum":
                continue
            name = limit.type.enum_name
            if name in declared:
                rel = declared[name]
                written = _declared_values(sources.get(rel, ""), name)
                wanted = {enum_value_name(name, v): n for v, n in limit.type.enum_wire.items()}
                wrong = sorted(v for v, n in wanted.items() if written.get(v) != n)
                if wrong:
                    raise GenerationError("proto", f"enum {name} differs from its declaration in {rel}", problems=[
                        Problem(registry.path, limit.at("values"),
                                f"limit {profile.name}.{limit.name} gives {name} values that {rel} declares "
                                f"otherwise ({', '.join(wrong)})",
                                f"use the numbers {rel} gives: " + ", ".join(
                                    f"{v}: {n}" for v, n in sorted(written.items(), key=lambda i: i[1]) if n))])
                imports.add(rel)
                continue
            values = (EnumValueDoc(enum_value_name(name, "unspecified"), 0, "Not set; never a valid limit value."),) + \
                tuple(EnumValueDoc(enum_value_name(name, v), n, f"`{v}` in profiles.yaml.")
                      for v, n in sorted(limit.type.enum_wire.items(), key=lambda item: item[1]))
            # (limits sharing an enum share its values: OE031 holds generation back otherwise)
            enums.setdefault(name, EnumDoc(f"{registry.package}.{name}", name,
                                           f"Values of {profile.name} limit {limit.name}.", values))
    return list(enums.values()), imports


def _declared_values(text: str, enum: str) -> dict[str, int]:
    """VALUE_NAME -> number of `enum` as a hand-written file declares it."""
    match = re.search(rf"^enum\s+{re.escape(enum)}\s*\{{(.*?)^\}}", text, re.M | re.S)
    body = match.group(1) if match else ""
    return {name: int(number) for name, number in re.findall(r"^\s*([A-Z][A-Z0-9_]*)\s*=\s*(\d+)\s*;", body, re.M)}


def _condition_literal(condition: Condition) -> Literal:
    return (("profile", _quote(condition.profile)), ("limit", _quote(condition.limit)),
            ("operator", _quote(condition.operator)), ("value", _quote(json.dumps(condition.value))))


def _profile_declaration(profile: Profile) -> Literal:
    """The `profiles` entry of the registry_contract file option."""
    fields: list[tuple[str, str | Literal]] = [("name", _quote(profile.name)),
                                               ("version", _quote(str(profile.version)))]
    if profile.mandatory:
        fields.append(("mandatory", "true"))
    if profile.deprecated:
        fields.append(("deprecated", _quote(profile.deprecated.strip())))
    fields.append(("scope", _quote(profile.scope.kind)))
    fields += [("roles", _quote(role)) for role in profile.scope.roles]
    fields += [("requires", (("profile", _quote(req.profile)), ("version_range", _quote(str(req.range)))))
               for req in profile.requires]
    for inc in profile.incompatible_with:
        entry: list[tuple[str, str | Literal]] = [("profile", _quote(inc.profile))] if inc.profile else []
        entry += [("when", _condition_literal(c)) for c in inc.when]
        entry.append(("reason", _quote(inc.reason.strip())))
        fields.append(("incompatible_with", tuple(entry)))
    return tuple(fields)


def registry_contract_option(registry: Registry) -> Option:
    """`option (openengine.v1.registry_contract) = {...};`: what the runtime reads about the
    registry beyond message fields (revision, mandatory, deprecation, prerequisites and
    incompatible combinations), so no runtime code needs profiles.yaml."""
    revisions = (("revision", registry.revision), ("schema_revision", registry.schema_revision),
                 ("minimum_client_revision", registry.minimum_client_revision))
    fields: list[tuple[str, str | Literal]] = [(key, str(v)) for key, v in revisions if v is not None]
    fields.append(("schema_release", _quote(registry.schema_release)))
    fields += [("profiles", _profile_declaration(profile)) for profile in registry.profiles]
    return Option("(openengine.v1.registry_contract)", tuple(fields))


def _plain_field(label: str, type_name: str, name: str, number: int, comment: str) -> FieldDoc:
    return FieldDoc(name, number, type_name, type_name[:1].isupper(), label, None, comment)


def capabilities_file(registry: Registry, declared: dict[str, str], sources: dict[str, str]) -> FileDoc:
    owned = sorted((p for p in registry.profiles if p.capability is not None), key=lambda p: p.capability.number)
    cap_fields = [
        _plain_field("repeated", "ServiceProfile", "profiles", 1,
                     "Every profile this engine serves, core included. An optional profile that is not "
                     "listed is unsupported, not temporarily unavailable."),
        _plain_field("", "uint64", "revision", 2,
                     "Capability revision of the current configuration epoch; equals "
                     "ServerInfo.capability_revision and increases whenever what requests are legal changes."),
        _plain_field("repeated", "ModelCapabilities", "models", 3,
                     "The model-scoped profiles and limits of every served model, one entry per model."),
    ]
    model_fields = [
        _plain_field("repeated", "ServiceProfile", "profiles", 1,
                     "The model-scoped profiles this model supports; each is also advertised in Capabilities."),
        _plain_field("", "string", "model", 2, "The served model (ServerInfo.supported_models) these are for."),
    ]
    for p in owned:
        cap = p.capability
        scope_note = " Engine-wide values; each model may narrow them in Capabilities.models." \
            if p.scope.kind == "model" else ""
        comment = f"Limits of {p.name}; set only when {p.name} is advertised.{scope_note}"
        cap_fields.append(_plain_field("", cap.message, cap.field, cap.number, comment))
        if p.scope.kind == "model":
            model_fields.append(_plain_field("", cap.message, cap.field, cap.number,
                                             f"Limits of {p.name} for this model; set only when this model "
                                             f"lists {p.name}."))
    package = registry.package
    capabilities = MessageDoc(
        f"{package}.Capabilities", "Capabilities",
        "What this engine serves: its profiles and their typed limits. Stable within a configuration "
        "epoch (see revision).", tuple(cap_fields))
    model_caps = MessageDoc(
        f"{package}.ModelCapabilities", "ModelCapabilities",
        "Model-scoped capabilities of one served model (Capabilities.models).", tuple(model_fields))
    enums, enum_imports = _enums(registry, declared, sources)
    return FileDoc(CAPABILITIES_FILE, package,
                   (capabilities, model_caps, *(_capability_message(registry, p) for p in owned)),
                   tuple(enums), (),
                   imports=tuple(sorted({"openengine/v1/common.proto", "openengine/v1/options.proto", *enum_imports})),
                   options=(registry_contract_option(registry),))


def declared_types(sources: dict[str, str]) -> dict[str, str]:
    """Top-level message and enum names -> the proto file (relative path) that declares them."""
    out: dict[str, str] = {}
    for rel, text in sources.items():
        for match in _TOP_LEVEL_TYPE.finditer(text):
            out.setdefault(match.group(1), rel)
    return out


def _local_name(registry: Registry, type_name: str) -> str | None:
    prefix = registry.package + "."
    if type_name.startswith(prefix):
        return type_name[len(prefix):]
    return None if "." in type_name else type_name


def service_files(registry: Registry, declared: dict[str, str]) -> list[FileDoc]:
    files, missing = [], []
    for service, members in registry.services().items():
        short = service.rsplit(".", 1)[-1]
        file = f"openengine/v1/{snake_case(short)}_service.proto"
        methods, imports = [], {"openengine/v1/options.proto"}
        profiles = list(dict.fromkeys(profile.name for profile, _ in members))
        for profile, rpc in members:
            types = []
            for role, type_name in (("request", rpc.request), ("response", rpc.response)):
                local = _local_name(registry, type_name)
                if local is None or local not in declared:
                    missing.append(Problem(registry.path, rpc.at(role),
                                           f"{rpc.name} names {role} message {type_name}, which no file under "
                                           "proto/ declares", "declare it in the domain's .proto file"))
                    types.append(type_name)
                    continue
                imports.add(declared[local])
                types.append(local)
            comment = rpc.description.strip() + f"\n\nProfile {profile.name}, since {rpc.since}."
            if rpc.deprecated:
                comment += f" Deprecated: {rpc.deprecated}"
            method_profile = Option("(openengine.v1.method_profile)",
                                    (("profile", _quote(profile.name)), ("since", _quote(str(rpc.since)))))
            methods.append(MethodDoc(rpc.method, types[0], types[1], rpc.client_streaming, rpc.server_streaming,
                                     comment, bool(rpc.deprecated), (method_profile,)))
        imports.discard(file)
        comment = (f"The {short} service. Sibling services are policy and security boundaries; this one "
                   f"carries RPCs of {', '.join(profiles)}.")
        served = Option("(openengine.v1.service_profiles)", tuple(("profiles", _quote(p)) for p in profiles))
        files.append(FileDoc(file, registry.package, (), (),
                             (ServiceDoc(service, short, comment, tuple(methods), (served,)),),
                             imports=tuple(sorted(imports))))
    if missing:
        raise GenerationError("proto", f"{len(missing)} request or response message"
                                       f"{'s are' if len(missing) > 1 else ' is'} not declared", problems=missing)
    return files


def _declaration_loc(text: str, name: str) -> Loc:
    match = re.search(rf"^\s*(?:message|enum)\s+{re.escape(name)}\b", text, re.M)
    if match is None:
        return NOWHERE
    line = text.count("\n", 0, match.start()) + 1
    return Loc(line, len(match.group(0)) - len(match.group(0).lstrip()) + 1)


def generate(ctx: GenerationContext) -> list[Output]:
    registry = ctx.registry
    if registry.package != "openengine.v1":
        raise GenerationError("proto", "unsupported package", problems=[
            Problem(registry.path, registry.at("package"),
                    f"package {registry.package} is not supported; the contract lives in openengine.v1",
                    "set registry.package to openengine.v1")])
    hand_written = {rel: text for rel, text in ctx.proto_sources().items()
                    if rel != CAPABILITIES_FILE and not rel.endswith("_service.proto") and rel.startswith(V1_DIR)}
    declared = declared_types(hand_written)
    caps = capabilities_file(registry, declared, hand_written)
    outputs = [Output(f"{PROTO_DIR}/{CAPABILITIES_FILE}", render_file(caps))]
    for name in (*(m.name for m in caps.messages), *(e.name for e in caps.enums)):
        if name in declared:
            rel = declared[name]
            raise GenerationError("proto", f"{rel} declares {name}", problems=[
                Problem(f"{PROTO_DIR}/{rel}", _declaration_loc(hand_written.get(rel, ""), name),
                        f"{name} is generated from profiles.yaml but declared by hand here",
                        "remove the hand-written declaration")])
        declared[name] = CAPABILITIES_FILE
    for service in service_files(registry, declared):
        outputs.append(Output(f"{PROTO_DIR}/{service.path}", render_file(service)))
    return outputs


def render_file(file: FileDoc) -> str:
    """A generated `.proto` file, laid out as `buf format` lays it out."""
    return render("proto/file.proto.j2", file=file, option_statement=option_statement, field_options=field_options)
