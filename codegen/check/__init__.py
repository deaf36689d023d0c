"""Check stage: the semantic rules of the registry.

Each rule is data plus a function: a stable id, a name, a severity, a one-line purpose, and a
handler that receives the resolved registry (and its source, for rules about the YAML itself) and
yields findings. Rules live in `codegen.check.rules`; `RULES` lists them in id order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from codegen.diagnostics import Diagnostic, Loc, Severity, sorted_diagnostics
from codegen.registry import Registry, Resolved, SourceFile


@dataclass(frozen=True)
class Finding:
    """What a rule handler yields; the runner adds the file, the rule id and the severity."""

    loc: Loc
    message: str
    hint: str = ""


@dataclass(frozen=True)
class CheckContext:
    registry: Registry | None
    source: SourceFile


Handler = Callable[[CheckContext], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: Severity
    category: str
    purpose: str
    handler: Handler
    # Rules about the YAML text itself run even when the schema stage failed.
    needs_model: bool = True


RULES: list[Rule] = []


def rule(id: str, name: str, *, severity: Severity = Severity.ERROR, category: str, purpose: str,
         needs_model: bool = True):
    """Register a rule handler under a stable id."""

    def register(handler: Handler) -> Handler:
        if any(r.id == id for r in RULES):
            raise RuntimeError(f"rule id {id} registered twice")
        RULES.append(Rule(id, name, severity, category, purpose, handler, needs_model))
        RULES.sort(key=lambda r: r.id)
        return handler

    return register


def run_rules(resolved: Resolved, *, rules: Iterable[Rule] | None = None) -> list[Diagnostic]:
    """Every finding of the schema stage and of every rule, sorted by position."""
    from codegen.check import rules as _rules  # noqa: F401  (registers the rules)

    diags = list(resolved.diagnostics)
    ctx = CheckContext(resolved.registry, resolved.source)
    for r in rules if rules is not None else RULES:
        if r.needs_model and resolved.registry is None:
            continue
        for finding in r.handler(ctx):
            diags.append(Diagnostic.at(resolved.source.path, finding.loc, r.id, r.severity,
                                       finding.message, finding.hint))
    return sorted_diagnostics(diags)


def iter_rules() -> Iterator[Rule]:
    from codegen.check import rules as _rules  # noqa: F401

    yield from RULES
