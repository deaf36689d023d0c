"""oespec rules: every id any oespec command can emit, from the one catalogue of every family."""

from __future__ import annotations

import argparse
import json
import sys
from functools import lru_cache

from openengine.contractkit.rules import FAMILIES, RuleCatalogue, RuleSpec, find_spec, merged

HELP = "list every rule, case and fault id the toolkit can emit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", action="append", choices=FAMILIES, metavar="FAMILY",
                        help=f"only this family (repeatable): {', '.join(FAMILIES)}")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")


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
        from oespec.upstream import register_rules

        out["breaking"] = register_rules(breaking_catalogue())   # the upstream gate's ids
    try:
        from openengine.conformance.cases import CASES, all_cases
        from openengine.engine.faults import FAULTS
        from openengine.validate import RULES as VALIDATOR_RULES
    except (ImportError, AttributeError):
        return out
    all_cases()   # imports every case module, which registers its cases
    out.update(validator=VALIDATOR_RULES, conformance=CASES, fault=FAULTS)
    return {family: out[family] for family in FAMILIES if family in out}


# Families listed in the order they were registered: cases in the order they run, faults as
# `--list-faults` prints them. The others are listed in id order.
_REGISTRATION_ORDER = ("conformance", "fault")


def family_specs() -> dict[str, list[RuleSpec]]:
    """Family -> its specs. The site's rule pages and the emitted-id test read the catalogue
    through this one function."""
    return {family: cat.specs(by_id=family not in _REGISTRATION_ORDER)
            for family, cat in family_catalogues().items()}


def all_specs() -> dict[str, RuleSpec]:
    """Every spec by id; an id claimed by two families is an error."""
    return merged(family_specs().values())


def describe(rule_id: str) -> RuleSpec | None:
    """The catalogue entry of an emitted id (`buf:FIELD_NO_DELETE` finds `buf:*`), read once per
    process: what the SARIF printer lists as the rules a run used."""
    return find_spec(_specs_once(), rule_id)


_specs_once = lru_cache(maxsize=1)(all_specs)


def _text(specs: list[RuleSpec]) -> str:
    lines = []
    for s in specs:
        cites = f" [{', '.join(s.requirements)}]" if s.requirements else ""
        lines.append(f"{s.id}  {s.family:<11} {s.policy:<10} {s.category:<14} {s.name}: {s.purpose}{cites}")
    return "\n".join(lines) + ("\n" if lines else "")


def _json(specs: list[RuleSpec]) -> str:
    return json.dumps([s.as_dict() for s in specs], indent=2) + "\n"


def _markdown(specs: list[RuleSpec]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out = []
    for family in FAMILIES:
        rows = [s for s in specs if s.family == family]
        if not rows:
            continue
        out += [f"## {family}", "", "| id | name | severity or bump | category | purpose | requirements |",
                "| --- | --- | --- | --- | --- | --- |"]
        out += [f"| `{s.id}` | {cell(s.name)} | {s.policy} | {cell(s.category)} | {cell(s.purpose)} | "
                f"{', '.join(s.requirements)} |" for s in rows]
        out.append("")
    return "\n".join(out)


FORMATS = {"text": _text, "json": _json, "markdown": _markdown}


def run(args: argparse.Namespace) -> int:
    families = family_specs()
    wanted = args.family or list(families)
    specs = [s for family in FAMILIES if family in wanted for s in families.get(family, [])]
    all_specs()   # refuse an id claimed twice before printing anything
    sys.stdout.write(FORMATS[args.format](specs))
    return 0
