"""oespec spec: check the numbered requirements of the spec, list them, check citations."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from oespec.commands.common import EXIT_UNUSABLE, add_output_arguments, emit
from oespec.diagnostics import Diagnostic, Loc, Severity
from oespec.spec import UNKNOWN_REFERENCE, referenced_ids, scan_requirements

HELP = "check the spec's numbered requirements (ids, tags, duplicates) and citations of them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*",
                        help="files or folders whose citations of requirement ids must exist "
                             "(the spec's own citations are always checked)")
    parser.add_argument("--spec-dir", default="spec", help="the spec folder (default: spec)")
    parser.add_argument("--list", action="store_true",
                        help="print the requirements (id, tag, location, text) instead of findings")
    add_output_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        requirements, diags = scan_requirements(args.spec_dir)
    except FileNotFoundError as err:
        sys.stderr.write(f"oespec spec: {err}\n")
        return EXIT_UNUSABLE
    if args.list:
        return _list(requirements, args.format)
    known = {r.id for r in requirements}
    sources = sorted(Path(args.spec_dir).rglob("*.md")) + _files(args.paths)
    for path in sources:
        diags.extend(_unknown_citations(path, known))
    return emit(args, diags)


def _list(requirements, fmt: str) -> int:
    if fmt == "json":
        rows = [{"id": r.id, "tag": r.tag, "area": r.area, "file": r.file, "line": r.line,
                 "text": r.text} for r in requirements]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        for r in requirements:
            sys.stdout.write(f"{r.id}\t{r.tag}\t{r.location}\t{r.text}\n")
    return 0


def _files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            out.extend(p for p in sorted(path.rglob("*")) if p.is_file() and "__pycache__" not in p.parts)
        elif path.is_file():
            out.append(path)
    return out


def _unknown_citations(path: Path, known: set[str]) -> list[Diagnostic]:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return []
    diags = []
    for number, line in enumerate(text.splitlines(), start=1):
        for rid in referenced_ids(line):
            if rid not in known:
                diags.append(Diagnostic.at(
                    path.as_posix(), Loc(number, line.index(rid) + 1), UNKNOWN_REFERENCE,
                    Severity.ERROR, f"{rid} is cited but no requirement defines it",
                    "cite an existing id (oespec spec --list) or define the requirement in spec/"))
    return diags
