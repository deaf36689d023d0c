"""oespec rules: every id any oespec command can emit, from the one catalogue of every family."""

from __future__ import annotations

import argparse
import json
import sys

from contractkit.rules import FAMILIES, RuleSpec, merged

HELP = "list every rule, case and fault id the toolkit can emit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", action="append", choices=FAMILIES, metavar="FAMILY",
                        help=f"only this family (repeatable): {', '.join(FAMILIES)}")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")


def family_specs() -> dict[str, list[RuleSpec]]:
    """Family -> its specs, each family read from where its rules are registered. The site's rule
    pages and the emitted-id test read the catalogue through this one function."""
    from codegen.check import catalogue as check_catalogue
    from codegen.generate import GENERATE_RULES
    from codegen.generate.markers import MARKER_RULES
    from codegen.spec import SPEC_RULES

    out = {
        "check": check_catalogue().specs(),
        "generate": list(GENERATE_RULES),
        "spec": list(SPEC_RULES),
        "docs": list(MARKER_RULES),
    }
    try:   # generation, and so the site, works without the breaking stage installed
        from codegen.breaking import catalogue as breaking_catalogue
    except ImportError:
        pass
    else:
        out["breaking"] = breaking_catalogue().specs()
    # The runtime families need the Python bindings; without them (before the first generate)
    # the toolkit's own families are still listed.
    try:
        from openengine.conformance.cases import all_cases
        from openengine.engine.faults import FAULTS
        from openengine.validate import RULES as VALIDATOR_RULES
    except (ImportError, AttributeError):
        return out
    out["validator"] = [r.spec for r in VALIDATOR_RULES.values()]
    out["conformance"] = [c.spec for c in all_cases()]
    out["fault"] = [f.spec for f in FAULTS.values()]
    return {family: out[family] for family in FAMILIES if family in out}


def all_specs() -> dict[str, RuleSpec]:
    """Every spec by id; an id claimed by two families is an error."""
    return merged(family_specs().values())


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
