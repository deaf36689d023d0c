"""The OpenEngine profiles toolkit.

The pipeline, one stage per package: `registry` (load and resolve profiles.yaml), `check` (the
registry's semantic rules), `generate` (protos, bindings, schemas and docs from the registry),
`breaking` (versioning rules between two registries, plus buf), and `diagnostics` (the one
record every finding is printed from).
"""

from oespec.diagnostics import Diagnostic, Loc, Severity
from oespec.registry import Registry, SourceError, load_registry

__all__ = ["Diagnostic", "Loc", "Registry", "Severity", "SourceError", "load_registry"]
