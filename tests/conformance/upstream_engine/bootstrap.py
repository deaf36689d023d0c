"""Put upstream's stubs where `import openengine` finds them, and only them.

Shared by engine.py and driver.py, which both run under `python -S` (no site hooks, so the
project's editable `openengine` package is not on the path).
"""

from __future__ import annotations

import sys
from pathlib import Path


def use_stubs(stubs: str, sites: list[str]) -> str | None:
    """Stubs first on sys.path, then this folder, then `sites` (grpc and protobuf); None when
    `openengine` now resolves to the stubs alone, else why not."""
    root = Path(stubs).resolve()
    sys.path[:0] = [str(root)]
    sys.path[2:2] = [str(Path(d).resolve()) for d in sites]
    import openengine

    where = [Path(p).resolve() for p in getattr(openengine, "__path__", [])]
    if where != [root / "openengine"]:
        return f"openengine resolves to {[str(w) for w in where]}, not to the stubs in {root}"
    return None
