"""Breaking-change stage: compare the registry and the protos with a baseline git ref.

The registry rules (`oespec.breaking.registry_rules.RULES`, judged by `oespec.breaking.judge`) say what a
change to the registry breaks and which version bump makes it legal; buf's wire findings on the
proposal's own elements (`oespec.breaking.buf_breaking`) become the same `Diagnostic` records; what
upstream OpenEngine v1 defines is judged by the upstream gate (`oespec.upstream`), whose ids are
part of this family. `oespec.breaking.run.check_against` does the whole comparison against a ref.
"""

from __future__ import annotations

from typing import Iterator

from openengine.contractkit.rules import RuleCatalogue
from oespec import upstream
from oespec.breaking.judge import compare
from oespec.breaking.rule import BREAKS, BUMPS, Change, Context, Rule, version_bump
from oespec.breaking.registry_rules import RULES
from oespec.breaking.run import UNUSABLE_SPEC, BreakingError, check_against
from oespec.breaking.buf_breaking import WIRE_RULE


def iter_rules() -> Iterator[Rule]:
    """Every registry rule in id order, then the buf pseudo-rule for wire findings."""
    yield from sorted(RULES, key=lambda r: r.id)
    yield WIRE_RULE


def catalogue() -> RuleCatalogue[Rule]:
    """Every id `oespec breaking` can emit: the registry rules, buf's wire findings, unusable input,
    and the upstream gate's."""
    cat: RuleCatalogue[Rule] = RuleCatalogue("breaking")
    for r in iter_rules():
        cat.register(r.spec, r)
    cat.register(UNUSABLE_SPEC)
    for spec in upstream.RULES:
        cat.register(spec)
    return cat


__all__ = ["BREAKS", "BUMPS", "BreakingError", "Change", "Context", "RULES", "Rule", "catalogue", "check_against",
           "compare", "iter_rules", "version_bump"]
