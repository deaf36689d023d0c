"""oespec validate: judge what an engine answered, pasted as proto3 JSON (as grpcurl prints it).

The file holds one of the `KINDS` (auto-detected from the keys of its first value, or chosen with
--kind), or a document holding the discovery answers together (`{"capabilities": {...},
"server_info": {...}, "model_info": {...} or [...]}`); a WatchLoad stream is JSON lines or
concatenated as grpcurl prints it. Each value is judged (a stream as one stream); every violation
is a Diagnostic at the line of the offending key, with its rule id; the exit status is that of
`oespec check`.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from oespec.commands.common import EXIT_UNUSABLE, add_output_arguments, write
from openengine.contractkit.diagnostics import Diagnostic, exit_code, sorted_diagnostics
from openengine.contractkit.rules import Severity

HELP = "validate a discovery answer, a GetLoad answer or a recorded WatchLoad stream (proto3 JSON)"

# Each kind: the message it holds and the RPC that answers with it, in the order a tie is decided.
KINDS = {"capabilities": ("capabilities_pb2", "Capabilities", "GetCapabilities"),
         "server-info": ("server_pb2", "ServerInfo", "GetServerInfo"),
         "model-info": ("model_pb2", "ModelInfo", "GetModelInfo"),
         "load": ("server_pb2", "LoadInfo", "GetLoad"),
         "watchload": ("load_pb2", "WatchLoadResponse", "WatchLoad")}


# The keys of a document holding the discovery answers together.
_COMBINED_KEYS = {"capabilities", "server_info", "serverInfo", "model_info", "modelInfo"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="JSON file: a discovery or GetLoad answer, or a WatchLoad stream (JSON lines)")
    parser.add_argument("--kind", choices=["auto", *KINDS], default="auto",
                        help="what the file holds (default: auto-detect from the keys of its first value)")
    parser.add_argument("--instance-id", help="WatchLoad: the instance id discovery reported")
    parser.add_argument("--capabilities", metavar="FILE",
                        help="WatchLoad: a capabilities document, to judge the stream's settings against")
    parser.add_argument("--tolerance", type=float, default=0.5,
                        help="WatchLoad: allowed timing deviation, as a fraction of the period (default: 0.5)")
    add_output_arguments(parser)


def _diag(path: str, keys: dict, line: int, v, prefix: str = "") -> Diagnostic:
    from oespec.commands.json_positions import locate

    where = locate(keys, prefix + v.path if prefix and not v.path.startswith(("server_info", "model_info", "capabilities"))
                   else v.path) or (line, 1)
    details = {"path": v.path or "(message)"}
    if v.value is not None:
        details["value"] = v.value
    details["expected"] = v.expected
    if v.requirement:
        details["requirement"] = v.requirement
    return Diagnostic(path, where[0], where[1], v.rule_id, v.severity, v.message, "", details)


class Unusable(Exception):
    """A file `oespec validate` cannot judge: reported as one located finding, exit status 2."""

    def __init__(self, path: str, line: int, col: int, rule: str, message: str):
        super().__init__(message)
        self.diagnostic = Diagnostic(path, line, col, rule, Severity.ERROR, message)


def _values(path: str):
    """(line, value, key positions) of every JSON value in `path`; Unusable when it has none."""
    from oespec.commands.json_positions import iter_values

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise Unusable(path, 0, 0, "OEV001", f"cannot read {path}: {reason}") from None
    try:
        values = list(iter_values(text))
    except ValueError as err:
        line, col = (err.args[1], err.args[2]) if len(err.args) == 3 else (0, 0)
        raise Unusable(path, line, col, "OEV001", f"not JSON: {err.args[0]}") from None
    if not values:
        raise Unusable(path, 0, 0, "OEV003", "the file holds no JSON value")
    return values


def _message_class(kind: str):
    import importlib

    module, name, _ = KINDS[kind]
    return getattr(importlib.import_module(f"openengine.v1.{module}"), name)


def _kind(values) -> str:
    """The kind whose message has every key of the first value (proto or JSON names), else the one
    with the most of them; a tie goes to the earlier kind, a combined document is capabilities."""
    first = values[0][1]
    if not isinstance(first, dict):
        return "capabilities"
    keys = set(first)
    if "capabilities" in keys and keys <= _COMBINED_KEYS:
        return "capabilities"

    def known(kind: str) -> int:
        fields = _message_class(kind).DESCRIPTOR.fields
        return len(keys & ({f.name for f in fields} | {f.json_name for f in fields}))

    return max(KINDS, key=lambda kind: (known(kind) == len(keys), known(kind), -list(KINDS).index(kind)))


def _capabilities(path: str, values) -> list[Diagnostic]:
    from openengine.validate import document_from_json, is_combined, validate_capabilities

    diags = []
    for line, value, keys in values:
        doc, errors = document_from_json(value)
        report = validate_capabilities(doc.capabilities, server_info=doc.server_info, model_infos=doc.model_infos)
        prefix = "capabilities." if is_combined(value) else ""
        diags += [_diag(path, keys, line, v) for v in errors]
        diags += [_diag(path, keys, line, v, prefix) for v in report.violations]
    return diags


def _load_observability(args):
    if not args.capabilities:
        return None, None
    from openengine.validate import document_from_json, validate_capabilities

    line, value, _ = _values(args.capabilities)[0]
    if not isinstance(value, dict):
        raise Unusable(args.capabilities, line, 1, "OEV003",
                       "--capabilities: expected a capabilities document (a JSON object)")
    doc, _ = document_from_json(value)
    report = validate_capabilities(doc.capabilities, server_info=doc.server_info)
    instance = doc.server_info.instance_id if doc.server_info is not None else None
    return report.limits["openengine.load"], instance


def _watchload(path: str, values, args) -> list[Diagnostic]:
    from openengine.v1 import load_pb2
    from openengine.validate import WatchLoadChecker, message_from_json

    observability, instance = _load_observability(args)
    checker = WatchLoadChecker(instance_id=args.instance_id or instance, observability=observability,
                               tolerance=args.tolerance, clock=lambda: 0.0)
    diags = []
    for line, value, keys in values:
        msg, errors = message_from_json(value, load_pb2.WatchLoadResponse)
        diags += [_diag(path, keys, line, v) for v in errors]
        diags += [_diag(path, keys, line, v) for v in checker.feed(msg, received_at=0.0)]
    last = values[-1][0] if values else 0
    diags += [Diagnostic(path, last, 1, v.rule_id, v.severity, v.message, "",
                         {"requirement": v.requirement}) for v in checker.finish(0.0)]
    return diags


def _answer(path: str, values, kind: str) -> list[Diagnostic]:
    """A ServerInfo, ModelInfo or LoadInfo per value: what does not decode, then what the checks find
    (a ModelInfo alone is only decoded: its rules span the capabilities)."""
    from openengine import validate

    diags = []
    for line, value, keys in values:
        msg, errors = validate.message_from_json(value, _message_class(kind))
        if kind == "server-info":
            unreadable = {v.path for v in errors}
            # The checks name fields as within a combined document (`server_info.engine_role`); this one is bare.
            checked = [replace(v, path=v.path.removeprefix("server_info.")) for v in validate.check_server_info(msg)]
            checked = [v for v in checked if v.path not in unreadable]
        else:
            checked = [] if kind == "model-info" else validate.check_load(msg, "")
        diags += [_diag(path, keys, line, v) for v in errors + checked]
    return diags


def run(args: argparse.Namespace) -> int:
    try:
        values = _values(args.file)
        kind = _kind(values) if args.kind == "auto" else args.kind
        if kind == "watchload":
            diags = _watchload(args.file, values, args)
        elif kind == "capabilities":
            diags = _capabilities(args.file, values)
        else:
            diags = _answer(args.file, values, kind)
    except Unusable as err:
        write(args.format, [err.diagnostic])
        return EXIT_UNUSABLE
    diags = sorted_diagnostics(diags)
    _, message, rpc = KINDS[kind]
    how = "detected; --kind chooses" if args.kind == "auto" else "--kind"
    write(args.format, diags, preamble=(f"{args.file}: read as {message}, the answer of {rpc} ({how})",),
          facts={"kind": kind, "message": message})
    return exit_code(diags, Severity.parse(args.fail_on))
