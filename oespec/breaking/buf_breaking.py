"""Wire level: run `buf breaking` between two proto trees and fold its findings into `Diagnostic`s.

buf judges what the registry cannot see (field numbers and types inside hand-written messages,
enum values, files, packages). The category is FILE: the Python bindings are imported per file
(`from openengine.v1 import load_pb2`), so moving a message to another file breaks generated code
even though the bytes on the wire stay the same. Each finding is attributed, when its names allow,
to every profile that owns the element, transitively (`oespec.breaking.ownership`); when every
owner received a new major version in the same change, or was removed after being deprecated, the
finding is accepted and reported as info.

What upstream OpenEngine v1 defines (the pinned image, `oespec.upstream`) is outside the profiles'
versioning: no bump makes a change to it legal. buf's findings on those elements are left to the
upstream gate, which `oespec breaking` runs too, so each such change is reported once, by the gate.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from oespec.breaking.rule import Context, Rule, breaking_spec
from oespec.breaking.ownership import WireGraph, attribute, buf_names, is_generated, load_graph
from oespec.descriptors import walk
from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.rules import Severity

BUF_CATEGORY = "FILE"
BUF_TIMEOUT_S = 300

WIRE_RULE = Rule(breaking_spec(
    "buf:*", "wire-breaking", category="wire", breaks="both", bump="major", requirement="REQ-VER-010",
    purpose=f"buf's {BUF_CATEGORY} breaking rules between the baseline's proto/ and the working tree's "
            "(e.g. buf:FIELD_NO_DELETE); accepted only as part of a major bump of the owning profile",
), kinds=(), handler=None)


_ENUM_VALUE = re.compile(r'\b[Ee]num value "(\d+)"')
_FIELD_NUMBER = re.compile(r'\b[Ff]ield "(\d+)"')


@dataclass(frozen=True)
class UpstreamScope:
    """What upstream v1 at the pin defines: its elements by full name and kind, and the wire numbers
    of its fields and enum values by their parent's full name."""

    package: str
    kinds: dict[str, str]                  # full name -> message, enum, service, rpc, ...
    numbers: frozenset[tuple[str, int]]    # (message or enum, field or value number)
    files: frozenset[str]

    @classmethod
    def from_image(cls, fds, package: str) -> "UpstreamScope":
        own = [f for f in fds.file if f.package == package]
        found = [(kind, full, proto, parent) for f in own for kind, full, proto, _, parent in walk(f)]
        return cls(package, {full: kind for kind, full, _, _ in found},
                   frozenset((parent, proto.number) for kind, _, proto, parent in found
                             if kind in ("field", "enum_value")),
                   frozenset(f.name for f in own))

    def _full(self, kind: str, name: str) -> str | None:
        """Upstream's full name of a type buf names relative to the package (a nested type by its
        own name alone, so matched as a suffix too)."""
        full = f"{self.package}.{name}"
        if self.kinds.get(full) == kind:
            return full
        return next((n for n, k in self.kinds.items() if k == kind and n.endswith("." + name)), None)

    def defines(self, buf_message: str) -> bool:
        """Does one buf finding name an element upstream defines?"""
        names = buf_names(buf_message)
        if "service" in names:
            service = self._full("service", names["service"][0])
            rpcs = names.get("RPC", [])
            return service is not None and all(f"{service}/{rpc}" in self.kinds for rpc in rpcs)
        for kind, numbered in (("enum", _ENUM_VALUE), ("message", _FIELD_NUMBER)):
            if kind in names:
                parent = self._full(kind, names[kind][0])
                return parent is not None and all((parent, int(n)) in self.numbers
                                                  for n in numbered.findall(buf_message))
        return any(f in self.files for f in names.get("file", []))


class WireError(Exception):
    """buf is missing or could not build one of the two proto trees."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint


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


def run_buf(current: Path, baseline: Path) -> list[dict]:
    """buf's findings as parsed JSON objects; `current` and `baseline` are proto roots."""
    buf = find_buf()
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


def _accepted_by(profile: str, ctx: Context) -> str | None:
    """Why a wire change owned by `profile` is legal: a new major of it, or its removal after it
    was deprecated (REQ-VER-009). None when it is not."""
    prev = ctx.baseline.profile(profile) if ctx.baseline else None
    cur = ctx.current.profile(profile)
    if prev is not None and cur is not None and ctx.bump(profile) == "major":
        return f"major bump of {profile}: {prev.version} -> {cur.version}"
    if prev is not None and cur is None and prev.deprecated is not None:
        return f"{profile} {prev.version} removed after its deprecation"
    return None


def fold(findings: list[dict], ctx: Context, *, proto_display: str, graph: WireGraph | None = None,
         current_root: Path | None = None, baseline_root: Path | None = None,
         upstream: UpstreamScope | None = None) -> list[Diagnostic]:
    """buf JSON findings -> Diagnostics (path relative to the repository, `buf:<RULE>` ids).

    Each finding is charged to every profile that owns what it names (`oespec.breaking.ownership`);
    it is accepted when each of them received a new major version or was removed after being
    deprecated. A finding on a file generated from the registry also names the registry element
    (and its line) that produced the changed proto element. A finding on what `upstream` defines
    is left out: the upstream gate judges it.
    """
    diags = []
    for f in findings:
        rule_id = f"buf:{f.get('type', 'UNKNOWN')}"
        message = str(f.get("message", "")).strip()
        if upstream is not None and upstream.defines(message):
            continue
        rel = f.get("path")
        path = f"{proto_display}/{rel}" if rel else proto_display
        line, column = (int(f.get("start_line", 0)), int(f.get("start_column", 0))) if rel else (0, 0)
        generated = False
        if rel:
            where = [root / rel for root in (current_root, baseline_root) if root is not None and (root / rel).is_file()]
            generated = bool(where) and is_generated(where[0])
        found = attribute(message, ctx.baseline, ctx.current, graph, generated=generated)
        profiles = sorted(found.owners)
        details = {"breaks": WIRE_RULE.breaks, "bump": WIRE_RULE.bump, "requirement": WIRE_RULE.requirement}
        if profiles:
            details["profile"] = ", ".join(profiles)
        if found.origin is not None:
            origin = found.origin
            registry_path = ctx.current.path if origin.side == "current" else f"{ctx.baseline_path}"
            at = f"{registry_path}:{origin.loc}" + (f" at {ctx.ref}" if origin.side == "baseline" else "")
            details["registry"] = f"{at}: {origin.what}"
            message = f"{message} (generated from {origin.what}, {at})"
        reasons = [_accepted_by(p, ctx) for p in profiles]
        if profiles and all(reasons):
            severity, hint = Severity.INFO, ""
            details["accepted"] = "; ".join(reasons)
        else:
            severity = Severity.ERROR
            if found.shared:
                hint = ("no profile's RPCs or capability messages reach this element, so no version bump can "
                        "make the change legal within openengine.v1 (REQ-VER-010); revert it, or add a new "
                        "field or message instead")
            else:
                missing = [p for p, why in zip(profiles, reasons) if why is None]
                owner = f" of {', '.join(missing)}" if missing else " of the profile that owns it"
                hint = ("peers built from the baseline protos break on this; revert it, add a new field or "
                        f"message instead, or make it part of a new major version{owner}"
                        + (" (every profile that reaches the element owns it)" if len(profiles) > 1 else ""))
        diags.append(Diagnostic(path, line, column, rule_id, severity, message, hint, details))
    return diags


def compare_protos(ctx: Context, current: Path, baseline: Path | None, *, proto_display: str = "proto",
                   upstream: UpstreamScope | None = None) -> list[Diagnostic]:
    """Wire findings between two proto roots, except those on what `upstream` defines; none when
    the baseline has no protos yet."""
    before, after = proto_files(baseline), proto_files(current)
    if not before:
        return []  # nothing was published: every proto file is new
    if not after:  # the working tree has no protos at all: every baseline file counts as deleted
        return fold([{"type": "FILE_NO_DELETE", "message": f'Previously present file "{name}" was deleted.'}
                     for name in before], ctx, proto_display=proto_display)
    findings = run_buf(current, baseline)
    graph = load_graph(baseline, ctx.baseline.package) if findings and ctx.baseline is not None else None
    return fold(findings, ctx, proto_display=proto_display, graph=graph, current_root=current,
                baseline_root=baseline, upstream=upstream)
