"""Breaking-change stage: compare the registry and the protos with a baseline git ref.

A registry rule is a catalogue entry (id `OEB0xx`, who a violation breaks, the bump that makes it
legal) plus a handler that gets one matched pair (`oespec.breaking.match`) and yields `Change`s;
`compare` derives the severity from the bump the governing profile received. buf's wire findings
(`oespec.breaking.wire`) become the same `Diagnostic` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from oespec.breaking.match import Pair, pairs
from openengine.contractkit.diagnostics import Diagnostic, Loc, Severity, sorted_diagnostics
from oespec.registry import Registry, Version
from openengine.contractkit.rules import RuleCatalogue, RuleSpec, SpecFacts

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


# Every id `oespec breaking` can emit: the rules of `oespec.breaking.rules`, buf's wire findings
# (one entry for every `buf:*` id) and the verdict on unusable input.
CATALOGUE: RuleCatalogue[Rule] = RuleCatalogue("breaking")


def rule(id: str, name: str, *, requirement: str, kinds: str | tuple[str, ...], category: str,
         purpose: str, breaks: str, bump: str, severity: Severity | None = None, fallback: bool = False):
    """Register a breaking rule under a stable id."""
    if breaks not in BREAKS or bump not in BUMPS:
        raise ValueError(f"rule {id}: breaks must be one of {BREAKS}, bump one of {BUMPS}")
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    spec = breaking_spec(id, name, requirement=requirement, category=category, purpose=purpose, breaks=breaks,
                         bump=bump, severity=severity)
    return CATALOGUE.registrar(spec, lambda handler: Rule(spec, kinds, handler, fallback))


def _load_rules() -> None:
    from oespec.breaking import rules as _rules  # noqa: F401  (registers the rules)
    from oespec.breaking import run as _run  # noqa: F401  (registers the unusable-input id)
    from oespec.breaking import wire as _wire  # noqa: F401  (registers buf's wire findings)


def iter_rules() -> Iterator[Rule]:
    """Every registry rule in id order, then the buf pseudo-rule for wire findings."""
    _load_rules()
    rules = CATALOGUE.payloads(by_id=True)
    yield from (r for r in rules if r.handler is not None)
    yield from (r for r in rules if r.handler is None)


def catalogue() -> RuleCatalogue[Rule]:
    """Every id `oespec breaking` can emit: the rules, buf's wire findings, and unusable input."""
    _load_rules()
    return CATALOGUE


def _judge(r: Rule, change: Change, ctx: Context) -> tuple[Severity, str, str, dict]:
    """Severity, message, hint and extra details of a bump-governed finding."""
    if change.severity is not None:
        return change.severity, change.message, change.hint, {}
    if r.severity is not None:
        return r.severity, change.message, change.hint, {}
    if r.bump == "none":
        return Severity.INFO, change.message, change.hint, {}
    got = ctx.bump(change.profile)
    prev = ctx.baseline.profile(change.profile) if ctx.baseline and change.profile else None
    cur = ctx.current.profile(change.profile) if change.profile else None
    who = f"breaks {r.breaks}" if r.breaks != "none" else "breaks no one"
    if prev is not None and cur is not None and (got == "major" or (r.bump == "minor" and got == "minor")):
        return (Severity.INFO, f"{change.message} ({who}; accepted: {got} bump {prev.version} -> {cur.version})", "",
                {"accepted": f"{got} bump of {change.profile}: {prev.version} -> {cur.version}"})
    if prev is None:
        return Severity.ERROR, f"{change.message}; {who}", change.hint, {}
    version = prev.version
    wanted = Version(version.major + 1, 0) if r.bump == "major" else Version(version.major, version.minor + 1)
    if got == "none":
        why = (f"profile {change.profile} changed but its version did not (still {prev.version}); "
               f"this needs a {r.bump} bump")
    elif got == "minor":
        why = (f"this needs a new major version of {change.profile}; "
               f"{prev.version} -> {cur.version} is only a minor bump")
    else:
        why = f"the version of {change.profile} went down ({prev.version} -> {cur.version})"
    hint = (f"bump {change.profile} to {wanted} and add a history entry for {wanted}"
            + (", or revert the change" if r.bump == "major" else ""))
    return Severity.ERROR, f"{change.message}; {who}: {why}", change.hint or hint, {}


def compare(baseline: Registry | None, current: Registry, *, path: str | None = None,
            baseline_path: str | None = None, ref: str = "baseline") -> list[Diagnostic]:
    """Every registry-level finding between `baseline` (None: the registry is new) and `current`."""
    _load_rules()
    path = path or current.path
    ctx = Context(baseline, current, baseline_path or path, ref)
    selected = [r for r in iter_rules() if r.handler is not None]
    items = pairs(baseline, current)
    diags: list[Diagnostic] = []
    governed: set[str] = set()  # profiles a specific bump rule already reported

    for r in sorted(selected, key=lambda r: r.fallback):
        for pair in items:
            if pair.kind not in r.kinds:
                continue
            for change in r.handler(pair, ctx):
                if r.fallback and change.profile in governed:
                    continue
                severity, message, hint, extra = _judge(r, change, ctx)
                if r.severity is None and r.bump != "none" and change.profile:
                    governed.add(change.profile)
                details = {"breaks": r.breaks, "bump": r.bump, "requirement": r.requirement}
                if change.profile:
                    details["profile"] = change.profile
                if change.baseline is not None and change.baseline.line:
                    details["baseline"] = f"{ctx.baseline_path}:{change.baseline} at {ref}"
                if pair.renamed:
                    other = pair.renamed
                    details["note"] = (f"looks like a rename to {other!r} (otherwise identical)" if pair.removed
                                       else f"looks like a rename of {other!r} (otherwise identical)")
                details.update(extra)
                details.update(dict(change.details))
                diags.append(Diagnostic(path, change.loc.line, change.loc.column, r.id, severity,
                                        message, hint, details))
    return sorted_diagnostics(diags)


from oespec.breaking.run import BreakingError, check_against  # noqa: E402  (re-exported API)

__all__ = ["BreakingError", "CATALOGUE", "Change", "Context", "Pair", "Rule", "check_against", "compare",
           "iter_rules", "rule", "version_bump"]
