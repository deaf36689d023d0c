"""oespec upstream: the pinned upstream v1 image (`pin`), the gate against it (`check`), and what the
repository adds to it (`diff`)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from oespec.commands.common import EXIT_UNUSABLE, add_output_arguments, emit, write

HELP = "pin upstream OpenEngine v1, check proto/ keeps it unchanged, list what proto/ adds"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from oespec.upstream import IMAGE, PIN

    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    pin = sub.add_parser("pin", help="build upstream/openengine-v1.binpb and upstream/PIN.md from an upstream "
                                     "checkout (also how the pin moves to a newer commit)")
    pin.add_argument("--from", dest="checkout", required=True, metavar="CHECKOUT",
                     help="the upstream checkout's root (the folder holding proto/openengine/v1/)")
    pin.add_argument("--commit", required=True, help="the upstream commit the checkout is at")
    pin.add_argument("--date", help="the commit's date, YYYY-MM-DD (default: read with git from the checkout)")
    pin.add_argument("--schema-revision", type=int, help="the schema revision upstream's docs give that commit")
    pin.add_argument("--out", default=str(Path(IMAGE).parent), help="where to write (default: upstream)")

    check = sub.add_parser("check", help="fail on any change proto/ makes to what upstream defines")
    diff = sub.add_parser("diff", help="list what proto/ adds to upstream (services, RPCs, messages, fields, "
                                       "enum values)")
    for cmd in (check, diff):
        cmd.add_argument("--proto", default="proto", help="the repository's proto root (default: proto)")
        cmd.add_argument("--image", default=IMAGE, help=f"the pinned image (default: {IMAGE})")
    check.add_argument("--pin", default=PIN, help=f"the pin record (default: {PIN})")
    check.add_argument("--no-buf", action="store_true",
                       help="skip buf's PACKAGE rules (the second opinion); the element comparison still runs")
    add_output_arguments(check)
    diff.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")


def run(args: argparse.Namespace) -> int:
    from oespec.upstream import UpstreamError

    action = getattr(args, "action", None)
    if action is None:
        sys.stderr.write("oespec upstream: give an action: pin, check or diff\n")
        return EXIT_UNUSABLE
    try:
        return {"pin": _pin, "check": _check, "diff": _diff}[action](args)
    except UpstreamError as err:
        write(getattr(args, "format", "text") if action == "check" else "text", [err.diagnostic()],
              out=sys.stderr if action != "check" else None)
        return EXIT_UNUSABLE


def _pin(args: argparse.Namespace) -> int:
    from oespec.upstream import UpstreamError, pin

    date = args.date or _commit_date(Path(args.checkout), args.commit)
    if not date:
        raise UpstreamError(args.checkout, f"cannot read the date of commit {args.commit} from the checkout",
                            "give it with --date YYYY-MM-DD")
    record = pin(Path(args.checkout), args.commit, date, schema_revision=args.schema_revision, out_dir=Path(args.out))
    print(f"pinned {record.commit} ({record.date}): {args.out}/openengine-v1.binpb sha256 {record.image_sha256}")
    return 0


def _commit_date(checkout: Path, commit: str) -> str:
    import subprocess

    try:
        proc = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%cs", commit],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _check(args: argparse.Namespace) -> int:
    from oespec.upstream import check

    return emit(args, check(Path(args.proto), Path(args.image), Path(args.pin), use_buf=not args.no_buf))


def _diff(args: argparse.Namespace) -> int:
    from oespec.upstream import diff, read_pin, PIN

    found, errors = diff(Path(args.proto), Path(args.image))
    if errors:
        write("text", errors, out=sys.stderr)
        return 1
    if args.format == "json":
        pin_file = Path(args.image).with_name(Path(PIN).name)
        pinned = read_pin(pin_file) if pin_file.is_file() else None
        doc = {"upstream": {"commit": pinned.commit, "date": pinned.date} if pinned else None,
               "additions": [asdict(a) for a in found]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    for a in found:
        where = f"{a.file}:{a.line}" if a.line else a.file
        shown = a.definition if a.kind in ("field", "enum_value", "rpc") else ""
        sys.stdout.write(f"{where}: {a.kind} {a.name}" + (f": {shown}" if shown else "") + "\n")
    sys.stdout.write(f"{len(found)} addition{'s' if len(found) != 1 else ''} to upstream\n")
    return 0
