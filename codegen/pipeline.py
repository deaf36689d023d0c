"""Generation with everything it documents.

`codegen.check`, `codegen.generate` and `codegen.breaking` never import one another, and the
toolkit never imports the runtime: the docs generator prints the check, breaking and validator
rule catalogues and the conformance cases, so this module gathers them and hands them to the
generate stage. Like `codegen/cli.py` and `codegen/commands/`, it belongs to the command-line
layer, the only code that imports both the toolkit and the runtime. Everything that generates
(the CLI, the site's live-reload hook, tests) calls `plan` here.
"""

from __future__ import annotations

from pathlib import Path

from codegen import generate
from codegen.generate import Output, RuleCatalogues
from codegen.registry import Registry
from contractkit.buildcache import BuildCache


def rule_catalogues() -> RuleCatalogues:
    """Every id `oespec check` can emit (its catalogue: the rules and the stage ids such as OE000
    and OE100), every breaking rule when that stage is installed, and the runtime's validator
    rules and conformance cases when the bindings are built."""
    from codegen.check import catalogue as check_catalogue

    try:
        from codegen.breaking import iter_rules as breaking_rules
    except ImportError:
        breaking = None
    else:
        breaking = tuple(breaking_rules())
    try:  # the runtime needs the Python bindings, which generation itself may be about to write
        from openengine.conformance import all_cases
        from openengine.validate import PYTHON_ONLY_RULES, RULES
    except (ImportError, AttributeError):   # missing, or stale: the validators read the descriptors on import
        validator, python_only, cases = None, frozenset(), None
    else:
        validator, python_only, cases = tuple(RULES.values()), frozenset(PYTHON_ONLY_RULES), tuple(all_cases())
    return RuleCatalogues(tuple(check_catalogue().specs()), breaking, validator, python_only, cases)


def plan(registry: Registry, root: Path, *, only: list[str] | None = None,
         protoc_cache: BuildCache | None = None) -> list[Output]:
    """Every generated output for `registry` under `root` (see `codegen.generate.plan`)."""
    return generate.plan(registry, root, only=only, rules=rule_catalogues(), protoc_cache=protoc_cache)
