"""What a breaking rule is, and what its handler sees and says.

A registry rule is a catalogue entry (id `OEB0xx`, who a violation breaks, the bump that makes it
legal) plus a handler that gets one matched pair (`oespec.breaking.match`) and yields `Change`s.
`@rule(...)` turns a handler into a `Rule`; `oespec.breaking.registry_rules` lists them in `RULES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from openengine.contractkit.rules import RuleSpec, SpecFacts
from oespec.breaking.match import Pair
from oespec.registry import Registry, Version

BREAKS = ("clients", "servers", "both", "none")
BUMPS = ("major", "minor", "none")


@dataclass(frozen=True)
class Change:
    """What a handler yields: where (in the current file), what, and whose version governs it."""

    loc: Loc
    message: str
    profile: str | None = None        # the profile whose bump makes the change legal
    baseline: Loc | None = None       # where the element was at the baseline ref
    hint: str = ""
    severity: Severity | None = None  # overrides the bump-derived severity
    details: tuple[tuple[str, str], ...] = ()  # extra (key, value) details of the finding


@dataclass(frozen=True)
class Context:
    baseline: Registry | None
    current: Registry
    baseline_path: str = "profiles.yaml"  # the registry's path inside the baseline ref
    ref: str = "baseline"                 # the git ref the baseline came from

    def bump(self, name: str | None) -> str:
        """The bump profile `name` received: major, minor, none, or down (its version decreased)."""
        prev = self.baseline.profile(name) if self.baseline and name else None
        cur = self.current.profile(name) if name else None
        if prev is None or cur is None:
            return "none"
        return version_bump(prev.version, cur.version)


def version_bump(before: Version, after: Version) -> str:
    if after.major > before.major:
        return "major"
    if after < before:
        return "down"
    return "minor" if after > before else "none"


Handler = Callable[[Pair, Context], Iterable[Change]]


@dataclass(frozen=True)
class Rule(SpecFacts):
    """A breaking rule: its catalogue entry plus who a violation breaks, the kinds of matched
    elements its handler looks at, and the handler."""

    spec: RuleSpec
    kinds: tuple[str, ...]
    handler: Handler | None
    # A catch-all that stays quiet when a more specific bump rule already spoke for the profile.
    fallback: bool = False

    # Who a violation breaks (clients, servers, both, or none), a fact of the catalogue entry.
    breaks = property(lambda self: self.spec.fact("breaks"))

    @property
    def requirement(self) -> str:
        """The spec requirement (spec/versioning.md) the rule enforces."""
        return self.spec.requirements[0] if self.spec.requirements else ""


def breaking_spec(id: str, name: str, *, requirement: str, category: str, purpose: str, breaks: str, bump: str,
                  severity: Severity | None = None) -> RuleSpec:
    return RuleSpec(id, name, "breaking", category, purpose, severity, bump=bump,
                    requirements=(requirement,) if requirement else (), facts=(("breaks", breaks),))


def rule(id: str, name: str, *, requirement: str, kinds: str | tuple[str, ...], category: str,
         purpose: str, breaks: str, bump: str, severity: Severity | None = None,
         fallback: bool = False) -> Callable[[Handler], Rule]:
    """The breaking rule made of the decorated handler, under a stable id."""
    if breaks not in BREAKS or bump not in BUMPS:
        raise ValueError(f"rule {id}: breaks must be one of {BREAKS}, bump one of {BUMPS}")
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    spec = breaking_spec(id, name, requirement=requirement, category=category, purpose=purpose, breaks=breaks,
                         bump=bump, severity=severity)
    return lambda handler: Rule(spec, kinds, handler, fallback)
