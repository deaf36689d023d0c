"""Python bindings of the contract (`openengine/v1/*_pb2.py`, `*_pb2_grpc.py`, `.pyi`).

Build outputs, not committed: compiled from the proto sources as generation will leave them, so a
registry change and its bindings always move together.
"""

from __future__ import annotations

from oespec.generate import GenerationContext, Output

BOUND_DIR = "openengine/v1/"
INIT = '"""Python bindings of the OpenEngine v1 contract, built by `oespec generate` (not committed)."""\n'


def generate(ctx: GenerationContext) -> list[Output]:
    if not any(rel.startswith(BOUND_DIR) for rel in ctx.proto_sources()):
        return []
    _, modules = ctx.compiled("bindings")
    bound = [Output(rel, data, committed=False) for rel, data in modules.items() if rel.startswith(BOUND_DIR)]
    return bound + [Output(f"{BOUND_DIR}__init__.py", INIT, committed=False)]
