"""`oespec`: the one command-line entry point. Each subcommand is a module in `oespec.commands`
with `HELP`, `add_arguments(parser)` and `run(args) -> int`; `main` returns the exit code.

The runtime install (`pip install openengine-profiles`) runs `engine`, `conformance`, `validate`,
`spec` and `rules`; `check`, `generate` and `breaking` need the libraries of the toolkit extra. A
command that reaches for one that is not installed says, in one line, how to install it (exit
status 2)."""

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
    "rules": "oespec.commands.list_rules",
    "upstream": "oespec.commands.upstream",
}

TOOLKIT_INSTALL = "pip install 'openengine-profiles[toolkit]'"
EXIT_UNUSABLE = 2
PROJECT_PACKAGES = ("oespec", "openengine")
BINDINGS = ("openengine.v1",)


def missing_module_message(command: str, err: ModuleNotFoundError) -> str | None:
    """The one line that says what to install for a module that is not there, or None when the
    module should have been there (a fault of the project itself, left to surface as such)."""
    name = err.name or ""
    if name.startswith(BINDINGS):
        return (f"oespec {command}: the contract's Python bindings ({name}) are missing; "
                "in a checkout, run `make bindings`")
    if name.split(".")[0] in PROJECT_PACKAGES:
        return None
    return (f"oespec {command}: needs the module {name.split('.')[0]}, which is not installed; "
            f"the toolkit extra brings it: {TOOLKIT_INSTALL}")


def _unavailable(message: str):
    def run(_args: argparse.Namespace) -> int:
        print(message, file=sys.stderr)
        return EXIT_UNUSABLE
    return run


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
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            message = missing_module_message(name, err)
            if message is None:
                raise
            # Listed all the same, and any arguments taken, so the run says what to install.
            cmd = sub.add_parser(name, help=message, description=message)
            cmd.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            cmd.set_defaults(_run=_unavailable(message))
            continue
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # Only the subcommand named first is built in full (None: help, or a typo).
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
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
    except ModuleNotFoundError as err:
        message = missing_module_message(args.command, err)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXIT_UNUSABLE


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
