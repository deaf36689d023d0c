"""The whole breaking check against a git ref: I/O at this edge, pure comparison inside."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from codegen.breaking import Context, compare
from codegen.breaking.baseline import BaselineError, materialize, repo_root
from codegen.breaking.wire import WireError, compare_protos
from codegen.diagnostics import Diagnostic, Loc, Severity, sorted_diagnostics
from codegen.registry import Registry, SourceError, load_registry

UNUSABLE_RULE = "OEB000"


class BreakingError(Exception):
    """The comparison cannot run (bad ref, unreadable registry, protos that do not build): exit 2."""

    def __init__(self, path: str, message: str, hint: str = "", *, loc: Loc = Loc(),
                 diagnostics: list[Diagnostic] | None = None):
        super().__init__(message)
        self.path = path
        self.message = message
        self.hint = hint
        self.loc = loc
        self.diagnostics = diagnostics or []

    def as_diagnostics(self) -> list[Diagnostic]:
        head = Diagnostic.at(self.path, self.loc, UNUSABLE_RULE, Severity.ERROR, self.message, self.hint)
        return [head, *self.diagnostics]


def _load(path: Path, display: str, what: str) -> Registry:
    try:
        resolved = load_registry(path, display_path=display)
    except SourceError as err:
        raise BreakingError(err.path, f"{what} is unusable: {err.message}", err.hint, loc=err.loc) from None
    if resolved.registry is None:
        raise BreakingError(display, f"{what} does not follow the registry schema",
                            "fix it first (`oespec check`), then compare again",
                            diagnostics=resolved.diagnostics)
    return resolved.registry


def _relative(path: Path, root: Path, what: str) -> str:
    try:
        return Path(os.path.relpath(path.resolve(), root.resolve())).as_posix()
    except ValueError:
        raise BreakingError(str(path), f"{what} {path} is outside the repository at {root}") from None


def check_against(ref: str, *, registry: str = "profiles.yaml", proto: str = "proto") -> list[Diagnostic]:
    """Every registry and wire finding between the working tree and `ref`. Raises `BreakingError`."""
    registry_path, proto_path = Path(registry), Path(proto)
    if not registry_path.is_file():
        raise BreakingError(registry, f"registry {registry} not found",
                            "run from the repository root or pass --registry")
    current = _load(registry_path, registry, "the registry")
    try:
        root = repo_root(registry_path.resolve().parent)
    except BaselineError as err:
        raise BreakingError(registry, err.message, err.hint) from None
    registry_rel = _relative(registry_path, root, "registry")
    proto_rel = _relative(proto_path, root, "proto directory")
    proto_display = proto.rstrip("/") or "."

    with tempfile.TemporaryDirectory(prefix="oespec-baseline-") as tmp:
        try:
            base = materialize(ref, repo=root, registry_rel=registry_rel, proto_rel=proto_rel, dest=Path(tmp))
        except BaselineError as err:
            raise BreakingError(registry, err.message, err.hint) from None
        baseline = (_load(base.registry, f"{registry_rel} at {ref}", f"the baseline registry at {ref}")
                    if base.registry else None)
        diags = compare(baseline, current, path=registry, baseline_path=registry_rel, ref=ref)
        ctx = Context(baseline, current, registry_rel, ref)
        try:
            diags += compare_protos(ctx, proto_path, base.proto, proto_display=proto_display)
        except WireError as err:
            raise BreakingError(proto_display, f"{err.message} (baseline {ref})", err.hint) from None
    return sorted_diagnostics(diags)

