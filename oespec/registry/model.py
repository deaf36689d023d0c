"""The registry as typed, immutable data: what every other stage reads.

A `Registry` is produced by `resolve` from a schema-valid YAML tree. Each element keeps the
location of its mapping (`loc`) and of each of its keys' values (`locs`), so checks and breaking
rules can point at the exact line a maintainer has to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from openengine.contractkit.locations import Loc, NOWHERE
from openengine.contractkit.conditions import condition_text
from openengine.contractkit.naming import streams_from_client, streams_from_server
from openengine.contractkit.versions import Version, VersionRange

STANDARD_PREFIX = "openengine."
ROLES = ("aggregated", "prefill", "decode", "encoder")
SCALAR_TYPES = ("bool", "uint32", "uint64", "int32", "double", "string")
BASE_TYPES = SCALAR_TYPES + ("enum",)


@dataclass(frozen=True, kw_only=True)
class Located:
    """Where an element is written: its mapping (`loc`) and each of its keys' values (`locs`)."""

    loc: Loc = NOWHERE
    locs: dict[str, Loc] = field(default_factory=dict, compare=False, hash=False)

    def at(self, key: str) -> Loc:
        """The location of the value of `key`, else of the element itself."""
        return self.locs.get(key, self.loc)


@dataclass(frozen=True)
class HistoryEntry(Located):
    version: Version
    changes: str


@dataclass(frozen=True)
class Rpc(Located):
    """An RPC a profile requires, by full name `package.Service/Method`."""

    name: str
    request: str
    response: str
    streaming: str
    since: Version
    description: str
    deprecated: str | None = None

    @property
    def service(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def method(self) -> str:
        return self.name.split("/", 1)[1] if "/" in self.name else ""

    @property
    def package(self) -> str:
        return self.service.rsplit(".", 1)[0] if "." in self.service else ""

    @property
    def service_short(self) -> str:
        return self.service.rsplit(".", 1)[-1]

    @property
    def client_streaming(self) -> bool:
        return streams_from_client(self.streaming)

    @property
    def server_streaming(self) -> bool:
        return streams_from_server(self.streaming)


@dataclass(frozen=True)
class MessageRef(Located):
    """A message a profile requires (short name in the registry package, or a full name)."""

    name: str
    since: Version
    description: str
    deprecated: str | None = None


@dataclass(frozen=True)
class LimitType:
    base: str
    repeated: bool = False
    enum_name: str | None = None
    enum_values: tuple[str, ...] = ()
    # The wire number of each value, in the order of `enum_values`. Written in the registry as
    # `values: {name: number}`; the older list form numbers values by position (1, 2, ...).
    enum_numbers: tuple[int, ...] = ()
    numbered: bool = False   # True when the registry gave the numbers explicitly

    @classmethod
    def parse(cls, text: str, enum_name: str | None = None, values=()) -> "LimitType":
        words = str(text).split()
        repeated = len(words) == 2 and words[0] == "repeated"
        base = words[-1] if words else ""
        if not words or len(words) > 2 or (len(words) == 2 and not repeated) or base not in BASE_TYPES:
            raise ValueError(f"{text!r} is not a limit type")
        if base != "enum":
            return cls(base, repeated, None)
        if isinstance(values, dict):
            names = tuple(str(k) for k in values)
            numbers = tuple(v if isinstance(v, int) and not isinstance(v, bool) else 0 for v in values.values())
            return cls(base, repeated, enum_name, names, numbers, True)
        names = tuple(values)
        return cls(base, repeated, enum_name, names, tuple(range(1, len(names) + 1)), False)

    @property
    def enum_wire(self) -> dict[str, int]:
        """Enum value -> its wire number."""
        return dict(zip(self.enum_values, self.enum_numbers))

    def __str__(self) -> str:
        return ("repeated " if self.repeated else "") + self.base

    def accepts(self, value: Any) -> bool:
        """Does `value` have this type? (Used for defaults, validators and conditions.)"""
        if self.repeated:
            return isinstance(value, list) and all(self.element_accepts(v) for v in value)
        return self.element_accepts(value)

    def element_accepts(self, value: Any) -> bool:
        base = self.base
        if base == "bool":
            return isinstance(value, bool)
        if base in ("uint32", "uint64", "int32"):
            if isinstance(value, bool) or not isinstance(value, int):
                return False
            lo, hi = INTEGER_BOUNDS[base]
            return lo <= value <= hi
        if base == "double":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if base == "string":
            return isinstance(value, str)
        if base == "enum":
            return isinstance(value, str) and value in self.enum_values
        return False


INTEGER_BOUNDS = {
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "int32": (-(2**31), 2**31 - 1),
}


@dataclass(frozen=True)
class Limit(Located):
    """A typed limit: one field of the profile's capability message."""

    name: str
    type: LimitType
    field: int
    default: Any
    description: str
    since: Version
    minimum: float | int | None = None
    maximum: float | int | None = None
    unit: str | None = None
    deprecated: str | None = None
    updatable: bool = False    # UpdateConfig may change it while the engine runs

    def in_range(self, value: Any) -> bool:
        """Is a number within [minimum, maximum]? (Anything else has no range to be out of.)"""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        return ((self.minimum is None or value >= self.minimum)
                and (self.maximum is None or value <= self.maximum))


@dataclass(frozen=True)
class Capability(Located):
    """The field of `Capabilities` a profile owns, and the message type of that field."""

    field: str
    number: int
    message: str


@dataclass(frozen=True)
class Requirement(Located):
    profile: str
    range: VersionRange


@dataclass(frozen=True)
class Condition(Located):
    """`<profile>.<limit> <operator> <value>`, e.g. openengine.core.speculative_decoding equals true."""

    profile: str
    limit: str
    operator: str
    value: Any

    @property
    def reference(self) -> str:
        return f"{self.profile}.{self.limit}" if self.profile else self.limit

    def __str__(self) -> str:
        return condition_text(self.reference, self.operator, self.value)


@dataclass(frozen=True)
class Incompatibility(Located):
    """This profile cannot be advertised together with `profile` (when given) while every
    condition in `when` holds. With no `profile`, the conditions alone are the forbidden combination."""

    profile: str | None
    when: tuple[Condition, ...]
    reason: str


@dataclass(frozen=True)
class Scope:
    kind: str
    roles: tuple[str, ...] = ()
    loc: Loc = NOWHERE

    def __str__(self) -> str:
        return f"role ({', '.join(self.roles)})" if self.kind == "role" else self.kind


@dataclass(frozen=True)
class Profile(Located):
    name: str
    version: Version
    mandatory: bool
    scope: Scope
    summary: str
    description: str
    history: tuple[HistoryEntry, ...]
    rpcs: tuple[Rpc, ...]
    messages: tuple[MessageRef, ...]
    capability: Capability | None
    limits: tuple[Limit, ...]
    requires: tuple[Requirement, ...]
    incompatible_with: tuple[Incompatibility, ...]
    deprecated: str | None = None
    stability_given: str | None = None     # `stability:` as written; see `stability`
    requirement_areas_given: tuple[str, ...] = ()   # `requirement_areas:` as written; see `requirement_areas`

    @property
    def requirement_areas(self) -> tuple[str, ...]:
        """The spec areas (REQ-<AREA>-NNN) that belong to this profile: as written, else its short
        name in capitals without punctuation."""
        return self.requirement_areas_given or (re.sub(r"[^A-Z0-9]", "", self.short_name.upper()),)

    @property
    def stability(self) -> str:
        """experimental, stable or deprecated: as written, else what the version and
        `deprecated` imply (a deprecated profile is deprecated, a 0.x one experimental)."""
        if self.stability_given:
            return self.stability_given
        if self.deprecated:
            return "deprecated"
        return "experimental" if self.version.major == 0 else "stable"

    @property
    def standard(self) -> bool:
        return self.name.startswith(STANDARD_PREFIX)

    @property
    def short_name(self) -> str:
        """`openengine.runtime-events` -> `runtime-events`; what `--profiles` accepts."""
        return self.name[len(STANDARD_PREFIX):] if self.standard else self.name

    def limit(self, name: str) -> Limit | None:
        return next((lim for lim in self.limits if lim.name == name), None)


@dataclass(frozen=True)
class Registry(Located):
    path: str
    revision: int
    package: str
    profiles: tuple[Profile, ...]
    # ServerInfo.schema_revision and minimum_client_revision of this contract, on upstream
    # OpenEngine v1's scale (spec/revisions.md); None when the header omits them.
    schema_revision: int | None = None
    minimum_client_revision: int | None = None

    @property
    def schema_release(self) -> str:
        """The immutable release name ServerInfo.schema_release reports: one per registry revision."""
        return f"openengine-profiles/registry-{self.revision}"

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)

    @property
    def core(self) -> Profile | None:
        return next((p for p in self.profiles if p.mandatory), None)

    def rpc_owner(self) -> dict[str, Profile]:
        """Full RPC name -> the profile that requires it (the first, if a checker error lets two)."""
        owners: dict[str, Profile] = {}
        for profile in self.profiles:
            for rpc in profile.rpcs:
                owners.setdefault(rpc.name, profile)
        return owners

    def all_rpcs(self) -> list[tuple[Profile, Rpc]]:
        return [(p, r) for p in self.profiles for r in p.rpcs]

    def services(self) -> dict[str, list[tuple[Profile, Rpc]]]:
        """Services of the registry's own package, in first-seen order, with their RPCs."""
        out: dict[str, list[tuple[Profile, Rpc]]] = {}
        for profile, rpc in self.all_rpcs():
            if rpc.package == self.package:
                out.setdefault(rpc.service, []).append((profile, rpc))
        return out
