"""Generate JSON Schemas (2020-12) of the proto3 JSON mapping (in progress)."""

from __future__ import annotations

from codegen.generate import GenerationContext, Output


def generate(ctx: GenerationContext) -> list[Output]:
    return []
