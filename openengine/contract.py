"""The contract as the compiled descriptors describe it.

Which RPC belongs to which profile (and since which version), the profiles' versions, scopes and
roles, their capability fields and the typed limits with their defaults and ranges are all read
here from the custom options the generator put on the services and the capability messages
(`openengine.v1.options_pb2`). The reference engine and the conformance runner both build on this
one reader, so neither carries a second copy of the catalogue and both work wherever the bindings
are installed, without `profiles.yaml` next to them.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from google.protobuf import descriptor as _d
from google.protobuf import message_factory

import openengine.v1 as _v1
from openengine.v1 import capabilities_pb2, options_pb2

STANDARD_PREFIX = "openengine."
CORE = "openengine.core"
HEALTH_SERVICE = "grpc.health.v1.Health"


@dataclass(frozen=True)
class LimitInfo:
    """One typed limit: a field of a capability message and its registry declaration."""

    profile: str
    name: str
    field: _d.FieldDescriptor
    default: Any
    minimum: int | float | None
    maximum: int | float | None
    unit: str

    @property
    def reference(self) -> str:
        return f"{self.profile}.{self.name}"

    @property
    def repeated(self) -> bool:
        return self.field.is_repeated

    @property
    def enum(self) -> _d.EnumDescriptor | None:
        return self.field.enum_type

    @property
    def kind(self) -> str:
        t = self.field.type
        if self.enum is not None:
            base = "enum"
        elif t == _d.FieldDescriptor.TYPE_BOOL:
            base = "bool"
        elif t == _d.FieldDescriptor.TYPE_STRING:
            base = "string"
        elif t in (_d.FieldDescriptor.TYPE_DOUBLE, _d.FieldDescriptor.TYPE_FLOAT):
            base = "double"
        elif t in (_d.FieldDescriptor.TYPE_INT32, _d.FieldDescriptor.TYPE_INT64,
                   _d.FieldDescriptor.TYPE_SINT32, _d.FieldDescriptor.TYPE_SINT64):
            base = "int"
        else:
            base = "uint"
        return base

    def enum_spellings(self) -> dict[str, int]:
        """Registry spelling (`json_schema`) -> enum number, derived from the enum's value names."""
        if self.enum is None:
            return {}
        prefix = _enum_prefix(self.enum)
        return {v.name[len(prefix):].lower(): v.number for v in self.enum.values if v.number != 0}


@dataclass(frozen=True)
class RpcInfo:
    """One RPC of the contract, with the profile that carries it and the version it came in."""

    service: str          # full service name, e.g. openengine.v1.Observability
    method: _d.MethodDescriptor
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
class ProfileInfo:
    name: str
    version: tuple[int, int]
    scope: str
    roles: tuple[str, ...]
    capability_field: str | None
    capability_message: _d.Descriptor | None
    limits: tuple[LimitInfo, ...]
    rpcs: tuple[RpcInfo, ...] = ()

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
        return {lim.name: lim.default for lim in self.limits}


@dataclass(frozen=True)
class Catalogue:
    """Profiles in contract order, the services and RPCs that carry them."""

    profiles: tuple[ProfileInfo, ...]
    services: dict[str, _d.ServiceDescriptor] = field(default_factory=dict)
    rpcs: tuple[RpcInfo, ...] = ()
    core: str = ""

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


def parse_version(text: str) -> tuple[int, int]:
    """`1.2` -> (1, 2); a missing part counts as 0."""
    major, _, minor = (text or "0.0").partition(".")
    return int(major or 0), int(minor or 0)


def _enum_prefix(enum: _d.EnumDescriptor) -> str:
    """GuidedDecodingMode -> GUIDED_DECODING_MODE_ (the value-name prefix proto style uses)."""
    out = []
    for i, ch in enumerate(enum.name):
        if ch.isupper() and i and not enum.name[i - 1].isupper():
            out.append("_")
        out.append(ch.upper())
    return "".join(out) + "_"


def _parse_default(text: str, lim_field: _d.FieldDescriptor) -> Any:
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


def _service_modules():
    for info in pkgutil.iter_modules(_v1.__path__):
        if info.name.endswith("_service_pb2"):
            yield importlib.import_module(f"{_v1.__name__}.{info.name}")


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """Read the catalogue from the compiled descriptors (once per process)."""
    cap_fields = {f.message_type.full_name: f.name for f in capabilities_pb2.Capabilities.DESCRIPTOR.fields
                  if f.message_type is not None and f.name != "profiles"}
    profiles: dict[str, dict] = {}
    for msg in capabilities_pb2.DESCRIPTOR.message_types_by_name.values():
        opts = msg.GetOptions()
        if not opts.HasExtension(options_pb2.capability_profile):
            continue
        cp = opts.Extensions[options_pb2.capability_profile]
        limits = []
        for f in msg.fields:
            fo = f.GetOptions()
            if not fo.HasExtension(options_pb2.limit):
                continue
            lo = fo.Extensions[options_pb2.limit]
            limits.append(LimitInfo(cp.profile, f.name, f, _parse_default(lo.default, f),
                                    _parse_bound(lo.minimum), _parse_bound(lo.maximum), lo.unit))
        profiles[cp.profile] = dict(name=cp.profile, version=parse_version(cp.version), scope=cp.scope,
                                    roles=tuple(cp.roles), capability_field=cap_fields.get(msg.full_name),
                                    capability_message=msg, limits=tuple(limits), rpcs=[])
    services: dict[str, _d.ServiceDescriptor] = {}
    rpcs: list[RpcInfo] = []
    for module in _service_modules():
        for svc in module.DESCRIPTOR.services_by_name.values():
            services[svc.full_name] = svc
            for method in svc.methods:
                mo = method.GetOptions()
                if not mo.HasExtension(options_pb2.method_profile):
                    continue
                mp = mo.Extensions[options_pb2.method_profile]
                rpc = RpcInfo(svc.full_name, method, mp.profile, mp.since)
                rpcs.append(rpc)
                entry = profiles.get(mp.profile)
                if entry is None:  # a profile without a capability message
                    entry = profiles[mp.profile] = dict(
                        name=mp.profile, version=parse_version(mp.since), scope="engine", roles=(),
                        capability_field=None, capability_message=None, limits=(), rpcs=[])
                entry["rpcs"].append(rpc)
    built = []
    for entry in profiles.values():
        entry["rpcs"] = tuple(entry["rpcs"])
        built.append(ProfileInfo(**entry))
    # Contract order: the order of the Capabilities fields (registry order), then the rest.
    order = {name: i for i, name in enumerate(cap_fields.values())}
    built.sort(key=lambda p: order.get(p.capability_field, len(order)))
    ordered_services = dict(sorted(services.items(), key=lambda kv: _service_rank(kv[0], rpcs, built)))
    core = built[0].name if built else ""
    return Catalogue(tuple(built), ordered_services, tuple(rpcs), core)


def _service_rank(service, rpcs, profiles):
    names = [p.name for p in profiles]
    ranks = [names.index(r.profile) for r in rpcs if r.service == service and r.profile in names]
    return (min(ranks) if ranks else len(names), service)
