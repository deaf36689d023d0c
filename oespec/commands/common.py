"""Flags and output handling shared by the commands that print diagnostics."""

from __future__ import annotations

import argparse
import sys

from openengine.contractkit.diagnostics import PRINTERS, Context, Diagnostic, exit_code, render, sorted_diagnostics
from openengine.contractkit.rules import Severity
from oespec.registry import SourceError

EXIT_UNUSABLE = 2


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=list(PRINTERS), default="text",
                        help="how to print findings: " + ", ".join(PRINTERS) + " (default: text)")
    parser.add_argument("--fail-on", choices=["info", "warning", "error"], default="error",
                        help="lowest severity that makes the exit status 1 (default: error)")


def output_context(*, with_version: bool = True, **given) -> Context:
    """The context every command prints with: the tool, its version and home page (`[project.urls]
    Homepage` of pyproject.toml), and the one catalogue the SARIF printer describes rules from (read
    only when a printer asks)."""
    from importlib.metadata import PackageNotFoundError, metadata

    from oespec.catalogues import describe

    version = homepage = ""
    if with_version:
        try:
            meta = metadata("openengine-profiles")
        except PackageNotFoundError:
            meta = None
        if meta is not None:
            version = meta["Version"]
            homepage = next((url.split(",", 1)[1].strip() for url in meta.get_all("Project-URL") or []
                             if url.lower().startswith("homepage,")), "")
    return Context(tool="oespec", version=version, information_uri=homepage, describe=describe, **given)


# Printers that name the tool's version; reading it (importlib.metadata) costs more than a whole
# text report, so the others go without.
VERSIONED_FORMATS = frozenset({"sarif"})


def write(fmt: str, diags: list[Diagnostic], out=None, **context) -> None:
    (out or sys.stdout).write(render(fmt, diags, output_context(with_version=fmt in VERSIONED_FORMATS, **context)))


def emit(args: argparse.Namespace, diags: list[Diagnostic], out=None) -> int:
    diags = sorted_diagnostics(diags)
    write(args.format, diags, out)
    return exit_code(diags, Severity.parse(args.fail_on))


def emit_unusable(args: argparse.Namespace, err: SourceError) -> int:
    """Unusable input still gets a located record, in the chosen format, and exit status 2."""
    record = Diagnostic.at(err.path, err.loc, "OE000", Severity.ERROR, err.message, err.hint)
    write(getattr(args, "format", "text"), [record])
    return EXIT_UNUSABLE
