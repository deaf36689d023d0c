"""`oespec`: the one command-line entry point. Each subcommand is a module in `oespec.commands`
with `HELP`, `add_arguments(parser)` and `run(args) -> int`; `main` returns the exit code."""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand name -> module. Imported lazily so `oespec check` never pays for gRPC imports.
COMMANDS: dict[str, str] = {
    "check": "oespec.commands.check",
    "generate": "oespec.commands.generate",
    "engine": "oespec.commands.engine",
    "validate": "oespec.commands.validate",
    "conformance": "oespec.commands.conformance",
    "breaking": "oespec.commands.breaking",
    "spec": "oespec.commands.spec",
    "rules": "oespec.commands.rules",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (with `only`) one holding just that subcommand: a command's module and
    its imports are loaded only when it runs or when the overall help lists every command."""
    parser = argparse.ArgumentParser(
        prog="oespec",
        description="Define, check, generate and prove the OpenEngine protocol's conformance profiles.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            continue
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def _named_command(argv: list[str]) -> str | None:
    """The subcommand `argv` names when it is the first argument, else None (help, a typo)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_named_command(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
