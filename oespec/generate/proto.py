"""Generate the parts of the wire contract the registry knows: the `Capabilities` message with
one typed capability message per profile, and one service definition per service.

The view model (`MessageView`, `ServiceView`, ...) is computed by pure functions from the
registry; the templates in `templates/proto/` only print it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from oespec.diagnostics import NOWHERE, Loc
from oespec.generate import GenerationContext, GenerationError, Output, Problem
from oespec.generate.templating import render
from oespec.registry.model import Condition, Limit, Profile, Registry
from openengine.contractkit.naming import enum_value_name, snake_case

PROTO_DIR = "proto"
V1_DIR = "openengine/v1/"
CAPABILITIES_FILE = V1_DIR + "capabilities.proto"
# Fields of Capabilities and ModelCapabilities that are not owned by a profile.
RESERVED_CAPABILITY_FIELDS = {"profiles": 1, "revision": 2}
_TOP_LEVEL_TYPE = re.compile(r"^(?:message|enum)\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


@dataclass(frozen=True)
class FieldView:
    label: str          # "", "optional " or "repeated "
    type: str
    name: str
    number: int
    comment: str
    options: str = ""


@dataclass(frozen=True)
class EnumView:
    name: str
    comment: str
    values: tuple[tuple[str, int, str], ...]


@dataclass(frozen=True)
class MessageView:
    name: str
    comment: str
    fields: tuple[FieldView, ...]
    option: str = ""


@dataclass(frozen=True)
class MethodView:
    name: str
    request: str
    response: str
    client_streaming: bool
    server_streaming: bool
    comment: str
    profile: str
    since: str
    deprecated: bool


@dataclass(frozen=True)
class ServiceView:
    name: str
    file: str
    comment: str
    profiles: tuple[str, ...]
    methods: tuple[MethodView, ...]
    imports: tuple[str, ...]


@dataclass
class CapabilitiesView:
    package: str
    imports: tuple[str, ...]
    capabilities: MessageView
    model_capabilities: MessageView
    messages: list[MessageView] = field(default_factory=list)
    enums: list[EnumView] = field(default_factory=list)
    file_option: str = ""


def _quote(text: str) -> str:
    return json.dumps(text)


def _registry_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return "" if value is None else str(value)


def limit_proto_type(limit: Limit) -> str:
    return limit.type.enum_name if limit.type.base == "enum" else limit.type.base


def _limit_comment(profile: Profile, limit: Limit) -> str:
    facts = [f"Default: {_registry_text(limit.default) or 'empty'}."]
    if limit.minimum is not None or limit.maximum is not None:
        lo = "" if limit.minimum is None else _registry_text(limit.minimum)
        hi = "" if limit.maximum is None else _registry_text(limit.maximum)
        facts.append(f"Range: {lo}..{hi}.")
    if limit.unit:
        facts.append(f"Unit: {limit.unit}.")
    facts.append(f"Since {profile.name} {limit.since}.")
    if limit.updatable:
        facts.append("UpdateConfig may change it while the engine runs.")
    if limit.type.repeated:
        facts.append("An empty list means the default.")
    else:
        facts.append("Absent means the default.")
    if limit.deprecated:
        facts.append(f"Deprecated: {limit.deprecated}")
    return f"{limit.description.strip()}\n\n{' '.join(facts)}"


def _limit_field(profile: Profile, limit: Limit) -> FieldView:
    opts = [f"default: {_quote(_registry_text(limit.default))}"]
    if limit.minimum is not None:
        opts.append(f"minimum: {_quote(_registry_text(limit.minimum))}")
    if limit.maximum is not None:
        opts.append(f"maximum: {_quote(_registry_text(limit.maximum))}")
    if limit.unit:
        opts.append(f"unit: {_quote(limit.unit)}")
    opts.append(f"since: {_quote(str(limit.since))}")
    if limit.updatable:
        opts.append("updatable: true")
    options = f"(openengine.v1.limit) = {{{', '.join(opts)}}}"
    if limit.deprecated:
        options = "deprecated = true, " + options
    return FieldView("repeated " if limit.type.repeated else "optional ", limit_proto_type(limit),
                     limit.name, limit.field, _limit_comment(profile, limit), options)


def _capability_message(profile: Profile) -> MessageView:
    assert profile.capability is not None
    roles = "".join(f" roles: {_quote(r)}" for r in profile.scope.roles)
    option = (f"option (openengine.v1.capability_profile) = {{profile: {_quote(profile.name)} "
              f"version: {_quote(str(profile.version))} scope: {_quote(profile.scope.kind)}{roles}}};")
    comment = (f"Typed limits of the {profile.name} profile ({profile.version}, {profile.scope} scope). "
               f"{profile.summary.strip()}\n\nValid only when {profile.name} is advertised.")
    fields = tuple(_limit_field(profile, lim) for lim in sorted(profile.limits, key=lambda l: l.field))
    return MessageView(profile.capability.message, comment, fields, option)


def _enums(registry: Registry) -> list[EnumView]:
    enums: dict[str, EnumView] = {}
    for profile in registry.profiles:
        for limit in profile.limits:
            if limit.type.base != "enum":
                continue
            name = limit.type.enum_name
            values = ((enum_value_name(name, "unspecified"), 0, "Not set; never a valid limit value."),) + tuple(
                (enum_value_name(name, v), n, f"`{v}` in profiles.yaml.")
                for v, n in sorted(limit.type.enum_wire.items(), key=lambda item: item[1]))
            view = EnumView(name, f"Values of {profile.name} limit {limit.name}.", values)
            if name in enums and enums[name].values != view.values:
                raise GenerationError("proto", f"enum {name} is declared twice with different values", problems=[
                    Problem(registry.path, limit.locs.get("values", limit.loc),
                            f"enum {name} of limit {profile.name}.{limit.name} is declared with other values elsewhere",
                            "give one of the limits its own `enum:` name, or the same values")])
            enums.setdefault(name, view)
    return list(enums.values())


def _condition_text(condition: Condition) -> str:
    return (f"{{profile: {_quote(condition.profile)} limit: {_quote(condition.limit)} "
            f"operator: {_quote(condition.operator)} value: {_quote(json.dumps(condition.value))}}}")


def _profile_declaration(profile: Profile) -> list[str]:
    """The `profiles` entry of the registry_contract file option, one text-format line each."""
    lines = [f"name: {_quote(profile.name)}", f"version: {_quote(str(profile.version))}"]
    if profile.mandatory:
        lines.append("mandatory: true")
    if profile.deprecated:
        lines.append(f"deprecated: {_quote(profile.deprecated.strip())}")
    lines.append(f"scope: {_quote(profile.scope.kind)}")
    lines += [f"roles: {_quote(role)}" for role in profile.scope.roles]
    lines += [f"requires: {{profile: {_quote(req.profile)} version_range: {_quote(str(req.range))}}}"
              for req in profile.requires]
    for inc in profile.incompatible_with:
        lines.append("incompatible_with: {")
        if inc.profile:
            lines.append(f"  profile: {_quote(inc.profile)}")
        lines += [f"  when: {_condition_text(c)}" for c in inc.when]
        lines += [f"  reason: {_quote(inc.reason.strip())}", "}"]
    return lines


def registry_contract_option(registry: Registry) -> str:
    """`option (openengine.v1.registry_contract) = {...};`: what the runtime reads about the
    registry beyond message fields (revision, mandatory, deprecation, prerequisites and
    incompatible combinations), so no runtime code needs profiles.yaml."""
    lines = ["option (openengine.v1.registry_contract) = {", f"  revision: {registry.revision}"]
    if registry.schema_revision is not None:
        lines.append(f"  schema_revision: {registry.schema_revision}")
    for profile in registry.profiles:
        lines.append("  profiles: {")
        lines += [f"    {line}" for line in _profile_declaration(profile)]
        lines.append("  }")
    lines.append("};")
    return "\n".join(lines)


def capabilities_view(registry: Registry) -> CapabilitiesView:
    owned = [p for p in registry.profiles if p.capability is not None]
    cap_fields = [
        FieldView("repeated ", "ServiceProfile", "profiles", 1,
                  "Every profile this engine serves, core included. An optional profile that is not "
                  "listed is unsupported, not temporarily unavailable."),
        FieldView("", "uint64", "revision", 2,
                  "Capability revision of the current configuration epoch; equals "
                  "EngineInfo.capability_revision and increases whenever what requests are legal changes."),
    ]
    model_fields = [
        FieldView("repeated ", "ServiceProfile", "profiles", 1,
                  "The model-scoped profiles this model supports; each is also advertised in Capabilities."),
    ]
    for p in sorted(owned, key=lambda p: p.capability.number):
        cap = p.capability
        scope_note = " Engine-wide values; each model may narrow them in ModelInfo.capabilities." \
            if p.scope.kind == "model" else ""
        comment = f"Limits of {p.name}; set only when {p.name} is advertised.{scope_note}"
        cap_fields.append(FieldView("", cap.message, cap.field, cap.number, comment))
        if p.scope.kind == "model":
            model_fields.append(FieldView("", cap.message, cap.field, cap.number,
                                          f"Limits of {p.name} for this model; set only when this model "
                                          f"lists {p.name}."))
    capabilities = MessageView(
        "Capabilities",
        "What this engine serves: its profiles and their typed limits. Stable within a configuration "
        "epoch (see revision).", tuple(cap_fields))
    model_caps = MessageView(
        "ModelCapabilities",
        "Model-scoped capabilities of one served model, carried by ModelInfo.", tuple(model_fields))
    return CapabilitiesView(
        package=registry.package,
        imports=("openengine/v1/common.proto", "openengine/v1/options.proto"),
        capabilities=capabilities,
        model_capabilities=model_caps,
        messages=[_capability_message(p) for p in sorted(owned, key=lambda p: p.capability.number)],
        enums=_enums(registry),
        file_option=registry_contract_option(registry),
    )


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


def services_view(registry: Registry, declared: dict[str, str]) -> list[ServiceView]:
    views, missing = [], []
    for service, members in registry.services().items():
        short = service.rsplit(".", 1)[-1]
        file = f"openengine/v1/{snake_case(short)}_service.proto"
        methods, imports, profiles = [], {"openengine/v1/options.proto"}, []
        for profile, rpc in members:
            if profile.name not in profiles:
                profiles.append(profile.name)
            types = []
            for role, type_name in (("request", rpc.request), ("response", rpc.response)):
                local = _local_name(registry, type_name)
                if local is None or local not in declared:
                    missing.append(Problem(registry.path, rpc.locs.get(role, rpc.loc),
                                           f"{rpc.name} names {role} message {type_name}, which no file under "
                                           "proto/ declares", "declare it in the domain's .proto file"))
                    types.append(type_name)
                    continue
                imports.add(declared[local])
                types.append(local)
            comment = rpc.description.strip() + f"\n\nProfile {profile.name}, since {rpc.since}."
            if rpc.deprecated:
                comment += f" Deprecated: {rpc.deprecated}"
            methods.append(MethodView(rpc.method, types[0], types[1], rpc.client_streaming,
                                      rpc.server_streaming, comment, profile.name, str(rpc.since),
                                      bool(rpc.deprecated)))
        imports.discard(file)
        comment = (f"The {short} service. Sibling services are policy and security boundaries; this one "
                   f"carries RPCs of {', '.join(profiles)}.")
        views.append(ServiceView(short, file, comment, tuple(profiles), tuple(methods), tuple(sorted(imports))))
    if missing:
        raise GenerationError("proto", f"{len(missing)} request or response message"
                                       f"{'s are' if len(missing) > 1 else ' is'} not declared", problems=missing)
    return views


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
            Problem(registry.path, registry.locs.get("package", registry.loc),
                    f"package {registry.package} is not supported; the contract lives in openengine.v1",
                    "set registry.package to openengine.v1")])
    caps = capabilities_view(registry)
    outputs = [Output(f"{PROTO_DIR}/{CAPABILITIES_FILE}",
                      render("proto/capabilities.proto.j2", view=caps))]
    generated = {o.path[len(PROTO_DIR) + 1:] for o in outputs}
    # Only the v1 package's own files: the compatibility aliases under openengine/legacy/ reuse
    # earlier names (GenerationCapabilities, ...) in packages of their own.
    hand_written = {rel: text for rel, text in ctx.proto_sources().items()
                    if rel not in generated and not rel.endswith("_service.proto")
                    and rel.startswith(V1_DIR)}
    declared = declared_types(hand_written)
    for name in ("Capabilities", "ModelCapabilities", *(m.name for m in caps.messages), *(e.name for e in caps.enums)):
        if name in declared:
            rel = declared[name]
            raise GenerationError("proto", f"{rel} declares {name}", problems=[
                Problem(f"{PROTO_DIR}/{rel}", _declaration_loc(hand_written.get(rel, ""), name),
                        f"{name} is generated from profiles.yaml but declared by hand here",
                        "remove the hand-written declaration")])
        declared[name] = CAPABILITIES_FILE
    for service in services_view(registry, declared):
        outputs.append(Output(f"{PROTO_DIR}/{service.file}",
                              render("proto/service.proto.j2", service=service, package=registry.package)))
    return outputs
