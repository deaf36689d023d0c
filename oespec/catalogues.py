"""Every rule family's catalogue, read from one place: the ids each `oespec` command can emit (the
toolkit's check, breaking, generate, spec and docs families) and, when the runtime and its bindings
can be imported, the runtime's (validator rules and conformance cases; the faults that break an
engine on purpose are test machinery and live with the tests). `oespec rules`,
the SARIF printer and the generated docs all read them here.

This is part of the composition layer (with `oespec.cli` and `oespec.commands`): the only code
that imports both the toolkit and the runtime.
"""

from __future__ import annotations

from functools import lru_cache

from openengine.contractkit.rules import FAMILIES, RuleCatalogue, RuleSpec, find_spec, merged


def family_catalogues() -> dict[str, RuleCatalogue]:
    """Family -> its catalogue, each read from where its rules register. The runtime families
    need the Python bindings; without them (before the first generate) the toolkit's own
    families are still there."""
    from oespec.check import catalogue as check_catalogue
    from oespec.generate import GENERATE_RULES
    from oespec.generate.markers import MARKER_RULES
    from oespec.spec import SPEC_RULES

    out = {"check": check_catalogue(), "generate": GENERATE_RULES, "spec": SPEC_RULES, "docs": MARKER_RULES}
    try:   # generation, and so the site, works without the breaking stage installed
        from oespec.breaking import catalogue as breaking_catalogue
    except ImportError:
        pass
    else:
        out["breaking"] = breaking_catalogue()
    try:
        import openengine.v1.options_pb2  # noqa: F401  (the bindings: before the first generate, none)
    except ImportError:
        return out
    from openengine.conformance.cases import CASES, all_cases
    from openengine.validate import RULES as VALIDATOR_RULES
    all_cases()   # imports every case module, which registers its cases
    out.update(validator=VALIDATOR_RULES, conformance=CASES)
    return {family: out[family] for family in FAMILIES if family in out}


def family_specs() -> dict[str, list[RuleSpec]]:
    """Family -> its specs, in id order but the conformance cases in the order they run. The site's
    rule pages and the emitted-id test read the catalogue through this one function."""
    return {family: cat.specs(by_id=family != "conformance")
            for family, cat in family_catalogues().items()}


def all_specs() -> dict[str, RuleSpec]:
    """Every spec by id; an id claimed by two families is an error."""
    return merged(family_specs().values())


def describe(rule_id: str) -> RuleSpec | None:
    """The catalogue entry of an emitted id (`buf:FIELD_NO_DELETE` finds `buf:*`), read once per
    process: what the SARIF printer lists as the rules a run used."""
    return find_spec(_specs_once(), rule_id)


_specs_once = lru_cache(maxsize=1)(all_specs)
