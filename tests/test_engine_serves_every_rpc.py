"""A maintainer's step left out, found by `make check` (which runs this file): every RPC a profile
of the registry names is implemented by the reference engine, either by the SDK's own services
(`openengine/serve/`) or by a class of `openengine/engine/services/` named as its service with a
method named as the RPC (README "Add a profile"). Otherwise `--profiles all` would leave the
profile out and `make test` would fail far from the cause.

The sources are read, not imported: a missing method is a fact of the text, and reading it needs
neither the bindings nor a running engine.
"""

from __future__ import annotations

import ast
from pathlib import Path

from oespec.registry import load_registry

ROOT = Path(__file__).resolve().parents[1]
IMPLEMENTATIONS = ("openengine/serve", "openengine/engine/services")
STEP = 'README.md, "Add a profile", the `openengine/engine/services/<service>.py` row'


def implemented(root: Path = ROOT) -> set[str]:
    """`Service/Method` for every async method of every class in the implementation folders."""
    found = set()
    for folder in IMPLEMENTATIONS:
        for path in sorted((root / folder).glob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef):
                    found |= {f"{node.name}/{f.name}" for f in node.body if isinstance(f, ast.AsyncFunctionDef)}
    return found


def unserved(registry_path: Path, served: set[str]) -> list[str]:
    """One located finding per RPC of the registry's package that nothing in the engine serves."""
    registry = load_registry(registry_path, display_path=registry_path.name).registry
    assert registry is not None, "profiles.yaml does not resolve: run `oespec check`"
    return [f"{registry.path}:{rpc.loc}: error: {rpc.name} (profile {profile.name}) has no implementation in the "
            f"reference engine: add `async def {rpc.method}` to `class {rpc.service_short}` in "
            f"openengine/engine/services/ ({STEP})"
            for profile, rpc in registry.all_rpcs()
            if rpc.package == registry.package and f"{rpc.service_short}/{rpc.method}" not in served]


def test_the_reference_engine_serves_every_rpc_of_every_profile():
    missing = unserved(ROOT / "profiles.yaml", implemented())
    assert not missing, "\n" + "\n".join(missing)


def test_a_profile_rpc_without_a_class_is_one_located_finding():
    registry = load_registry(ROOT / "profiles.yaml").registry
    every = {f"{rpc.service_short}/{rpc.method}" for _, rpc in registry.all_rpcs()}
    [finding] = unserved(ROOT / "profiles.yaml", every - {"Sessions/OpenSession"})
    text = (ROOT / "profiles.yaml").read_text(encoding="utf-8")
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "name: openengine.v1.Sessions/OpenSession" in row)
    assert finding.startswith(f"profiles.yaml:{line}:") and "class Sessions" in finding and "Add a profile" in finding
