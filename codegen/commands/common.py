"""Flags and output handling shared by the commands that print diagnostics."""

from __future__ import annotations

import argparse
import sys

from codegen.diagnostics import PRINTERS, Diagnostic, Severity, exit_code, sorted_diagnostics
from codegen.registry import SourceError

EXIT_UNUSABLE = 2


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=sorted(PRINTERS), default="text",
                        help="how to print findings (default: text)")
    parser.add_argument("--fail-on", choices=["info", "warning", "error"], default="error",
                        help="lowest severity that makes the exit status 1 (default: error)")


def emit(args: argparse.Namespace, diags: list[Diagnostic], out=None) -> int:
    out = out or sys.stdout
    diags = sorted_diagnostics(diags)
    out.write(PRINTERS[args.format](diags))
    return exit_code(diags, Severity.parse(args.fail_on))


def source_error_diagnostic(err: SourceError, rule_id: str = "OE000") -> Diagnostic:
    return Diagnostic.at(err.path, err.loc, rule_id, Severity.ERROR, err.message, err.hint)


def emit_unusable(args: argparse.Namespace, err: SourceError) -> int:
    """Unusable input still gets a located record, in the chosen format, and exit status 2."""
    sys.stdout.write(PRINTERS[getattr(args, "format", "text")]([source_error_diagnostic(err)]))
    return EXIT_UNUSABLE
