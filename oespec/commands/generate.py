"""oespec generate: write every file derived from profiles.yaml (all or none), or --check them."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from oespec.buildcache import for_checkout
from oespec.check import run_rules
from oespec.commands.common import add_output_arguments, emit, emit_unusable
from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.rules import Severity
from oespec.generate import GENERATORS, GenerationError, orphan_files, stale_outputs, write_outputs
from oespec.generate_with_catalogues import plan
from oespec.registry import DEFAULT_REGISTRY, SourceError, load_registry

HELP = "generate protos, bindings, schemas and docs from the registry"

# Set for the second run after the bindings changed, so that it does not start a third.
_AGAIN = "OESPEC_GENERATE_AGAIN"
# Build outputs that generation owns entirely (never committed).
OWNED_DIRS = ("openengine/v1",)
# Committed folders where generated files (those with the header) sit beside hand-written ones.
MARKED_DIRS = ("proto", "schemas", "site/generated")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("registry", nargs="?", default=DEFAULT_REGISTRY,
                        help="registry file (default: profiles.yaml)")
    parser.add_argument("--root", default=".", help="repository root to generate into (default: .)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any committed generated file is stale")
    parser.add_argument("--only", action="append", choices=list(GENERATORS) or None,
                        help="run only this generator (repeatable)")
    add_output_arguments(parser)


def generation_diagnostics(err: GenerationError, registry: str) -> list[Diagnostic]:
    """One finding per located cause (every one, not only the first), under the rule it breaks
    (OE900 unless the cause names a more precise one, such as a DOC marker rule), else one OE900
    for the run."""
    hint = "nothing was written; fix the cause and run again"
    if err.problems:
        return [Diagnostic(p.path, p.loc.line, p.loc.column, p.rule_id or "OE900", Severity.ERROR,
                           f"generator {err.generator}: {p.message}", f"{p.hint}; {hint}" if p.hint else hint)
                for p in err.problems]
    return [Diagnostic(registry, 0, 0, "OE900", Severity.ERROR, f"generator {err.generator} failed: {err.message}",
                       hint)]


def run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    cache = for_checkout(root, args.registry) if Path(args.registry).is_file() else None
    # A plan is kept only for a registry without errors: a hit needs neither the rules nor planning.
    plan_name = "plan-" + "-".join(sorted(args.only or ["all"]))
    outputs = cache.load(plan_name) if cache is not None else None
    if outputs is None:
        try:
            resolved = load_registry(args.registry)
        except SourceError as err:
            return emit_unusable(args, err)
        diags = run_rules(resolved)
        if resolved.registry is None or any(d.severity >= Severity.ERROR for d in diags):
            sys.stderr.write("oespec generate: the registry has errors; nothing was written\n")
            return emit(args, diags) or 1
        try:
            outputs = plan(resolved.registry, root, only=args.only)
        except GenerationError as err:
            return emit(args, generation_diagnostics(err, args.registry))
        if cache is not None:
            cache.keep(plan_name, outputs)
    # The bindings own their folder: generating them alone (`make bindings`, the first step of
    # `make generate`) also removes the modules of a service that is gone, so the runtime the
    # next step imports to list its cases no longer sees the removed profile.
    owns_bindings = not args.only or "bindings" in args.only
    orphans = orphan_files(root, outputs, owned_dirs=OWNED_DIRS if owns_bindings else (),
                           marked_dirs=() if args.only else MARKED_DIRS)
    if args.check:
        stale = stale_outputs(root, outputs) + [p for p in orphans if not p.startswith(OWNED_DIRS)]
        diags = [Diagnostic(path, 0, 0, "OE901", Severity.ERROR,
                            "generated file is stale, missing, or no longer generated",
                            "run `make generate` (oespec generate) and commit the result")
                 for path in stale]
        return emit(args, diags)
    changed = write_outputs(root, outputs, orphans=orphans)
    for path in changed:
        sys.stderr.write(f"wrote {path}\n")
    for path in orphans:
        sys.stderr.write(f"removed {path} (no longer generated)\n")
    sys.stderr.write(f"oespec generate: {len(outputs)} outputs, {len(changed)} written, "
                     f"{len(orphans)} removed\n")
    if not args.only and any(path.startswith(OWNED_DIRS) for path in changed + orphans) \
            and not os.environ.get(_AGAIN):
        # The reference pages list the runtime's conformance cases and validator rules, read from
        # the bindings before this run rewrote them (a new profile's service did not exist yet).
        # One more run in a fresh interpreter reads the new bindings; it writes only those pages.
        sys.stderr.write("oespec generate: the bindings changed; generating once more with them\n")
        again = [sys.executable, "-m", "oespec.cli", "generate", args.registry, "--root", args.root]
        return subprocess.call(again, env={**os.environ, _AGAIN: "1"})
    return 0
