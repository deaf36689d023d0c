"""oespec rules: every id any oespec command can emit, from the one catalogue of every family."""

from __future__ import annotations

import argparse
import json
import sys

from openengine.contractkit.rules import FAMILIES, RuleSpec
from oespec.catalogues import all_specs, family_specs

HELP = "list every rule and case id the toolkit can emit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", action="append", choices=FAMILIES, metavar="FAMILY",
                        help=f"only this family (repeatable): {', '.join(FAMILIES)}")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")


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
