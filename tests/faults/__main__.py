"""`python -m tests.faults --list`: every fault, what it does wrong, what that breaks, and the part
of the engine it changes."""

from __future__ import annotations

import argparse
import sys

from tests.faults import FAULTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--list", action="store_true", help="print every fault and exit")
    args = parser.parse_args(argv)
    if not args.list:
        parser.print_help()
        return 2
    for fault in FAULTS.values():
        sys.stdout.write(f"{fault.name}  breaks {', '.join(fault.requirements)}: {fault.breaks} [{fault.part}]\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
