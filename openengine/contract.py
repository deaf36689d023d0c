"""The contract as the compiled descriptors describe it.

Which RPC belongs to which profile (and since which version), the profiles' versions, scopes and
roles, whether they are mandatory or deprecated, their prerequisites and incompatible
combinations, their capability fields, the typed limits with their defaults and ranges, and the
registry revision are all read here from the custom options the generator put on the services,
the capability messages and `capabilities.proto` itself (`openengine.v1.options_pb2`).

This module is the runtime's only reader of the contract: the reference engine, the conformance
runner, the validators and the client build on it, so none carries a second copy of the catalogue
and all work wherever the bindings are installed, without `profiles.yaml` next to them.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Mapping

from google.protobuf import descriptor
from google.protobuf import message_factory

import openengine.v1 as v1_package
from openengine.contractkit.conditions import condition_holds, condition_text
from openengine.contractkit.naming import enum_spelling
from openengine.contractkit.versions import VersionRange
from openengine.v1 import capabilities_pb2, options_pb2, server_pb2

STANDARD_PREFIX = "openengine."
CORE = "openengine.core"
HEALTH_SERVICE = "grpc.health.v1.Health"
# Services that accept new work, as spec/health.md names them: NOT_SERVING whenever the engine
# would refuse new requests (REQ-HEALTH-007); every other service is a control service. The spec
# defines the split by name, not by profile, so it is stated here once for the engine and runner.
WORK_SERVICES = ("openengine.v1.Inference", "openengine.v1.Tasks", "openengine.v1.Encoder")


@dataclass(frozen=True)
class LimitInfo:
    """One typed limit: a field of a capability message and its registry declaration."""

    profile: str
    name: str
    field: descriptor.FieldDescriptor
    default: Any
    minimum: int | float | None
    maximum: int | float | None
    unit: str
    updatable: bool = False   # UpdateConfig may change it while the engine runs

    @property
    def reference(self) -> str:
        return f"{self.profile}.{self.name}"

    @property
    def repeated(self) -> bool:
        return self.field.is_repeated

    @property
    def enum(self) -> descriptor.EnumDescriptor | None:
        return self.field.enum_type

    @property
    def kind(self) -> str:
        field_type = self.field.type
        if self.enum is not None:
            return "enum"
        if field_type == descriptor.FieldDescriptor.TYPE_BOOL:
            return "bool"
        if field_type == descriptor.FieldDescriptor.TYPE_STRING:
            return "string"
        if field_type in (descriptor.FieldDescriptor.TYPE_DOUBLE, descriptor.FieldDescriptor.TYPE_FLOAT):
            return "double"
        if field_type in (descriptor.FieldDescriptor.TYPE_INT32, descriptor.FieldDescriptor.TYPE_INT64,
                          descriptor.FieldDescriptor.TYPE_SINT32, descriptor.FieldDescriptor.TYPE_SINT64):
            return "int"
        return "uint"

    def enum_spellings(self) -> dict[str, int]:
        """Registry spelling (`json_schema`) -> enum number, derived from the enum's value names."""
        if self.enum is None:
            return {}
        return {enum_spelling(self.enum.name, v.name): v.number for v in self.enum.values if v.number != 0}


@dataclass(frozen=True)
class RpcInfo:
    """One RPC of the contract, with the profile that carries it and the version it came in."""

    service: str          # full service name, e.g. openengine.v1.Observability
    method: descriptor.MethodDescriptor
    profile: str
    since: str            # `1.0`

    @property
    def name(self) -> str:
        return f"{self.service}/{self.method.name}"

    full_name = name

    @property
    def path(self) -> str:
        """The HTTP/2 path a call of this RPC goes to."""
        return f"/{self.service}/{self.method.name}"

    @property
    def since_version(self) -> tuple[int, int]:
        return parse_version(self.since)

    @property
    def server_streaming(self) -> bool:
        return self.method.server_streaming

    @property
    def request(self) -> type:
        """The request message class."""
        return message_factory.GetMessageClass(self.method.input_type)

    @property
    def response(self) -> type:
        """The response message class."""
        return message_factory.GetMessageClass(self.method.output_type)


@dataclass(frozen=True)
class Prerequisite:
    """`requires`: `profile` must be advertised in a version `range` contains."""

    profile: str
    range: VersionRange


@dataclass(frozen=True)
class LimitCondition:
    """`<profile>.<limit> <operator> <value>` over a limit's effective value."""

    profile: str
    limit: str
    operator: str
    value: Any

    @property
    def reference(self) -> str:
        return f"{self.profile}.{self.limit}"

    def holds(self, actual: Any) -> bool:
        return condition_holds(self.operator, self.value, actual)

    def __str__(self) -> str:
        return condition_text(self.reference, self.operator, self.value)


@dataclass(frozen=True)
class Incompatibility:
    """`incompatible_with`: the owning profile cannot be advertised together with `profile` (when
    set) while every condition holds; no conditions means never together."""

    profile: str | None
    when: tuple[LimitCondition, ...]
    reason: str


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    version: tuple[int, int]
    scope: str
    roles: tuple[str, ...]
    capability_field: str | None
    capability_message: descriptor.Descriptor | None
    limits: tuple[LimitInfo, ...]
    rpcs: tuple[RpcInfo, ...] = ()
    mandatory: bool = False
    deprecated: str = ""          # why, and what replaces it; empty when not deprecated
    requires: tuple[Prerequisite, ...] = ()
    incompatible_with: tuple[Incompatibility, ...] = ()

    @property
    def short_name(self) -> str:
        return self.name[len(STANDARD_PREFIX):] if self.name.startswith(STANDARD_PREFIX) else self.name

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def services(self) -> tuple[str, ...]:
        """Services holding this profile's RPCs, in the order of the RPCs."""
        return tuple(dict.fromkeys(r.service for r in self.rpcs))

    def limit(self, name: str) -> LimitInfo | None:
        return next((lim for lim in self.limits if lim.name == name), None)

    def allows_role(self, role: str) -> bool:
        return self.scope != "role" or role in self.roles

    def defaults(self) -> dict[str, Any]:
        """Limit name -> default; list defaults are copies, so callers may change them."""
        return {lim.name: list(lim.default) if lim.repeated else lim.default for lim in self.limits}


@dataclass(frozen=True)
class RequestLimit:
    """A request field bounded by an advertised limit or profile, as the request message's
    `request_limit` option declares it: `field` of `request` (a dotted path; `a[]` is each element,
    `a|b` the member set in oneof `b` of `a`; empty means the request itself) is judged by `check`
    against `profile`.`limit`.

    checks: `profile` (using the field needs the profile), `at_most` (value <= limit), `enabled`
    (a bool limit must be true), `member` (the value must be in a list limit; `when` fixes the
    value), `count_at_most` (number of elements <= limit), `below_needs` (a value below the
    limit in `limit` needs the bool limit in `when`), `ignored` (the engine ignores the field
    unless the bool limit is true: a warning)."""

    request: str          # short name of the request message, e.g. GenerateRequest
    field: str
    check: str
    profile: str
    limit: str | None = None
    when: str | None = None


@dataclass(frozen=True)
class Catalogue:
    """Profiles in contract order, the services and RPCs that carry them."""

    profiles: tuple[ProfileInfo, ...]
    services: dict[str, descriptor.ServiceDescriptor] = field(default_factory=dict)
    rpcs: tuple[RpcInfo, ...] = ()
    core: str = ""
    registry_revision: int = 0    # registry.revision the contract was generated from
    schema_revision: int = 0      # registry.schema_revision (ServerInfo.schema_revision); 0 if undeclared
    request_limits: tuple[RequestLimit, ...] = ()   # every request's bounded fields, in RPC order
    minimum_client_revision: int = 0   # ServerInfo.minimum_client_revision (registry header)
    schema_release: str = ""           # ServerInfo.schema_release: the immutable release name

    def profile(self, name: str) -> ProfileInfo | None:
        return next((p for p in self.profiles if p.name == name), None)

    def lookup(self, spelled: str) -> ProfileInfo | None:
        """A profile by full name or short name (`load`, `runtime-events`)."""
        spelled = spelled.strip()
        return next((p for p in self.profiles if spelled in (p.name, p.short_name)), None)

    def rpc(self, service: str, method: str) -> RpcInfo | None:
        return next((r for r in self.rpcs if r.service == service and r.method.name == method), None)

    def services_of(self, profiles) -> list[str]:
        """Services carrying at least one RPC of the given profiles, in contract order."""
        wanted = set(profiles)
        return [s for s in self.services if any(r.profile in wanted for r in self.rpcs if r.service == s)]

    def limit(self, reference: str) -> LimitInfo | None:
        """`openengine.adapters.max_loras` -> that limit."""
        for p in self.profiles:
            if reference.startswith(p.name + "."):
                return p.limit(reference[len(p.name) + 1:])
        return None

    @property
    def updatable_limits(self) -> frozenset[str]:
        """References (`openengine.core.max_running_requests`) of the limits UpdateConfig may change."""
        return frozenset(lim.reference for p in self.profiles for lim in p.limits if lim.updatable)


@dataclass(frozen=True)
class CombinationProblem:
    """One broken prerequisite or incompatible combination among advertised profiles."""

    profile: str                  # the profile whose declaration is broken
    rule: str                     # "requires" or "incompatible_with"
    limits: tuple[str, ...]       # limit references the conditions read (empty for a prerequisite)
    message: str
    prerequisite: Prerequisite | None = None        # the broken `requires` entry
    incompatibility: Incompatibility | None = None  # the `incompatible_with` entry that applies
    values: tuple[Any, ...] = ()  # the effective values the conditions read, or the versions found

    def __str__(self) -> str:
        return self.message


def _versions(have: Any) -> tuple[tuple[int, int], ...]:
    """An advertised entry as versions: one (major, minor), or several (one per advertised major)."""
    if have is None:
        return ()
    if type(have) is tuple and len(have) == 2 and type(have[0]) is int and type(have[1]) is int:
        return (have,)
    return tuple(tuple(v) for v in have)


def combination_problems(advertised: Mapping[str, Any] | Iterable[str],
                         limits: Mapping[str, Mapping[str, Any]] | None = None, *,
                         cat: Catalogue | None = None) -> list[CombinationProblem]:
    """Every missing prerequisite and forbidden combination among `advertised` profiles.

    `advertised` maps profile names to the (major, minor) version served, or to several versions
    when an engine advertises more than one major (a prerequisite holds when any satisfies it); a
    plain collection of names means the catalogue's current versions. `limits` maps profile name ->
    limit name -> value; a limit left out takes its contract default, so a partial mapping (or what a
    capability message sets) is judged on effective values. The declarations come from the compiled
    descriptors only. The reference engine's start-up and `UpdateConfig`, the validators and the
    conformance runner all judge combinations with this one function, so what one refuses the others
    refuse too. `cat` defaults to the compiled catalogue.
    """
    cat = cat or catalogue()
    if not isinstance(advertised, Mapping):
        advertised = {name: (cat.profile(name).version if cat.profile(name) else (0, 0)) for name in advertised}
    limits = limits or {}
    problems: list[CombinationProblem] = []
    for profile in cat.profiles:
        if profile.name not in advertised:
            continue
        for req in profile.requires:
            have = _versions(advertised.get(req.profile))
            if not any(req.range.contains(version) for version in have):
                problems.append(_missing(profile.name, req, have))
        for inc in profile.incompatible_with:
            if inc.profile is not None and inc.profile not in advertised:
                continue
            values = _condition_values(inc.when, advertised, limits, cat)
            if values is not None:
                problems.append(_forbidden(profile.name, inc, values))
    return problems


def _condition_values(conditions: tuple[LimitCondition, ...], advertised: Mapping[str, Any],
                      limits: Mapping[str, Mapping[str, Any]], cat: Catalogue) -> tuple[Any, ...] | None:
    """The effective values `conditions` read when every one holds, else None. A limit the caller
    left out takes its contract default."""
    read = []
    for condition in conditions:
        if condition.profile not in advertised:
            return None
        given = limits.get(condition.profile) or {}
        if condition.limit in given:
            value = given[condition.limit]
        else:
            info = cat.limit(condition.reference)
            value = info.default if info is not None else None
        if not condition.holds(value):
            return None
        read.append(value)
    return tuple(read)


def _missing(profile: str, req: Prerequisite, have: tuple[tuple[int, int], ...]) -> CombinationProblem:
    if not have:
        return CombinationProblem(
            profile, "requires", (),
            f"{profile} requires {req.profile} ({req.range}), which is not advertised; "
            f"add {req.profile} or drop {profile}", prerequisite=req)
    shown = " and ".join(f"{m}.{n}" for m, n in have)
    return CombinationProblem(
        profile, "requires", (),
        f"{profile} requires {req.profile} {req.range}, but {req.profile} {shown} is advertised",
        prerequisite=req, values=have)


def _forbidden(profile: str, inc: Incompatibility, values: tuple[Any, ...]) -> CombinationProblem:
    other = f" with {inc.profile}" if inc.profile and inc.profile != profile else ""
    condition = f" while {' and '.join(str(c) for c in inc.when)}" if inc.when else ""
    return CombinationProblem(
        profile, "incompatible_with", tuple(c.reference for c in inc.when),
        f"{profile} cannot be served{other}{condition}: {inc.reason}", incompatibility=inc, values=values)


def role_numbers() -> dict[str, int]:
    """Role spelling (`prefill`, as scopes and `--role` write it) -> `EngineRole` enum number, from
    the `EngineRole` enum itself."""
    enum = server_pb2.EngineRole.DESCRIPTOR
    return {enum_spelling(enum.name, v.name): v.number for v in enum.values if v.number != 0}


def role_spelling(number: int) -> str:
    """`EngineRole` enum number -> its value name (`ENGINE_ROLE_PREFILL`), or the number when
    unknown."""
    value = server_pb2.EngineRole.DESCRIPTOR.values_by_number.get(number)
    return value.name if value is not None else str(number)


def parse_version(text: str) -> tuple[int, int]:
    """`1.2` -> (1, 2); a missing part counts as 0."""
    major, _, minor = (text or "0.0").partition(".")
    return int(major or 0), int(minor or 0)


def _parse_default(text: str, lim_field: descriptor.FieldDescriptor) -> Any:
    """A limit option's default (registry spelling, JSON) as a Python value."""
    if text == "":
        return [] if lim_field.is_repeated else None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parse_bound(text: str):
    if text == "":
        return None
    return float(text) if any(c in text for c in ".eE") else int(text)


def _declared_facts(decl: options_pb2.ProfileDeclaration) -> dict[str, Any]:
    return dict(
        version=parse_version(decl.version), scope=decl.scope or "engine", roles=tuple(decl.roles),
        mandatory=decl.mandatory, deprecated=decl.deprecated,
        requires=tuple(Prerequisite(r.profile, VersionRange.parse(r.version_range)) for r in decl.requires),
        incompatible_with=tuple(
            Incompatibility(i.profile or None,
                            tuple(LimitCondition(c.profile, c.limit, c.operator, json.loads(c.value))
                                  for c in i.when),
                            i.reason)
            for i in decl.incompatible_with))


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """Read the catalogue from the compiled descriptors (once per process)."""
    contract = capabilities_pb2.DESCRIPTOR.GetOptions().Extensions[options_pb2.registry_contract]
    cap_fields = {f.message_type.full_name: f.name for f in capabilities_pb2.Capabilities.DESCRIPTOR.fields
                  if f.message_type is not None and f.name != "profiles"}
    profiles: dict[str, dict] = {
        decl.name: dict(name=decl.name, capability_field=None, capability_message=None, limits=(), rpcs=[],
                        **_declared_facts(decl))
        for decl in contract.profiles}
    for msg in capabilities_pb2.DESCRIPTOR.message_types_by_name.values():
        options = msg.GetOptions()
        if not options.HasExtension(options_pb2.capability_profile):
            continue
        capability_profile = options.Extensions[options_pb2.capability_profile]
        limits = []
        for f in msg.fields:
            field_options = f.GetOptions()
            if not field_options.HasExtension(options_pb2.limit):
                continue
            limit_options = field_options.Extensions[options_pb2.limit]
            limits.append(LimitInfo(capability_profile.profile, f.name, f, _parse_default(limit_options.default, f),
                                    _parse_bound(limit_options.minimum), _parse_bound(limit_options.maximum),
                                    limit_options.unit, limit_options.updatable))
        profiles[capability_profile.profile].update(
            capability_field=cap_fields.get(msg.full_name), capability_message=msg, limits=tuple(limits))
    services: dict[str, descriptor.ServiceDescriptor] = {}
    rpcs: list[RpcInfo] = []
    modules = [importlib.import_module(f"{v1_package.__name__}.{info.name}")
               for info in pkgutil.iter_modules(v1_package.__path__) if info.name.endswith("_service_pb2")]
    for module in modules:
        for svc in module.DESCRIPTOR.services_by_name.values():
            services[svc.full_name] = svc
            for method in svc.methods:
                method_options = method.GetOptions()
                if not method_options.HasExtension(options_pb2.method_profile):
                    continue
                method_profile = method_options.Extensions[options_pb2.method_profile]
                rpc = RpcInfo(svc.full_name, method, method_profile.profile, method_profile.since)
                rpcs.append(rpc)
                profiles[method_profile.profile]["rpcs"].append(rpc)
    built = [ProfileInfo(**{**entry, "rpcs": tuple(entry["rpcs"])}) for entry in profiles.values()]
    # Contract order: the order of the Capabilities fields, then the rest in registry order.
    order = {name: i for i, name in enumerate(cap_fields.values())}
    built.sort(key=lambda p: order.get(p.capability_field, len(order)))
    ordered_services = dict(sorted(services.items(), key=lambda kv: _service_rank(kv[0], rpcs, built)))
    core = next((p.name for p in built if p.mandatory), built[0].name if built else "")
    return Catalogue(tuple(built), ordered_services, tuple(rpcs), core, contract.revision,
                     contract.schema_revision, _request_limits(ordered_services.values()),
                     contract.minimum_client_revision, contract.schema_release)


def _request_limits(services: Iterable[descriptor.ServiceDescriptor]) -> tuple[RequestLimit, ...]:
    """The `request_limit` options of every RPC's request message, in contract order."""
    seen: dict[str, tuple[RequestLimit, ...]] = {}
    for svc in services:
        for method in svc.methods:
            request = method.input_type
            if request.full_name in seen:
                continue
            rows = request.GetOptions().Extensions[options_pb2.request_limit]
            seen[request.full_name] = tuple(
                RequestLimit(request.name, r.field, r.check, r.profile, r.limit or None, r.when or None)
                for r in rows)
    return tuple(row for rows in seen.values() for row in rows)


def _service_rank(service, rpcs, profiles):
    names = [p.name for p in profiles]
    ranks = [names.index(r.profile) for r in rpcs if r.service == service and r.profile in names]
    return (min(ranks) if ranks else len(names), service)


@dataclass(frozen=True)
class NumberDomain:
    """The values a number field of a request may hold, as its `number_domain` option declares
    them: between `low` and `high` (None: unbounded), each end included unless marked open; on a
    map field, the values. `token_id_keys`: the map's keys are token ids, each below the model's
    vocabulary size. Every float and double field must be finite in any case (REQ-SVC-005)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    token_id_keys: bool = False

    def contains(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return True

    def outside(self) -> tuple[float, ...]:
        """The nearest values just outside each bounded end: the open end itself, or one beyond
        a closed end."""
        below = () if self.low is None else (self.low if self.low_open else self.low - 1,)
        above = () if self.high is None else (self.high if self.high_open else self.high + 1,)
        return below + above

    def __str__(self) -> str:
        low = "(-inf" if self.low is None else f"{'(' if self.low_open else '['}{self.low:g}"
        high = "+inf)" if self.high is None else f"{self.high:g}{')' if self.high_open else ']'}"
        return f"{low}, {high}"


@lru_cache(maxsize=1)
def number_domains() -> dict[str, NumberDomain]:
    """Full field name (`openengine.v1.SamplingParams.top_p`) -> its `number_domain` option, for
    every field of every request message (and the messages they hold) that declares one."""
    found: dict[str, NumberDomain] = {}
    seen: set[str] = set()
    pending = [rpc.method.input_type for rpc in catalogue().rpcs]
    while pending:
        message = pending.pop()
        if message.full_name in seen:
            continue
        seen.add(message.full_name)
        for f in message.fields:
            options = f.GetOptions()
            if options.HasExtension(options_pb2.number_domain):
                d = options.Extensions[options_pb2.number_domain]
                found[f.full_name] = NumberDomain(
                    d.minimum if d.HasField("minimum") else None, d.maximum if d.HasField("maximum") else None,
                    d.minimum_exclusive, d.maximum_exclusive, d.token_id_keys)
            if f.message_type is not None:
                pending.append(f.message_type)
    return found
