"""Generation with the catalogues its docs print.

The docs print the check, breaking and validator catalogues and the conformance cases, but
`oespec.generate` imports neither the other stages nor the runtime: this module, part of the
composition layer, hands them in from `oespec.catalogues`. Everything that generates (the CLI,
the site's hook, tests) calls `plan` here.
"""

from __future__ import annotations

from pathlib import Path

from oespec import generate
from oespec.catalogues import family_specs
from oespec.generate import Output, RuleCatalogues
from oespec.registry import Registry


def rule_catalogues() -> RuleCatalogues:
    """The catalogue entries (`RuleSpec`) the docs print, from the one catalogue every command
    lists (`oespec rules`): every id `oespec check` can emit, the breaking rules when that stage is
    installed, and the runtime's validator rules and conformance cases when the bindings are
    built."""
    families = {name: tuple(specs) for name, specs in family_specs().items()}
    family = families.get     # None: that stage or the runtime is not installed

    python_only: frozenset[str] = frozenset()
    if "validator" in families:
        from openengine.validate import PYTHON_ONLY_RULES

        python_only = frozenset(PYTHON_ONLY_RULES)
    return RuleCatalogues(families["check"], family("breaking"), family("validator"), python_only,
                          family("conformance"))


def plan(registry: Registry, root: Path, *, only: list[str] | None = None) -> list[Output]:
    """Every generated output for `registry` under `root` (see `oespec.generate.plan`)."""
    return generate.plan(registry, root, only=only, rules=rule_catalogues())
