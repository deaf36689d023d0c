"""Flags and output handling shared by the commands that print diagnostics."""

from __future__ import annotations

import argparse
import sys

from openengine.contractkit.diagnostics import PRINTERS, Context, Diagnostic, Severity, exit_code, render, sorted_diagnostics
from oespec.registry import SourceError

EXIT_UNUSABLE = 2


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=list(PRINTERS), default="text",
                        help="how to print findings: " + ", ".join(PRINTERS) + " (default: text)")
    parser.add_argument("--fail-on", choices=["info", "warning", "error"], default="error",
                        help="lowest severity that makes the exit status 1 (default: error)")


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openengine-profiles")
    except PackageNotFoundError:
        return ""


def tool_homepage() -> str:
    """The project's home page as pyproject.toml declares it (`[project.urls] Homepage`)."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("openengine-profiles").get_all("Project-URL") or []
    except PackageNotFoundError:
        return ""
    return next((url.split(",", 1)[1].strip() for url in urls if url.lower().startswith("homepage,")), "")


def output_context(*, with_version: bool = True, **given) -> Context:
    """The context every command prints with: the tool, its version and home page, and the one
    catalogue the SARIF printer describes rules from (read only when a printer asks)."""
    from oespec.catalogues import describe

    return Context(tool="oespec", version=tool_version() if with_version else "",
                   information_uri=tool_homepage() if with_version else "", describe=describe, **given)


# Printers that name the tool's version; reading it (importlib.metadata) costs more than a whole
# text report, so the others go without.
VERSIONED_FORMATS = frozenset({"sarif"})


def write(fmt: str, diags: list[Diagnostic], out=None, **context) -> None:
    (out or sys.stdout).write(render(fmt, diags, output_context(with_version=fmt in VERSIONED_FORMATS, **context)))


def emit(args: argparse.Namespace, diags: list[Diagnostic], out=None) -> int:
    diags = sorted_diagnostics(diags)
    write(args.format, diags, out)
    return exit_code(diags, Severity.parse(args.fail_on))


def source_error_diagnostic(err: SourceError, rule_id: str = "OE000") -> Diagnostic:
    return Diagnostic.at(err.path, err.loc, rule_id, Severity.ERROR, err.message, err.hint)


def emit_unusable(args: argparse.Namespace, err: SourceError) -> int:
    """Unusable input still gets a located record, in the chosen format, and exit status 2."""
    write(getattr(args, "format", "text"), [source_error_diagnostic(err)])
    return EXIT_UNUSABLE
