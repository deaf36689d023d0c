"""Judge what changed between two registries: every registry rule over the matched pairs, each
finding's severity derived from the bump the governing profile received."""

from __future__ import annotations

from openengine.contractkit.diagnostics import Diagnostic, sorted_diagnostics
from openengine.contractkit.rules import Severity
from oespec.breaking.match import pairs
from oespec.breaking.rule import Change, Context, Rule
from oespec.breaking.registry_rules import RULES
from oespec.registry import Registry, Version


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
    path = path or current.path
    ctx = Context(baseline, current, baseline_path or path, ref)
    items = pairs(baseline, current)
    diags: list[Diagnostic] = []
    governed: set[str] = set()  # profiles a specific bump rule already reported

    for r in sorted(RULES, key=lambda r: (r.fallback, r.id)):
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
