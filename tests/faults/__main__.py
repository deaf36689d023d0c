"""`python -m tests.faults --list`: every fault, what it does wrong, what that breaks, and the part
of the engine it changes. `python -m tests.faults --serve NAME [--serve NAME ...] [oespec engine
flags]`: a reference engine committing those faults, as a process (it logs `serving on ADDRESS`
and stops on SIGTERM like `oespec engine`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from tests.faults import FAULTS, faulty_parts


def main(argv: list[str] | None = None) -> int:
    from oespec.commands import engine as engine_command

    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--list", action="store_true", help="print every fault and exit")
    parser.add_argument("--serve", action="append", default=[], metavar="NAME", help="serve with this fault")
    engine_command.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.list:
        for fault in FAULTS.values():
            sys.stdout.write(f"{fault.name}  breaks {', '.join(fault.requirements)}: {fault.breaks} [{fault.part}]\n")
        return 0
    if not args.serve:
        parser.print_help()
        return 2
    unknown = [name for name in args.serve if name not in FAULTS]
    if unknown:
        sys.stderr.write(f"unknown fault(s) {', '.join(unknown)}; --list lists them\n")
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s faulty engine: %(message)s", datefmt="%H:%M:%S")
    from openengine.serve import serve

    backend, config = faulty_parts(engine_command.build_config(args), args.serve)
    log = logging.getLogger("tests.faults")
    log.warning("faults on purpose: %s", ", ".join(args.serve))
    asyncio.run(serve(backend(), config, on_started=lambda server: log.info("serving on %s", server.address)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
