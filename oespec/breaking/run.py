"""The whole breaking check against a git ref: I/O at this edge, pure comparison inside."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from oespec.breaking.judge import compare
from oespec.breaking.rule import Context
from oespec.breaking.baseline import BaselineError, materialize, repo_root
from oespec.breaking.buf_breaking import UpstreamScope, WireError, compare_protos
from openengine.contractkit.diagnostics import Diagnostic, sorted_diagnostics
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from openengine.contractkit.rules import RuleSpec
from oespec.registry import Registry, SourceError, build_registry, load_registry

UNUSABLE_RULE = "OEB000"
UNUSABLE_SPEC = RuleSpec(UNUSABLE_RULE, "baseline-unusable", "breaking", "input",
                         "the baseline ref and both registries can be read (an unknown ref, a registry "
                         "that does not parse, or buf failing stops the comparison)", Severity.ERROR)


class BreakingError(Exception):
    """The comparison cannot run (bad ref, unreadable registry, protos that do not build): exit 2."""

    def __init__(self, path: str, message: str, hint: str = "", *, loc: Loc = Loc(),
                 diagnostics: list[Diagnostic] | None = None):
        super().__init__(message)
        self.path, self.message, self.hint, self.loc = path, message, hint, loc
        self.diagnostics = diagnostics or []

    def as_diagnostics(self) -> list[Diagnostic]:
        head = Diagnostic.at(self.path, self.loc, UNUSABLE_RULE, Severity.ERROR, self.message, self.hint)
        return [head, *self.diagnostics]


def _resolved(path: Path, display: str, what: str):
    try:
        return load_registry(path, display_path=display)
    except SourceError as err:
        raise BreakingError(err.path, f"{what} is unusable: {err.message}", err.hint, loc=err.loc) from None


def _load(path: Path, display: str, what: str) -> Registry:
    resolved = _resolved(path, display, what)
    if resolved.registry is None:
        raise BreakingError(display, f"{what} does not follow the registry schema",
                            "fix it first (`oespec check`), then compare again",
                            diagnostics=resolved.diagnostics)
    return resolved.registry


def _load_baseline(path: Path, display: str, ref: str) -> tuple[Registry, list[Diagnostic]]:
    """The baseline was valid under the schema of its own commit, which may be older than the
    current one. When the current schema rejects it, compare what can still be read, and say so."""
    what = f"the baseline registry at {ref}"
    resolved = _resolved(path, display, what)
    if resolved.registry is not None:
        return resolved.registry, []
    try:
        registry = build_registry(resolved.source)   # the model builders without the schema gate
    except (AttributeError, KeyError, TypeError, ValueError, StopIteration):
        raise BreakingError(display, f"{what} cannot be read with the current registry schema",
                            "compare with a later ref, or fix the baseline's schema problems",
                            diagnostics=resolved.diagnostics) from None
    note = Diagnostic(display, 0, 0, UNUSABLE_RULE, Severity.WARNING,
                      f"{what} does not follow the current schema ({len(resolved.diagnostics)} "
                      f"problem{'s' if len(resolved.diagnostics) != 1 else ''}); "
                      "it was compared as far as it could be read",
                      "findings about the elements the schema rejects may be missing")
    return registry, [note]


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

    scope, gate = _upstream_gate(root, proto_path, current.package)
    with tempfile.TemporaryDirectory(prefix="oespec-baseline-") as tmp:
        try:
            base = materialize(ref, repo=root, registry_rel=registry_rel, proto_rel=proto_rel, dest=Path(tmp))
        except BaselineError as err:
            raise BreakingError(registry, err.message, err.hint) from None
        baseline, notes = (_load_baseline(base.registry, f"{registry_rel} at {ref}", ref)
                           if base.registry else (None, []))
        diags = notes + compare(baseline, current, path=registry, baseline_path=registry_rel, ref=ref)
        ctx = Context(baseline, current, registry_rel, ref)
        try:
            diags += compare_protos(ctx, proto_path, base.proto, proto_display=proto_display, upstream=scope)
        except WireError as err:
            raise BreakingError(proto_display, f"{err.message} (baseline {ref})", err.hint) from None
    return sorted_diagnostics(diags + gate)


def _upstream_gate(root: Path, proto: Path, package: str) -> tuple[UpstreamScope | None, list[Diagnostic]]:
    """What upstream v1 at the pin defines, and the upstream gate's findings on the working tree:
    changes to upstream's elements are judged there, never by a profile's version. Without a pin
    in the repository there is neither."""
    from oespec import upstream

    image = root / upstream.IMAGE
    if not image.is_file():
        return None, []
    try:
        scope = UpstreamScope.from_image(upstream.load_image(image), package)
        return scope, upstream.check(proto, image, root / upstream.PIN, use_buf=False)
    except upstream.UpstreamError as err:
        return None, [err.diagnostic()]

