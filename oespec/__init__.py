"""The OpenEngine profiles toolkit.

The pipeline, one stage per package: `registry` (load and resolve profiles.yaml), `check` (the
registry's semantic rules), `generate` (protos, bindings, schemas and docs from the registry),
`breaking` (versioning rules between two registries, plus buf), `upstream` (the pinned upstream
v1 and its gate) and `spec` (the spec's requirements). Every finding is an
`openengine.contractkit.diagnostics.Diagnostic`.
"""

from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from oespec.registry import Registry, SourceError, load_registry

__all__ = ["Diagnostic", "Loc", "Registry", "Severity", "SourceError", "load_registry"]
