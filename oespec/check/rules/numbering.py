"""Uniqueness: profiles, RPCs, messages and limits appear once, and every field number and field
name of the generated Capabilities messages is taken once."""

from __future__ import annotations

from oespec.check.rule import CheckContext, Finding, rule
from oespec.check.rules._common import capabilities, repeats

# Fields of Capabilities that no profile owns.
RESERVED_CAPABILITY_FIELDS = {1: "profiles", 2: "revision"}
# Messages the generator writes itself, besides each profile's capability message.
GENERATED_MESSAGES = ("Capabilities", "ModelCapabilities")
# Protobuf reserves these field numbers for its own implementation.
PROTOBUF_RESERVED_NUMBERS = range(19000, 20000)


@rule("OE017", "duplicate-profile", requirements=("REQ-ADD-001",), category="uniqueness",
      purpose="each profile name is declared once")
def duplicate_profile(ctx: CheckContext):
    for profile, line in repeats(ctx.registry.profiles, lambda p: p.name, lambda p: _written(p).line):
        yield Finding(_written(profile),
                      f"profile {profile.name} is declared again (first at line {line})"
                      + (" through a YAML alias" if _aliased(profile) else ""),
                      "merge the two declarations into one profile" if not _aliased(profile) else
                      "remove the alias: a profile is listed once")


def _aliased(profile) -> bool:
    """A profile repeated through a YAML alias sits after its own keys (they are the anchor's)."""
    return profile.loc.line > profile.at("name").line


def _written(profile):
    return profile.loc if _aliased(profile) else profile.at("name")


@rule("OE018", "duplicate-rpc", requirements=("REQ-ADD-010",), category="uniqueness",
      purpose="every RPC is listed once, by exactly one profile (a profile owns its RPCs)")
def duplicate_rpc(ctx: CheckContext):
    for (profile, rpc), (owner, line) in repeats(ctx.registry.all_rpcs(), lambda pair: pair[1].name,
                                                  lambda pair: (pair[0].name, pair[1].at("name").line)):
        where = "earlier in this profile" if owner == profile.name else f"by {owner}"
        yield Finding(rpc.at("name"), f"RPC {rpc.name} is already listed {where} (line {line})",
                      "keep the RPC in one profile; a profile that needs it requires that profile")


@rule("OE019", "duplicate-message", category="uniqueness",
      purpose="a profile lists each required message once")
def duplicate_message(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        for msg, line in repeats(profile.messages, lambda m: m.name, lambda m: m.at("name").line):
            yield Finding(msg.at("name"), f"{profile.name}: message {msg.name} is listed again (first at line {line})",
                          "remove the repeated entry")


@rule("OE020", "duplicate-limit-name", requirements=("REQ-ADD-004",), category="uniqueness",
      purpose="limit names are unique within a profile (each is a field of its capability message)")
def duplicate_limit_name(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        for limit, line in repeats(profile.limits, lambda l: l.name, lambda l: l.at("name").line):
            yield Finding(limit.at("name"), f"{profile.name}: limit {limit.name} is declared again (first at line {line})",
                          "rename one of the two limits, or merge them")


@rule("OE021", "duplicate-limit-field", requirements=("REQ-ADD-006",), category="uniqueness",
      purpose="limit field numbers are unique within a profile's capability message")
def duplicate_limit_field(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        for limit, other in repeats(profile.limits, lambda l: l.field, lambda l: l.name):
            yield Finding(limit.at("field"),
                          f"{profile.name}: limit {limit.name} reuses field number {limit.field} of limit {other}",
                          "give the limit the next unused field number; numbers are never reused")


@rule("OE022", "capability-number", requirements=("REQ-ADD-006",), category="uniqueness",
      purpose="capability field numbers are unique across profiles and avoid 1 (profiles) and 2 (revision)")
def capability_number(ctx: CheckContext):
    first: dict[int, str] = {}
    used = set(RESERVED_CAPABILITY_FIELDS) | {p.capability.number for p in ctx.registry.profiles if p.capability}
    free = max(used) + 1
    for profile, cap in capabilities(ctx.registry):
        if cap.number in RESERVED_CAPABILITY_FIELDS:
            yield Finding(cap.at("number"),
                          f"{profile.name}: capability number {cap.number} is Capabilities.{RESERVED_CAPABILITY_FIELDS[cap.number]}",
                          f"use {free}, the next free capability number (profiles = 1 and revision = 2 are reserved)")
        elif cap.number in first:
            yield Finding(cap.at("number"), f"{profile.name}: capability number {cap.number} is taken by {first[cap.number]}",
                          f"use {free}, the next free capability number; numbers are never reused")
        first.setdefault(cap.number, profile.name)


@rule("OE023", "capability-field-name", requirements=("REQ-ADD-006",), category="uniqueness",
      purpose="capability field names are unique across profiles and are not `profiles` or `revision`")
def capability_field_name(ctx: CheckContext):
    reserved = set(RESERVED_CAPABILITY_FIELDS.values())
    first: dict[str, str] = {}
    for profile, cap in capabilities(ctx.registry):
        if cap.field in reserved:
            yield Finding(cap.at("field"), f"{profile.name}: capability field name {cap.field!r} is reserved",
                          "name the field after the profile")
        elif cap.field in first:
            yield Finding(cap.at("field"), f"{profile.name}: capability field {cap.field!r} is taken by {first[cap.field]}",
                          "name the field after the profile")
        first.setdefault(cap.field, profile.name)


def _short(name: str, package: str) -> str | None:
    """The name of a message in the registry's package without the package, else None."""
    if "." not in name:
        return name
    prefix = package + "."
    return name[len(prefix):] if name.startswith(prefix) else None


@rule("OE024", "capability-message-name", requirements=("REQ-ADD-006",), category="uniqueness",
      purpose="each capability message name is unique and names no other message of the package")
def capability_message_name(ctx: CheckContext):
    registry = ctx.registry
    listed: dict[str, str] = {}
    for profile in registry.profiles:
        names = [m.name for m in profile.messages] + [n for r in profile.rpcs for n in (r.request, r.response)]
        for name in names:
            short = _short(name, registry.package)
            if short is not None:
                listed.setdefault(short, profile.name)
    first: dict[str, str] = {}
    for profile, cap in capabilities(registry):
        if cap.message in GENERATED_MESSAGES:
            yield Finding(cap.at("message"), f"{profile.name}: {cap.message} is the generated top-level message",
                          "name the message after the profile, e.g. KvCapabilities")
        elif cap.message in first:
            yield Finding(cap.at("message"), f"{profile.name}: capability message {cap.message} is also {first[cap.message]}'s",
                          "give each profile its own capability message")
        elif cap.message in listed:
            yield Finding(cap.at("message"),
                          f"{profile.name}: capability message {cap.message} is generated, but {listed[cap.message]} lists it as a hand-written message",
                          "rename the capability message, or stop listing it as a message")
        first.setdefault(cap.message, profile.name)


@rule("OE025", "field-number-range", requirements=("REQ-ADD-006",), category="uniqueness",
      purpose="limit and capability field numbers avoid 19000-19999, which protobuf reserves")
def field_number_range(ctx: CheckContext):
    hint = "protobuf reserves 19000-19999 for itself; use another number"
    for profile in ctx.registry.profiles:
        cap = profile.capability
        if cap is not None and cap.number in PROTOBUF_RESERVED_NUMBERS:
            yield Finding(cap.at("number"), f"{profile.name}: capability number {cap.number} is reserved by protobuf", hint)
        for limit in profile.limits:
            if limit.field in PROTOBUF_RESERVED_NUMBERS:
                yield Finding(limit.at("field"), f"{profile.name}: limit {limit.name} field {limit.field} is reserved by protobuf", hint)


@rule("OE026", "limits-need-capability", requirements=("REQ-ADD-006",), category="uniqueness",
      purpose="a profile with limits declares the capability message that carries them")
def limits_need_capability(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        if profile.limits and profile.capability is None:
            yield Finding(profile.at("limits"), f"{profile.name}: has limits but no capability message to carry them",
                          "add `capability:` with field, number and message")


RULES = [duplicate_profile, duplicate_rpc, duplicate_message, duplicate_limit_name, duplicate_limit_field,
         capability_number, capability_field_name, capability_message_name, field_number_range,
         limits_need_capability]
