"""Who owns what on the wire: for every message and enum, the profiles whose RPCs or capability
messages reach it, transitively through message fields (spec/versioning.md, "Ownership follows the
wire").

A profile's roots are its RPCs' requests and responses, the messages it lists and its capability
message; everything reachable from a root through field types is owned too (a core 1.0 peer parses
`KvSessionRef` inside `GenerateRequest.kv`). The walk never enters another profile's capability
message inside `Capabilities` or `ModelCapabilities`. `describe` maps one buf finding to the
elements it names, their owners and, for a generated file, the registry line behind it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from oespec.breaking.match import type_name
from openengine.contractkit.locations import Loc
from oespec.registry import Profile, Registry, Rpc
from openengine.contractkit.naming import snake_case

CONTAINERS = ("Capabilities", "ModelCapabilities")
GENERATED_HEADER = "generated from profiles.yaml"


@dataclass
class WireGraph:
    """Type name (relative to the package, `Outer.Inner` for nested ones) -> the types it refers to."""

    edges: dict[str, set[str]] = field(default_factory=dict)
    # (message, field number) -> the field's type, for the containers' capability fields
    field_types: dict[tuple[str, int], str] = field(default_factory=dict)

    def reach(self, roots: set[str], *, blocked: set[str] = frozenset()) -> set[str]:
        seen: set[str] = set()
        stack = [r for r in roots if r in self.edges or "." not in r]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            for target in self.edges.get(name, ()):
                if target not in seen and target not in blocked:
                    stack.append(target)
        return seen


def graph_from_descriptors(fds, package: str) -> WireGraph:
    """The type graph of one package, from a compiled FileDescriptorSet."""
    from oespec.descriptors import walk

    graph = WireGraph()
    prefix = package + "."

    def local(name: str) -> str | None:
        return name[len(prefix):] if name.startswith(prefix) else None

    for f in fds.file:
        if f.package != package:
            continue
        for kind, full, proto, _, parent in walk(f):
            holder = local(parent)          # None for a top-level type
            if kind in ("message", "enum"):
                graph.edges.setdefault(local(full), set())
                if holder:
                    graph.edges[holder].add(local(full))
            elif kind == "field" and local(proto.type_name.lstrip(".")):
                target = local(proto.type_name.lstrip("."))
                graph.edges[holder].add(target)
                graph.field_types[(holder, proto.number)] = target
    return graph


def load_graph(proto_root: Path | None, package: str) -> WireGraph | None:
    """Compile a proto tree and return its type graph; None when it has no protos or does not build
    (buf reports that on its own)."""
    if proto_root is None or not proto_root.is_dir():
        return None
    from oespec.protoc import ProtocError, compile_descriptor_set, read_sources

    sources = read_sources(proto_root)
    try:
        return graph_from_descriptors(compile_descriptor_set(sources, source_info=False), package)
    except (ProtocError, OSError, UnicodeError):
        return None


def _roots(profile: Profile, package: str) -> set[str]:
    roots = {type_name(m.name, package) for m in profile.messages}
    for rpc in profile.rpcs:
        if rpc.package == package:
            roots |= {type_name(rpc.request, package), type_name(rpc.response, package)}
    if profile.capability is not None:
        roots.add(type_name(profile.capability.message, package))
    return roots


def owners_by_type(registry: Registry, graph: WireGraph | None) -> dict[str, set[str]]:
    """Type name -> every profile whose RPCs, listed messages or capability message reach it."""
    capability_messages = {type_name(p.capability.message, registry.package): p.name
                           for p in registry.profiles if p.capability is not None}
    out: dict[str, set[str]] = {}
    for profile in registry.profiles:
        roots = _roots(profile, registry.package)
        blocked = {m for m, owner in capability_messages.items() if owner != profile.name}
        reached = graph.reach(roots, blocked=blocked) if graph is not None else roots
        for name in reached | roots:
            out.setdefault(name, set()).add(profile.name)
    return out


_NAMED = re.compile(r'\b(message|service|RPC|enum|file|field) "([^"]+)"')


def buf_names(message: str) -> dict[str, list[str]]:
    """What one buf finding names, by kind (message, service, RPC, enum, file, field), in order."""
    names: dict[str, list[str]] = {}
    for kind, value in _NAMED.findall(message):
        names.setdefault(kind, []).append(value)
    return names


@dataclass(frozen=True)
class Origin:
    """The registry element a generated proto element comes from."""

    what: str        # e.g. "capability of openengine.adapters (Capabilities.adapters = 13)"
    profile: str
    loc: Loc
    side: str        # "current" or "baseline": which registry file `loc` is in


@dataclass
class Attribution:
    owners: set[str]
    origin: Origin | None = None
    shared: bool = False   # the element is reached by no profile at all


def _capability_profile(registry: Registry, number: int) -> Profile | None:
    return next((p for p in registry.profiles if p.capability and p.capability.number == number), None)


def _rpcs_of_file(registry: Registry, file: str) -> list[tuple[Profile, Rpc]]:
    """The RPCs whose service a generated `<service>_service.proto` file defines."""
    stem = Path(file).stem
    return [(profile, rpc) for profile, rpc in registry.all_rpcs()
            if stem.endswith("_service") and snake_case(rpc.service_short) == stem[: -len("_service")]]


def _origin(registry: Registry, side: str, names: dict[str, list[str]]) -> Origin | None:
    """The registry element behind a finding on a generated file, looked up in `registry`."""
    pkg = registry.package
    message = (names.get("message") or [""])[0]
    numbers = [int(v) for v in names.get("field", []) if v.isdigit()]
    if message in CONTAINERS and numbers:
        profile = _capability_profile(registry, numbers[0])
        if profile is not None:
            cap = profile.capability
            return Origin(f"capability of {profile.name} ({message}.{cap.field} = {cap.number})",
                          profile.name, cap.at("number"), side)
    for profile in registry.profiles:
        if message and profile.capability and type_name(profile.capability.message, pkg) == message:
            limit = next((lim for lim in profile.limits if numbers and lim.field == numbers[0]), None)
            if limit is not None:
                return Origin(f"limit {profile.name}.{limit.name} (field {limit.field})", profile.name,
                              limit.at("field"), side)
            cap = profile.capability
            return Origin(f"capability message {cap.message} of {profile.name}", profile.name,
                          cap.at("message"), side)
    for enum in names.get("enum", []):
        for profile in registry.profiles:
            limit = next((lim for lim in profile.limits if lim.type.enum_name == enum), None)
            if limit is not None:
                return Origin(f"values of limit {profile.name}.{limit.name} (enum {enum})", profile.name,
                              limit.at("values"), side)
    rpcs = names.get("RPC", [])
    for service in names.get("service", []):
        for profile, rpc in registry.all_rpcs():
            if rpc.service in (service, f"{pkg}.{service}") and (not rpcs or rpc.method in rpcs):
                return Origin(f"RPC {rpc.name} of {profile.name}", profile.name, rpc.loc, side)
    for file in names.get("file", []):
        for profile, rpc in _rpcs_of_file(registry, file):
            return Origin(f"RPC {rpc.name} of {profile.name}", profile.name, rpc.loc, side)
    return None


def _in_current(origin: Origin, current: Registry | None) -> Origin:
    """Point at the element as the working tree has it, when its profile still declares it: that
    is the line a maintainer edits."""
    if origin.what.startswith("RPC ") and current is not None:
        name = origin.what.split(" ")[1]
        for owner, rpc in current.all_rpcs():
            if rpc.name == name:
                return Origin(f"RPC {rpc.name} of {owner.name}", owner.name, rpc.loc, "current")
        return origin
    profile = current.profile(origin.profile) if current is not None else None
    if profile is None:
        return origin
    if origin.what.startswith("capability") and profile.capability is not None:
        cap = profile.capability
        key = "number" if " = " in origin.what else "message"
        return Origin(origin.what + f"; now {cap.field} = {cap.number}" if key == "number" else origin.what,
                      profile.name, cap.at(key), "current")
    if origin.what.startswith(("limit ", "values of limit ")):
        name = origin.what.split(f"{profile.name}.", 1)[1].split(" ", 1)[0]
        limit = profile.limit(name)
        if limit is not None:
            key = "values" if origin.what.startswith("values") else "field"
            return Origin(origin.what, profile.name, limit.at(key), "current")
    return origin


def attribute(message: str, baseline: Registry | None, current: Registry | None,
              graph: WireGraph | None, *, generated: bool = False) -> Attribution:
    """Who owns what one buf message names (judged on the baseline: the contract peers were built
    from), and, for a finding on a generated file, which registry element produced it."""
    if baseline is None:
        return Attribution(set())
    names = buf_names(message)
    pkg = baseline.package
    by_type = owners_by_type(baseline, graph)
    found: set[str] = set()
    reached_any = False
    rpcs = names.get("RPC", [])
    for service in names.get("service", []):
        members = [(p, r) for p, r in baseline.all_rpcs() if r.service in (service, f"{pkg}.{service}")]
        reached_any = reached_any or bool(members)
        for profile, rpc in members:
            if not rpcs or rpc.method in rpcs:
                found.add(profile.name)
    numbers = [int(v) for v in names.get("field", []) if v.isdigit()]
    for msg in names.get("message", []):
        if msg in CONTAINERS and numbers:
            profile = _capability_profile(baseline, numbers[0])
            if profile is not None:
                found.add(profile.name)
                reached_any = True
                continue
        # buf names a nested message by its own name (`Usage` for GenerateResponse.Usage).
        candidates = [t for t in by_type if t == msg or t.endswith("." + msg)] or \
            ([msg.split(".")[0]] if msg.split(".")[0] in by_type else [])
        owners = set().union(*(by_type[t] for t in candidates)) if candidates else set()
        reached_any = reached_any or bool(owners)
        found |= owners
    for enum in names.get("enum", []):
        owners = by_type.get(enum, set())
        reached_any = reached_any or bool(owners)
        found |= owners
    for file in names.get("file", []):
        members = _rpcs_of_file(baseline, file)
        found |= {profile.name for profile, _ in members}
        reached_any = reached_any or bool(members)
    origin = None
    if generated:
        # What the baseline generated is what changed; the current registry says where it is now.
        origin = _origin(baseline, "baseline", names)
        origin = _in_current(origin, current) if origin is not None else \
            (_origin(current, "current", names) if current is not None else None)
        if origin is None:  # a fixed part of a generated file (Capabilities.profiles, file options)
            registry = current or baseline
            origin = Origin("the registry as a whole (a part every generated file of this kind has)", "",
                            registry.at("registry"), "current" if current else "baseline")
    shared = not found and (bool(names.get("message")) or bool(names.get("enum"))) and not reached_any
    return Attribution(found, origin, shared)


def is_generated(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as handle:
            return GENERATED_HEADER in handle.readline()
    except (OSError, UnicodeError):
        return False
