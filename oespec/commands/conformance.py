"""oespec conformance: run the conformance suite against a running engine, requirement by
requirement."""

from __future__ import annotations

import argparse
import os
import sys

from openengine.contractkit.diagnostics import PRINTERS

HELP = "run the conformance suite against an engine (--target HOST:PORT)"

EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", metavar="HOST:PORT", help="the engine to check")
    parser.add_argument("--tls", action="store_true",
                        help="reach --target over TLS (implied by --ca, --cert and --server-name)")
    parser.add_argument("--ca", metavar="PEM",
                        help="CA certificate that signed --target's server certificate (default: "
                             "the CAs this machine trusts)")
    parser.add_argument("--cert", metavar="PEM",
                        help="client certificate for a --target that asks for one (with --key)")
    parser.add_argument("--key", metavar="PEM", help="private key of --cert")
    parser.add_argument("--server-name", metavar="NAME",
                        help="the name --target's certificate is checked against, when it is not "
                             "the host of --target")
    parser.add_argument("--profile", action="append", default=[], metavar="NAME",
                        help="run only this profile's cases (short or full name; repeatable); a "
                             "named profile that is not advertised is forced")
    parser.add_argument("--case", action="append", default=[], metavar="PATTERN",
                        help="run only cases whose id matches this glob (repeatable)")
    parser.add_argument("--format", choices=list(PRINTERS), default="text",
                        help="report format on stdout, printed by the printers every command shares: "
                             + ", ".join(PRINTERS) + " (default: text); each case that did not pass is a "
                             "finding, and text and json add the counts and the verdict")
    parser.add_argument("--junit", metavar="FILE",
                        help="also write the full JUnit XML case report (every case, passes included)")
    parser.add_argument("--report", metavar="FILE",
                        help="also write the conformance report to publish: versioned JSON (the "
                             "engine, the contract revision, the runner, the date, the advertised "
                             "profiles and every case's outcome and reason; "
                             "schemas/conformance_report.schema.json)")
    parser.add_argument("--expected-failures", metavar="FILE",
                        help="YAML/JSON list of {case, reason}: those failures are reported as "
                             "xfail; one that passes is stale and fails the run")
    parser.add_argument("--admin-token", help="bearer token for openengine.v1.Admin (enables the "
                                              "cases that pause, resume, sleep or reconfigure)")
    parser.add_argument("--admin-target", metavar="HOST:PORT",
                        help="address of the Admin service when it has its own")
    parser.add_argument("--admin-cert", metavar="PEM",
                        help="client certificate for an Admin address behind mutual TLS")
    parser.add_argument("--admin-key", metavar="PEM", help="private key of --admin-cert")
    parser.add_argument("--admin-ca", metavar="PEM",
                        help="CA certificate that signed the Admin address's server certificate")
    parser.add_argument("--destructive", action="store_true",
                        help="also run the cases that leave the engine unable to serve (drain); "
                             "implied by --shutdown-command. Without it the engine is left as found")
    parser.add_argument("--admin-limited-token",
                        help="a valid token that lacks admin permissions (PERMISSION_DENIED case)")
    parser.add_argument("--shutdown-command", metavar="CMD",
                        help="shell command that starts the engine's graceful shutdown; enables "
                             "the destructive cases (drain, then shutdown), which run last")
    parser.add_argument("--rpc-timeout", type=float, default=5.0, metavar="SECONDS",
                        help="deadline of every call (default: 5)")
    parser.add_argument("--case-timeout", type=float, default=20.0, metavar="SECONDS",
                        help="longest a case may take (default: 20)")
    parser.add_argument("--max-message-bytes", type=int, default=4 * 1024 * 1024,
                        help="largest message accepted from the engine (default: 4 MiB)")
    parser.add_argument("--spec", metavar="DIR", help="spec folder to read requirements from for the "
                                                      "matrix (default: the index shipped with the runner)")
    parser.add_argument("--matrix", action="store_true",
                        help="print the requirement-to-case matrix and coverage, then exit")
    parser.add_argument("--list", action="store_true", help="print every case and exit")


def _unwritable(path: str) -> str | None:
    """Why a report cannot be written to `path` (checked before the run, not after it)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "is a directory"
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "the file is not writable"
    if not os.path.exists(path) and not os.access(folder, os.W_OK):
        return f"cannot create files in {folder}"
    return None


def _err(message: str) -> int:
    sys.stderr.write(f"oespec conformance: {message}\n")
    return EXIT_USAGE


def _spec_requirements(spec_dir: str | None):
    """(requirements, source) read from a spec folder; (None, None) means the packaged index."""
    if not spec_dir:
        return None, None
    from pathlib import Path

    from oespec.spec import SpecError, load_requirements
    from openengine.conformance.matrix import SpecRequirement

    root = Path(spec_dir)
    if not root.is_dir():
        raise ValueError(f"{spec_dir}: no spec folder")
    try:
        found = load_requirements(root)
    except SpecError as err:
        raise ValueError(f"{spec_dir}: the spec's requirements are malformed:\n{err}") from None
    return [SpecRequirement(r.id, r.tag, r.text, Path(r.file).resolve().relative_to(root.resolve()).as_posix(),
                            r.line, tuple((a.id, a.text) for a in r.assertions))
            for r in found], root.as_posix()


def run(args: argparse.Namespace) -> int:
    try:
        requirements, source = _spec_requirements(args.spec)
    except ValueError as err:
        return _err(str(err))
    from openengine.conformance import (
        ExpectedFailuresError, Options, Progress, all_cases, coverage, load_expected_failures,
        render_junit, render_matrix, run_suite,
    )

    try:
        cases = all_cases()
    except ImportError as err:
        return _err(f"the Python bindings are missing ({err}); run `make bindings`")
    if args.list:
        for c in cases:
            when = " (when absent)" if c.when == "absent" else ""
            sys.stdout.write(f"{c.id:<44} {c.profile}{when}  {','.join(c.requirements)}  {c.title}\n")
        return 0
    if args.matrix:
        cov = coverage(cases, requirements, source=source)
        if not cov.wire:
            return _err("no requirement index: this installation lacks openengine/conformance/requirements.json "
                        "(run `oespec generate`), or pass --spec DIR")
        # The clause x case x defect matrix needs the checkout's test engines: it is a test there
        # (tests/conformance/test_matrix.py), not something an installed runner can print.
        sys.stdout.write(render_matrix(cov))
        return 0 if not cov.uncovered and not cov.assertions_uncovered else 1
    if not args.target:
        return _err("--target HOST:PORT is required (or --matrix / --list)")
    from openengine.conformance import TargetUnusable, parse_target, unmatched_patterns

    try:
        parse_target(args.target)
        if args.admin_target:
            parse_target(args.admin_target, option="--admin-target")
    except ValueError as err:
        return _err(str(err))
    if bool(args.cert) != bool(args.key):
        return _err("--cert and --key go together (the client certificate and its key)")
    if bool(args.admin_cert) != bool(args.admin_key):
        return _err("--admin-cert and --admin-key go together (the client certificate and its key)")
    if (args.admin_cert or args.admin_ca) and not args.admin_target:
        return _err("--admin-cert/--admin-ca are for an mTLS admin address: give it with "
                    "--admin-target HOST:PORT")
    for option, path in (("--admin-cert", args.admin_cert), ("--admin-key", args.admin_key),
                         ("--admin-ca", args.admin_ca), ("--ca", args.ca), ("--cert", args.cert),
                         ("--key", args.key)):
        if path and not os.path.isfile(path):
            return _err(f"{option} {path}: no such file")
    missing = unmatched_patterns(cases, args.case)
    if missing:
        return _err(f"--case {', '.join(missing)} matches no case (`oespec conformance --list` "
                    "prints the ids)")
    for option, path in (("--junit", args.junit), ("--report", args.report)):
        refusal = _unwritable(path) if path else None
        if refusal:
            return _err(f"{option} {path}: {refusal}")
    expected = {}
    if args.expected_failures:
        try:
            expected = load_expected_failures(args.expected_failures,
                                              known_cases={c.id for c in cases})
        except ExpectedFailuresError as err:
            return _err(str(err))
    if args.rpc_timeout <= 0 or args.case_timeout <= 0:
        return _err("timeouts must be positive")
    options = Options(target=args.target, rpc_timeout=args.rpc_timeout,
                      case_timeout=args.case_timeout, max_message_bytes=args.max_message_bytes,
                      admin_target=args.admin_target, admin_token=args.admin_token,
                      admin_limited_token=args.admin_limited_token,
                      shutdown_command=args.shutdown_command, destructive=args.destructive,
                      admin_cert=args.admin_cert, admin_key=args.admin_key, admin_ca=args.admin_ca,
                      tls=args.tls, ca=args.ca, cert=args.cert, key=args.key,
                      server_name=args.server_name)
    progress = Progress(sys.stdout) if args.format == "text" else None
    import asyncio

    try:
        report = asyncio.run(run_suite(options, profiles=args.profile or None,
                                       patterns=args.case or None, expected=expected,
                                       progress=progress, requirements=requirements,
                                       requirements_source=source))
    except TargetUnusable as err:
        if progress:
            progress.finish()
        return _err(str(err))
    except ValueError as err:
        return _err(str(err))
    if progress:
        progress.finish()
    import json

    from oespec.commands.common import output_context
    from openengine.conformance.report import render_report, report_document

    sys.stdout.write(render_report(args.format, report, output_context()))
    for path, text in ((args.junit, lambda: render_junit(report)),
                       (args.report, lambda: json.dumps(report_document(report), indent=2) + "\n")):
        if not path:
            continue
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text())
        except OSError as err:
            return _err(f"cannot write {path}: {err.strerror}")
    return report.exit_code
