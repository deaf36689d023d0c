"""oespec spec: check the numbered requirements of the spec, list them, check citations."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from oespec.commands.common import EXIT_UNUSABLE, add_output_arguments, emit
from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from oespec.registry import DEFAULT_REGISTRY, SourceError, load_registry
from oespec.spec import (
    CASES_DIR, UNKNOWN_REFERENCE, WIRE_WITHOUT_CASE, referenced_ids, scan_requirements, unclaimed_areas,
)

HELP = "check the spec's numbered requirements (ids, tags, duplicates) and citations of them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*",
                        help="files or folders whose citations of requirement ids must exist "
                             "(the spec's own citations are always checked)")
    parser.add_argument("--spec-dir", default="spec", help="the spec folder (default: spec)")
    parser.add_argument("--list", action="store_true",
                        help="print the requirements (id, tag, location, text) instead of findings")
    parser.add_argument("--registry",
                        help="the registry whose profiles claim the requirement areas (default: profiles.yaml "
                             "beside the spec folder; without one the areas are not checked, and the command "
                             "says so)")
    parser.add_argument("--no-cases", action="store_true",
                        help="do not match wire requirements with the conformance runner's cases (SPEC006)")
    add_output_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        requirements, diags = scan_requirements(args.spec_dir)
    except FileNotFoundError as err:
        sys.stderr.write(f"oespec spec: {err}\n")
        return EXIT_UNUSABLE
    if args.list:
        return _list(requirements, args.format)
    known = {i for r in requirements for i in r.ids}
    sources = sorted(Path(args.spec_dir).rglob("*.md")) + _files(args.paths)
    for path in sources:
        diags.extend(_unknown_citations(path, known))
    if not args.no_cases:
        diags.extend(_wire_without_case(requirements, Path(args.spec_dir)))
    registry = Path(args.registry) if args.registry else Path(args.spec_dir).parent / DEFAULT_REGISTRY
    diags.extend(_unclaimed_areas(requirements, registry))
    return emit(args, diags)


def _unclaimed_areas(requirements, registry: Path) -> list[Diagnostic]:
    """The areas no profile of the registry claims (SPEC008); none when the registry cannot be
    read, which `oespec check` reports on its own."""
    if not registry.is_file():
        sys.stderr.write(f"oespec spec: no {registry.as_posix()}: the requirement areas were not matched with "
                         "profiles; give --registry FILE\n")
        return []
    try:
        resolved = load_registry(registry)
    except SourceError:
        return []
    if resolved.registry is None:
        return []
    return unclaimed_areas(requirements, (a for p in resolved.registry.profiles for a in p.requirement_areas))


def _wire_without_case(requirements, spec_dir: Path) -> list[Diagnostic]:
    """A wire requirement no conformance case cites, at its line: the runner's own coverage
    (`openengine.conformance.coverage`) of the requirements found in `spec_dir`."""
    try:
        from openengine.conformance import all_cases, coverage
        from openengine.conformance.matrix import SpecRequirement
    except ImportError:   # the bindings are not built: `make bindings` (make check builds them)
        sys.stderr.write("oespec spec: the conformance cases cannot be loaded (run `make bindings`); "
                         "wire requirements were not matched with cases\n")
        return []
    given = [SpecRequirement(r.id, r.tag, r.text, Path(r.file).name, r.line,
                             tuple((a.id, a.text) for a in r.assertions)) for r in requirements]
    uncovered = set(coverage(all_cases(), given, source=spec_dir.as_posix()).uncovered)
    return [Diagnostic(r.file, r.line, 1, WIRE_WITHOUT_CASE, Severity.ERROR,
                       f"{r.id} is a wire requirement but no conformance case cites it",
                       f"write a case in {CASES_DIR} that cites it (`@case(..., requires=(\"{r.id}\",))`; "
                       "the module of its area, or optional.py for a profile's own cases), or tag it "
                       "`registry` or `client` when the wire cannot show it")
            for r in requirements if r.id in uncovered]


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
