"""One rule type and one catalogue for every family of ids the toolkit can emit.

Registry checks (OE), breaking rules (OEB), validator rules (OEV), conformance cases, the reference
engine's faults and the spec and marker rules (SPEC, DOC) are all a `RuleSpec` registered with the
family's own handler in a `RuleCatalogue`, so registering, listing, documenting and auditing ids is
one code path. Nothing here imports the runtime or the toolkit.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TypeVar

FAMILIES = ("check", "breaking", "validator", "conformance", "fault", "spec", "docs", "generate")
BUMPS = ("major", "minor", "none")
_REQ_RE = re.compile(r"^REQ-[A-Z][A-Z0-9]*-[0-9]{3}(\.[1-9][0-9]*)?$")   # a requirement, or one of its clauses


class Severity(enum.IntEnum):
    """How bad a finding is, ordered so that `--fail-on` is a comparison. `info` records are facts
    worth seeing, never failures. The one severity type of every family and printer."""

    INFO = 1
    WARNING = 2
    ERROR = 3

    @classmethod
    def parse(cls, text: str) -> "Severity":
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r}; use one of: info, warning, error") from None

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class RuleSpec:
    """What every rule of every family declares about itself."""

    id: str
    name: str
    family: str
    category: str
    purpose: str
    severity: Severity | None = None         # None: decided per finding (breaking: by the bump received)
    bump: str = ""                           # breaking rules: the bump that makes the change legal
    requirements: tuple[str, ...] = ()
    # Facts of the family that listings show, as (key, value) pairs: whom a breaking change breaks,
    # the profile a conformance case belongs to and when it runs.
    facts: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"rule {self.id}: unknown family {self.family!r}; use one of {', '.join(FAMILIES)}")
        if self.bump and self.bump not in BUMPS:
            raise ValueError(f"rule {self.id}: bump {self.bump!r} is not one of {', '.join(BUMPS)}")
        for req in self.requirements:
            if req and not _REQ_RE.match(req):
                raise ValueError(f"rule {self.id} cites malformed requirement id {req!r}")

    def fact(self, key: str, default: str = "") -> str:
        return dict(self.facts).get(key, default)

    @property
    def policy(self) -> str:
        """The severity, or for a breaking rule the bump it needs: what a listing shows."""
        if self.bump:
            return f"bump {self.bump}"
        return str(self.severity) if self.severity is not None else "varies"

    def as_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "family": self.family, "category": self.category,
                "severity": str(self.severity) if self.severity is not None else None, "bump": self.bump or None,
                "purpose": self.purpose, "requirements": list(self.requirements)}


T = TypeVar("T")
H = TypeVar("H")


class SpecFacts:
    """For a family's rule record that holds its catalogue entry as `spec`: the entry's facts read
    through, so a record never keeps a second copy of them."""

    spec: RuleSpec

    id = property(lambda self: self.spec.id)
    name = property(lambda self: self.spec.name)
    category = property(lambda self: self.spec.category)
    purpose = property(lambda self: self.spec.purpose)
    severity = property(lambda self: self.spec.severity)
    # Breaking rules: the bump that makes a violation legal (major, minor or none).
    bump = property(lambda self: self.spec.bump)
    # The spec requirements (REQ-*) the rule enforces, wholly or in part.
    requirements = property(lambda self: self.spec.requirements)


class RuleCatalogue(Mapping[str, T]):
    """The rules of one family by id: each a spec plus the family's own payload (a check rule with
    its handler, a case, a fault), in registration order. An id whose findings come from no
    handler (the loader's verdict on unusable input, a protoc failure) is registered as a spec
    alone. Registering an id twice, or a spec of another family, is an error at import time.

    Every family registers the same way: `register(spec, payload)` for a table of data, or the
    decorator `registrar(spec, build)` for a handler function, which stores `build(handler)` and
    hands the function back unchanged."""

    def __init__(self, family: str, specs: Iterable[RuleSpec] = ()):
        if family not in FAMILIES:
            raise ValueError(f"unknown rule family {family!r}; use one of {', '.join(FAMILIES)}")
        self.family = family
        self._entries: dict[str, tuple[RuleSpec, T | None]] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: RuleSpec, payload: T | None = None) -> T | None:
        if spec.family != self.family:
            raise ValueError(f"rule {spec.id} is of family {spec.family}, not {self.family}")
        if spec.id in self._entries:
            raise ValueError(f"rule id {spec.id} registered twice")
        self._entries[spec.id] = (spec, payload)
        return payload

    def registrar(self, spec: RuleSpec, build: Callable[[H], T]) -> Callable[[H], H]:
        """A decorator that registers `build(handler)` under `spec` and returns the handler."""
        def register(handler: H) -> H:
            self.register(spec, build(handler))
            return handler

        return register

    def __getitem__(self, rule_id: str) -> T | None:
        return self._entries[rule_id][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def spec(self, rule_id: str) -> RuleSpec:
        return self._entries[rule_id][0]

    def specs(self, *, by_id: bool = True) -> list[RuleSpec]:
        """Every spec, in id or registration order."""
        specs = [spec for spec, _ in self._entries.values()]
        return sorted(specs, key=lambda s: s.id) if by_id else specs

    def payloads(self, *, by_id: bool = False) -> list[T]:
        """The payloads (specs registered alone have none), in registration or id order."""
        entries = sorted(self._entries.items()) if by_id else self._entries.items()
        return [payload for _, (_, payload) in entries if payload is not None]


def merged(catalogues: Iterable[Iterable[RuleSpec]]) -> dict[str, RuleSpec]:
    """Every spec of several families by id; one id in two families is an error."""
    out: dict[str, RuleSpec] = {}
    for cat in catalogues:
        for spec in cat:
            if spec.id in out:
                raise ValueError(f"rule id {spec.id} is claimed by {out[spec.id].family} and {spec.family}")
            out[spec.id] = spec
    return out


def find_spec(specs: Mapping[str, RuleSpec], rule_id: str) -> RuleSpec | None:
    """The spec of an emitted id: its own entry, or a family entry ending in `*` that stands for a
    whole set of ids (`buf:*` for buf's wire rules, `buf:FIELD_NO_DELETE` among them)."""
    found = specs.get(rule_id)
    if found is not None:
        return found
    for spec in specs.values():
        if spec.id.endswith("*") and rule_id.startswith(spec.id[:-1]):
            return spec
    return None
