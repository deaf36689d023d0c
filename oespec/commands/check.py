"""oespec check: validate profiles.yaml against the schema and the semantic rules."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oespec.check import catalogue, run_rules
from oespec.commands.common import EXIT_UNUSABLE, add_output_arguments, emit, emit_unusable
from oespec.buildcache import for_checkout
from oespec.upstream import IMAGE as UPSTREAM_IMAGE
from oespec.registry import DEFAULT_REGISTRY, SourceError, load_registry

HELP = "check the profile registry (schema and semantic rules)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("registry", nargs="?", default=DEFAULT_REGISTRY,
                        help="registry file (default: profiles.yaml)")
    add_output_arguments(parser)
    parser.add_argument("--list-rules", action="store_true", help="print every rule and exit")
    parser.add_argument("--proto-root",
                        help="cross-check the registry against the protos compiled from this folder "
                             "(default: proto/ beside the registry; without it the proto checks do "
                             "not run, and the command says so)")
    parser.add_argument("--no-contract", action="store_true",
                        help="check the registry alone, without compiling the protos")
    parser.add_argument("--no-head", action="store_true",
                        help="do not compare with the last commit (the revision-bump warning, OE053)")


def run(args: argparse.Namespace) -> int:
    if args.list_rules:   # the check family of `oespec rules`, stage ids included
        for s in catalogue().specs():
            cites = f" [{', '.join(s.requirements)}]" if s.requirements else ""
            sys.stdout.write(f"{s.id}  {s.policy:<7}  {s.category:<12} {s.name}: {s.purpose}{cites}\n")
        return 0
    proto_root = Path(args.proto_root) if args.proto_root else Path(args.registry).parent / "proto"
    if args.proto_root and not proto_root.is_dir():
        sys.stderr.write(f"oespec check: --proto-root {args.proto_root}: no such folder\n")
        return EXIT_UNUSABLE
    # Only a checkout's layout (its proto/ folder beside the registry) gets a cache in build/: it
    # keeps the resolved registry and the compiled protos.
    beside = proto_root.is_dir() and proto_root.resolve() == Path(args.registry).resolve().parent / "proto"
    cache = for_checkout(proto_root.resolve().parent, args.registry) if beside and Path(args.registry).is_file() else None
    resolved = cache.load("resolved-registry") if cache is not None else None
    if resolved is None:
        try:
            resolved = load_registry(args.registry)
        except SourceError as err:
            return emit_unusable(args, err)
        if cache is not None:
            cache.keep("resolved-registry", resolved)
    contract, compile_errors = None, []
    if not args.no_contract and resolved.registry is not None and proto_root.is_dir():
        from oespec.check.proto_crosscheck import load_contract

        loaded = load_contract(proto_root, proto_root.as_posix().rstrip("/"), cache=cache,
                               upstream_image=proto_root.parent / UPSTREAM_IMAGE)  # the pin beside proto/
        contract, compile_errors = (None, loaded) if isinstance(loaded, list) else (loaded, [])
    elif not args.no_contract and resolved.registry is not None:
        # Never a silent skip: a clean verdict must not read as if the protos were checked too.
        sys.stderr.write(f"oespec check: no {proto_root.as_posix()}/ beside {args.registry}: the checks against "
                         "the compiled protos (OE100-OE1xx) did not run; give --proto-root DIR, or "
                         "--no-contract to check the registry alone\n")
    last_commit = None
    if not args.no_head and resolved.registry is not None:
        from oespec.check.last_commit import last_commit_state

        # The protos count only when they sit beside the registry (the repository's own layout).
        last_commit = last_commit_state(Path(args.registry), proto_root if beside else None, current=resolved.source)
    return emit(args, run_rules(resolved, contract=contract, last_commit=last_commit) + compile_errors)
