"""oespec breaking: what a change to profiles.yaml and proto/ breaks, for whom, and the bump it needs."""

from __future__ import annotations

import argparse
import sys

from codegen.commands.common import EXIT_UNUSABLE, add_output_arguments, emit
from codegen.diagnostics import PRINTERS
from codegen.registry import DEFAULT_REGISTRY

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
    from codegen.breaking import BreakingError, check_against, iter_rules

    if args.list_rules:
        for r in iter_rules():
            sys.stdout.write(f"{r.id:<8} {r.category:<12} breaks {r.breaks:<8} bump {r.bump:<6} "
                             f"{r.name}: {r.purpose}\n")
        return 0
    if not args.against:
        sys.stderr.write("oespec breaking: --against REF is required (e.g. --against origin/main)\n")
        return EXIT_UNUSABLE
    try:
        diags = check_against(args.against, registry=args.registry, proto=args.proto)
    except BreakingError as err:
        sys.stdout.write(PRINTERS[args.format](err.as_diagnostics()))
        return EXIT_UNUSABLE
    return emit(args, diags)
