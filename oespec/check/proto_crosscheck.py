"""Cross-check the registry against the compiled wire contract.

The service and capability protos are generated from profiles.yaml, but the descriptors are the
truth clients see: a stale generated file, a hand-written service, or a message that lost a field
would make the registry lie. These rules compile `proto/` and compare, element by element.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from oespec.check.rule import CheckContext, Finding, rule
from oespec.check.rules._common import capabilities
from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from oespec.descriptors import Contract, add_file, source_locs, standard_health
from oespec.buildcache import BuildCache
from oespec.protoc import ProtocError, compile_descriptor_set, read_sources

_PROTOC_LOCATION = re.compile(r"^(?P<file>[^:\s]+\.proto):(?P<line>\d+):(?P<col>\d+): (?P<msg>.*)$")
CONTRACT_COMPILE_RULE = "OE100"
# The proposal's fields and enum values in upstream's messages and enums take numbers from here up,
# so upstream's own growth below it never meets them (spec/additions.md).
FIRST_ADDED_NUMBER = 100


def load_contract(proto_root: Path | str, display_root: str | None = None, *,
                  cache: BuildCache | None = None, upstream_image: Path | None = None) -> Contract | list[Diagnostic]:
    """Compile every .proto under `proto_root` (reusing `cache`'s compile of the same sources);
    descriptors, or the located compile errors. With `upstream_image` (the pinned upstream v1),
    the contract also knows which elements upstream defines."""
    root = Path(proto_root)
    shown = display_root if display_root is not None else str(proto_root)
    sources = read_sources(root)
    try:
        fds = compile_descriptor_set(sources, cache=cache)
    except ProtocError as err:
        return _protoc_diagnostics(err.message, shown)
    contract = Contract(shown)
    for fdp in fds.file:
        if fdp.name in sources:
            add_file(contract, fdp, f"{shown}/{fdp.name}")
    standard_health(contract)
    contract.request_limits = _request_limits(fds, sources, shown)
    if upstream_image is not None:
        contract.upstream = _upstream(Path(upstream_image))
    return contract


@dataclass(frozen=True)
class RequestLimitOption:
    """One `(openengine.v1.request_limit)` option of a request message, where it is written."""

    message: str
    field: str
    profile: str
    limit: str
    path: str
    loc: Loc


def _request_limits(fds, sources: dict[str, str], shown: str) -> list[RequestLimitOption]:
    """Every request_limit option of the compiled files under the proto root, read through the
    option's own declaration in the compiled set (the toolkit has no generated bindings)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:
        pool.Add(fdp)
    try:
        extension = pool.FindExtensionByName("openengine.v1.request_limit")
    except KeyError:
        return []
    options_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("google.protobuf.MessageOptions"))
    found = []
    for fdp in fds.file:
        if fdp.name not in sources:
            continue
        spans = source_locs(fdp)
        for i, msg in enumerate(fdp.message_type):
            if not msg.options.ByteSize():
                continue
            options = options_class.FromString(msg.options.SerializeToString())
            for k, option in enumerate(options.Extensions[extension]):
                loc = spans.get((4, i, 7, extension.number, k), spans.get((4, i), Loc(1, 1)))
                found.append(RequestLimitOption(f"{fdp.package}.{msg.name}", option.field, option.profile,
                                                option.limit, f"{shown}/{fdp.name}", loc))
    return found


def _upstream(image: Path) -> Contract | None:
    """What upstream defines, from its pinned image; None when there is no readable image (the
    upstream gate, `oespec upstream check`, reports an unreadable pin itself)."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        fds = descriptor_pb2.FileDescriptorSet.FromString(image.read_bytes())
    except (OSError, DecodeError):
        return None
    upstream = Contract(image.as_posix())
    for fdp in fds.file:
        if not fdp.name.startswith("google/protobuf/"):
            add_file(upstream, fdp, fdp.name)
    return upstream


def _protoc_diagnostics(text: str, shown: str) -> list[Diagnostic]:
    diags = []
    for line in text.splitlines():
        match = _PROTOC_LOCATION.match(line.strip())
        if match:
            diags.append(Diagnostic(f"{shown}/{match['file']}", int(match['line']), int(match['col']),
                                    CONTRACT_COMPILE_RULE, Severity.ERROR, match["msg"],
                                    "fix the proto source; generated files are rewritten by `oespec generate`"))
    # A file that fails makes every importer fail too; keep the root causes when there are any.
    roots = [d for d in diags if "was not found or had errors" not in d.message]
    diags = roots or diags
    if not diags:
        diags.append(Diagnostic(shown, 0, 0, CONTRACT_COMPILE_RULE, Severity.ERROR,
                                f"the protos do not compile: {text.strip()}", "fix the proto sources"))
    return diags


def _qualified(package: str, name: str) -> str:
    return name if "." in name else f"{package}.{name}"


@rule("OE101", "rpc-in-contract", requirements=("REQ-ADD-010",), category="contract", needs_contract=True,
      purpose="every RPC the registry names exists in the compiled contract")
def rpc_in_contract(ctx: CheckContext):
    for profile, rpc in ctx.registry.all_rpcs():
        if rpc.name not in ctx.contract.methods:
            close = difflib.get_close_matches(rpc.name, list(ctx.contract.methods), n=1, cutoff=0.8)
            hint = (f"did you mean {close[0]}? " if close else "") + \
                "run `oespec generate` to regenerate the service files, or fix the name"
            yield Finding(rpc.at("name"),
                          f"{rpc.name} (profile {profile.name}) is not in the compiled protos", hint)


@rule("OE102", "rpc-shape-matches", requirements=("REQ-ADD-010",), category="contract", needs_contract=True,
      purpose="each registry RPC has the request, response and streaming shape the protos declare")
def rpc_shape_matches(ctx: CheckContext):
    package = ctx.registry.package
    for _, rpc in ctx.registry.all_rpcs():
        method = ctx.contract.methods.get(rpc.name)
        if method is None:
            continue
        if method.streaming != rpc.streaming:
            yield Finding(rpc.at("streaming"),
                          f"{rpc.name} is {rpc.streaming} in the registry but {method.streaming} in "
                          f"{method.file}:{method.loc}", "regenerate the protos or correct `streaming`")
        for role, declared, actual in (("request", rpc.request, method.request),
                                       ("response", rpc.response, method.response)):
            if _qualified(package, declared) != actual:
                yield Finding(rpc.at(role),
                              f"{rpc.name} {role} is {declared} in the registry but {actual} in the protos",
                              f"regenerate the protos or correct `{role}`")


@rule("OE103", "rpc-has-profile", requirements=("REQ-ADD-010",), category="contract", needs_contract=True,
      purpose="every RPC of an OpenEngine service belongs to exactly one profile")
def rpc_has_profile(ctx: CheckContext):
    owners = ctx.registry.rpc_owner()
    prefix = ctx.registry.package + "."
    for name, method in sorted(ctx.contract.methods.items()):
        if not name.startswith(prefix):
            continue
        if name not in owners:
            yield Finding(method.loc, f"{name} belongs to no profile",
                          "add the RPC to the `rpcs` of the profile that requires it in profiles.yaml "
                          "(service blocks are generated from there)", path=method.file)


@rule("OE104", "message-in-contract", category="contract", needs_contract=True,
      purpose="every message a profile requires is declared in the protos")
def message_in_contract(ctx: CheckContext):
    package = ctx.registry.package
    for profile in ctx.registry.profiles:
        for msg in profile.messages:
            if _qualified(package, msg.name) not in ctx.contract.messages:
                yield Finding(msg.at("name"),
                              f"message {msg.name} (profile {profile.name}) is not declared in the protos",
                              "declare it in the domain's .proto file or correct the name")


@rule("OE105", "capability-in-contract", requirements=("REQ-ADD-006",), category="contract", needs_contract=True,
      purpose="each profile's capability field exists in Capabilities with its message type and number")
def capability_in_contract(ctx: CheckContext):
    package = ctx.registry.package
    caps = ctx.contract.messages.get(f"{package}.Capabilities")
    for profile, cap in capabilities(ctx.registry):
        where = cap.at("field")
        found = caps.fields.get(cap.field) if caps else None
        if found is None:
            yield Finding(where, f"Capabilities has no field {cap.field} for {profile.name}",
                          "run `oespec generate`")
            continue
        if found.number != cap.number or found.type != _qualified(package, cap.message):
            yield Finding(where, f"Capabilities.{cap.field} is {found.type} = {found.number} in the protos, "
                                 f"the registry says {cap.message} = {cap.number}", "run `oespec generate`")


@rule("OE106", "limit-in-contract", requirements=("REQ-ADD-004",), category="contract", needs_contract=True,
      purpose="every limit is a field of its capability message with the declared type, number and presence")
def limit_in_contract(ctx: CheckContext):
    package = ctx.registry.package
    for profile in ctx.registry.profiles:
        if profile.capability is None:
            continue
        message = ctx.contract.messages.get(_qualified(package, profile.capability.message))
        if message is None:
            yield Finding(profile.capability.at("message"),
                          f"capability message {profile.capability.message} is not in the protos",
                          "run `oespec generate`")
            continue
        for limit in profile.limits:
            found = message.fields.get(limit.name)
            where = limit.at("name")
            if found is None:
                yield Finding(where, f"{message.name} has no field {limit.name}", "run `oespec generate`")
                continue
            expected = _qualified(package, limit.type.enum_name) if limit.type.base == "enum" else limit.type.base
            problems = []
            if found.number != limit.field:
                problems.append(f"number {found.number} (registry: {limit.field})")
            if found.type != expected:
                problems.append(f"type {found.type} (registry: {expected})")
            if found.repeated != limit.type.repeated:
                problems.append("repeated" if found.repeated else "not repeated")
            if not limit.type.repeated and not found.explicit_presence:
                problems.append("no explicit presence (absence must mean the default: declare it `optional`)")
            if problems:
                yield Finding(where, f"{message.name}.{limit.name} differs from the registry: "
                                     + "; ".join(problems), "run `oespec generate`")


@rule("OE107", "request-limit-known", requirements=("REQ-ADD-004",), category="contract", needs_contract=True,
      purpose="every `request_limit` option of a request names a profile of the registry and, when it names a "
              "limit, a limit of that profile (a limit removed or renamed leaves no option behind)")
def request_limit_known(ctx: CheckContext):
    by_name = {p.name: p for p in ctx.registry.profiles}
    for option in ctx.contract.request_limits:
        profile = by_name.get(option.profile)
        subject = f"{option.message.rsplit('.', 1)[-1]} option request_limit on {option.field or '(the request)'!r}"
        if profile is None:
            yield Finding(option.loc, f"{subject} names profile {option.profile!r}, which is not in the registry",
                          f"remove the option from {option.path}, or name a profile of profiles.yaml", option.path)
        elif option.limit and profile.limit(option.limit) is None:
            close = difflib.get_close_matches(option.limit, [lim.name for lim in profile.limits], n=1, cutoff=0.8)
            yield Finding(option.loc, f"{subject} names limit {option.profile}.{option.limit}, which the "
                                      f"registry does not declare",
                          (f"did you mean {close[0]}? " if close else "") +
                          f"restore the limit in profiles.yaml, or remove or change the option in {option.path}",
                          option.path)


@rule("OE108", "upstream-extended-by-addition", requirements=("REQ-REV-012",), category="contract",
      needs_contract=True,
      purpose="the proposal extends upstream's messages and enums only with numbers from 100 up, and adds no "
              "RPC to upstream's services (new RPCs go in sibling services)")
def upstream_extended_by_addition(ctx: CheckContext):
    contract, upstream = ctx.contract, ctx.contract.upstream
    if upstream is None:
        return
    hint = (f"give it the next free number from {FIRST_ADDED_NUMBER} up: upstream's own additions take the "
            "numbers below")
    for name, theirs in upstream.messages.items():
        ours = contract.messages.get(name)
        numbers = {f.number for f in theirs.fields.values()}
        for f in (ours.fields.values() if ours else ()):
            if f.name not in theirs.fields and f.number not in numbers and f.number < FIRST_ADDED_NUMBER:
                yield Finding(f.loc, f"field {name}.{f.name} is added to upstream's {name} with number {f.number}, "
                                     f"below {FIRST_ADDED_NUMBER}", hint, path=f.file)
    for name, theirs in upstream.enums.items():
        ours = contract.enums.get(name)
        numbers = {number for number, _ in theirs.values.values()}
        for value, (number, loc) in (ours.values.items() if ours else ()):
            if value not in theirs.values and number not in numbers and number < FIRST_ADDED_NUMBER:
                yield Finding(loc, f"enum value {value} is added to upstream's {name} with number {number}, "
                                   f"below {FIRST_ADDED_NUMBER}", hint, path=ours.file)
    for name, method in sorted(contract.methods.items()):
        service = name.split("/")[0]
        if service in upstream.services and name not in upstream.methods:
            yield Finding(method.loc, f"{name} adds an RPC to upstream's service {service}",
                          "upstream's services keep exactly upstream's RPCs; put the RPC in a sibling service of the "
                          "proposal (its profile's `rpcs` in profiles.yaml) and run `oespec generate`",
                          path=method.file)


RULES = [rpc_in_contract, rpc_shape_matches, rpc_has_profile, message_in_contract, capability_in_contract,
         limit_in_contract, request_limit_known, upstream_extended_by_addition]
