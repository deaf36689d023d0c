"""oespec breaking: what a change to profiles.yaml and proto/ breaks, for whom, and the bump it needs."""

from __future__ import annotations

import argparse
import sys

from oespec.commands.common import EXIT_UNUSABLE, add_output_arguments, emit, write
from oespec.registry import DEFAULT_REGISTRY

HELP = "compare profiles.yaml and proto/ with a git ref and report breaking changes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--against", metavar="REF",
                        help="the git ref to compare with (branch, tag or commit, e.g. origin/main)")
    parser.add_argument("--registry", default=DEFAULT_REGISTRY,
                        help="registry file in the working tree (default: profiles.yaml)")
    parser.add_argument("--proto", default="proto", help="proto root in the working tree (default: proto)")
    add_output_arguments(parser)
    parser.add_argument("--list-rules", action="store_true", help="print every rule and exit")


def run(args: argparse.Namespace) -> int:
    from oespec.breaking import BreakingError, catalogue, check_against

    if args.list_rules:   # the breaking family of `oespec rules`, with whom each rule breaks
        for s in catalogue().specs():
            who = s.fact("breaks")
            breaks = f"breaks {who:<8}" if who else " " * 15
            sys.stdout.write(f"{s.id:<8} {s.category:<12} {breaks} {s.policy:<11} {s.name}: {s.purpose}\n")
        return 0
    if not args.against:
        sys.stderr.write("oespec breaking: --against REF is required (e.g. --against origin/main)\n")
        return EXIT_UNUSABLE
    try:
        diags = check_against(args.against, registry=args.registry, proto=args.proto)
    except BreakingError as err:
        write(args.format, err.as_diagnostics())
        return EXIT_UNUSABLE
    return emit(args, diags)
