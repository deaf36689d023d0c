"""Names the contract gives things, shared by runtime code and the generators.

Kept free of imports so that `codegen` (the registry checker, the JSON Schema generator) can use
it before the Python bindings exist.
"""

from __future__ import annotations

# One word of a profile name: lower-case, digits, inner hyphens.
_WORD = r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*"
# A canonical profile name (REQ-CAP-001): at least two dotted words, e.g. openengine.runtime-events.
# The registry checker (OE003), the JSON Schemas and the validators (OEV102) use this one pattern.
CANONICAL_NAME = rf"^{_WORD}(?:\.{_WORD})+$"
