"""Generate the requirement index the conformance runner ships with.

`openengine/conformance/requirements.json` lists every numbered requirement of `spec/` (id, tag,
text, the spec page and line it is on, and its marked clauses with their assertion ids), so an installed runner reports requirement coverage
(`oespec conformance --matrix`) without a checkout's `spec/` folder next to it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from oespec import spec
from oespec.generate import HEADER_TEXT, GenerationContext, GenerationError, Output

OUTPUT = "openengine/conformance/requirements.json"
SPEC_DIR = "spec"


def index_document(requirements: list[spec.Requirement]) -> str:
    """The index as JSON text: one requirement per line, in spec order."""
    rows = [json.dumps({"id": r.id, "tag": r.tag, "text": r.text, "page": r.file, "line": r.line}
                       | ({"assertions": [{"id": a.id, "text": a.text} for a in r.assertions]}
                          if r.assertions else {}),
                       ensure_ascii=False)
            for r in requirements]
    body = ",\n  ".join(rows)
    return f'{{"$comment": {json.dumps(HEADER_TEXT)},\n "requirements": [\n  {body}\n ]}}\n'


def spec_requirements(ctx: GenerationContext, generator: str) -> list[spec.Requirement] | None:
    """The requirements of the spec under the tree being generated, each `file` the page it is on
    (relative to the spec folder, e.g. `load.md`), read once per generation and shared by the
    generators that need them; None when there is no spec folder; malformed ones stop `generator`."""
    spec_dir = ctx.root / SPEC_DIR
    if not spec_dir.is_dir():
        return None
    if "spec_requirements" not in ctx.cache:
        try:
            found = spec.load_requirements(spec_dir)
        except spec.SpecError as err:
            raise GenerationError(generator, f"the spec's requirements are malformed:\n{err}") from None
        ctx.cache["spec_requirements"] = [replace(r, file=Path(r.file).relative_to(spec_dir).as_posix())
                                          for r in found]
    return ctx.cache["spec_requirements"]


def generate(ctx: GenerationContext) -> list[Output]:
    found = spec_requirements(ctx, "requirements")
    if found is None:
        return []  # a registry without a spec (a fixture tree): nothing to index
    return [Output(OUTPUT, index_document(found))]
