"""Generation with everything it documents.

`codegen.check`, `codegen.generate` and `codegen.breaking` never import one another: the docs
generator prints the check and breaking rule catalogues, so this module, above all three, gathers
the catalogues and hands them to the generate stage. Everything that generates (the CLI, the
site's live-reload hook, tests) calls `plan` here.
"""

from __future__ import annotations

from pathlib import Path

from codegen import generate
from codegen.generate import Output, RuleCatalogues
from codegen.registry import Registry


def rule_catalogues() -> RuleCatalogues:
    """Every id `oespec check` can emit (its catalogue: the rules and the stage ids such as OE000
    and OE100) and, when the breaking stage is installed, every breaking rule."""
    from codegen.check import catalogue as check_catalogue

    try:
        from codegen.breaking import iter_rules as breaking_rules
    except ImportError:
        breaking = None
    else:
        breaking = tuple(breaking_rules())
    return RuleCatalogues(tuple(check_catalogue().specs()), breaking)


def plan(registry: Registry, root: Path, *, only: list[str] | None = None) -> list[Output]:
    """Every generated output for `registry` under `root` (see `codegen.generate.plan`)."""
    return generate.plan(registry, root, only=only, rules=rule_catalogues())
