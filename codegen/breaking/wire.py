"""Wire level: run `buf breaking` between two proto trees and fold its findings into `Diagnostic`s.

buf judges what the registry cannot see (field numbers and types inside hand-written messages,
enum values, files, packages). The category is FILE: the Python bindings are imported per file
(`from openengine.v1 import load_pb2`), so moving a message to another file breaks generated code
even though the bytes on the wire stay the same. Each finding is attributed, when its names allow,
to the profiles that own the element; when every owner received a new major version in the same
change, the finding is accepted and reported as info.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from codegen.breaking import Context, Rule
from codegen.diagnostics import Diagnostic, Severity
from codegen.registry import Registry

BUF_CATEGORY = "FILE"
BUF_TIMEOUT_S = 300

WIRE_RULE = Rule(
    id="buf:*", name="wire-breaking", category="wire", breaks="both", bump="major", kinds=(), handler=None,
    requirement="REQ-VER-010",
    purpose=f"buf's {BUF_CATEGORY} breaking rules between the baseline's proto/ and the working tree's "
            "(e.g. buf:FIELD_NO_DELETE); accepted only as part of a major bump of the owning profile",
)


class WireError(Exception):
    """buf is missing or could not build one of the two proto trees."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint


def find_buf() -> str | None:
    """The buf installed next to this interpreter (the pinned `buf-bin` wheel), else the PATH's."""
    here = Path(sys.executable).parent / "buf"
    if here.is_file():
        return str(here)
    return shutil.which("buf")


def proto_files(root: Path | None) -> list[str]:
    if root is None or not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.proto"))


def run_buf(current: Path, baseline: Path, *, buf: str | None = None) -> list[dict]:
    """buf's findings as parsed JSON objects; `current` and `baseline` are proto roots."""
    buf = buf or find_buf()
    if buf is None:
        raise WireError("buf is not installed, so the wire-level check cannot run",
                        "run `make setup` (buf-bin is pinned in requirements.txt)")
    # Inline configs: never depend on a buf.yaml being present (or the same) at the baseline ref.
    config = json.dumps({"version": "v1", "breaking": {"use": [BUF_CATEGORY]}})
    cmd = [buf, "breaking", ".", "--against", str(baseline.resolve()), "--config", config,
           "--against-config", json.dumps({"version": "v1"}), "--error-format", "json"]
    try:
        proc = subprocess.run(cmd, cwd=current, capture_output=True, text=True, timeout=BUF_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise WireError(f"could not run buf: {err}") from None
    if proc.returncode == 0:
        return []
    findings = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            findings.append(json.loads(line))
        except json.JSONDecodeError:
            findings = []
            break
    # buf reports a tree that does not compile as findings of type COMPILE (same exit status).
    broken = [f for f in findings if f.get("type") == "COMPILE"]
    if broken:
        first = broken[0]
        where = f"{first.get('path', '?')}:{first.get('start_line', 0)}"
        side = "the baseline's" if Path(str(first.get("path", ""))).is_absolute() or \
            str(first.get("path", "")).startswith("..") else "the working tree's"
        raise WireError(f"buf could not build {side} protos: {where}: {first.get('message', '')}",
                        "the protos on both sides must compile (`buf build`)")
    if proc.returncode == 100 and findings:
        return findings
    detail = (proc.stderr or proc.stdout).strip().splitlines()
    raise WireError("buf could not compare the protos: " + (" | ".join(detail[:5]) or f"exit {proc.returncode}"),
                    "make sure both the working tree's and the baseline's protos compile (`buf build`)")


_NAMED = re.compile(r'\b(message|service|RPC|enum|file) "([^"]+)"')


def owners(message: str, baseline: Registry | None) -> set[str]:
    """Profiles (of the baseline registry) that own the elements a buf message names."""
    if baseline is None:
        return set()
    names: dict[str, list[str]] = {}
    for kind, value in _NAMED.findall(message):
        names.setdefault(kind, []).append(value)
    pkg = baseline.package
    found: set[str] = set()
    services = names.get("service", [])
    rpcs = names.get("RPC", [])
    for service in services:
        if rpcs:
            for rpc in rpcs:
                owner = baseline.rpc_owner().get(f"{pkg}.{service}/{rpc}")
                if owner:
                    found.add(owner.name)
        else:
            found |= {p.name for p, r in baseline.all_rpcs() if r.service == f"{pkg}.{service}"}
    for msg in names.get("message", []):
        top = msg.split(".")[0]
        for profile in baseline.profiles:
            listed = {m.name.rsplit(".", 1)[-1] for m in profile.messages}
            listed |= {n.rsplit(".", 1)[-1] for r in profile.rpcs if r.package == pkg for n in (r.request, r.response)}
            if profile.capability and profile.capability.message == top or top in listed:
                found.add(profile.name)
    for enum in names.get("enum", []):
        for profile in baseline.profiles:
            if any(lim.type.enum_name == enum for lim in profile.limits):
                found.add(profile.name)
    return found


def fold(findings: list[dict], ctx: Context, *, proto_display: str) -> list[Diagnostic]:
    """buf JSON findings -> Diagnostics (path relative to the repository, `buf:<RULE>` ids)."""
    diags = []
    for f in findings:
        rule_id = f"buf:{f.get('type', 'UNKNOWN')}"
        message = str(f.get("message", "")).strip()
        rel = f.get("path")
        path = f"{proto_display}/{rel}" if rel else proto_display
        line, column = (int(f.get("start_line", 0)), int(f.get("start_column", 0))) if rel else (0, 0)
        profiles = sorted(owners(message, ctx.baseline))
        details = {"breaks": "both", "bump": "major", "requirement": WIRE_RULE.requirement}
        if profiles:
            details["profile"] = ", ".join(profiles)
        accepted = bool(profiles) and all(ctx.bump(p) == "major" for p in profiles)
        if accepted:
            severity, hint = Severity.INFO, ""
            details["accepted"] = "major bump of " + ", ".join(
                f"{p}: {ctx.baseline.profile(p).version} -> {ctx.current.profile(p).version}" for p in profiles)
        else:
            severity = Severity.ERROR
            owner = f" of {', '.join(profiles)}" if profiles else " of the profile that owns it"
            hint = ("peers built from the baseline protos break on this; revert it, add a new field or "
                    f"message instead, or make it part of a new major version{owner}")
        diags.append(Diagnostic(path, line, column, rule_id, severity, message, hint, details))
    return diags


def deleted_tree(baseline_files: list[str], ctx: Context, *, proto_display: str) -> list[Diagnostic]:
    """The working tree has no protos at all: every baseline file counts as deleted."""
    return fold([{"type": "FILE_NO_DELETE", "message": f'Previously present file "{name}" was deleted.'}
                 for name in baseline_files], ctx, proto_display=proto_display)


def compare_protos(ctx: Context, current: Path, baseline: Path | None, *, proto_display: str = "proto",
                   buf: str | None = None) -> list[Diagnostic]:
    """Wire findings between two proto roots; none when the baseline has no protos yet."""
    before, after = proto_files(baseline), proto_files(current)
    if not before:
        return []  # nothing was published: every proto file is new
    if not after:
        return deleted_tree(before, ctx, proto_display=proto_display)
    return fold(run_buf(current, baseline, buf=buf), ctx, proto_display=proto_display)
