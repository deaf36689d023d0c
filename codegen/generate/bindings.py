"""Python bindings of the contract (`openengine/v1/*_pb2.py`, `*_pb2_grpc.py`, `.pyi`).

Build outputs, not committed: compiled from the proto sources as generation will leave them, so a
registry change and its bindings always move together.
"""

from __future__ import annotations

from codegen.generate import GenerationContext, GenerationError, Output
from codegen.generate.protoc import ProtocError, compile_python

PACKAGE_DIR = "openengine"
INIT = '"""Python bindings of the OpenEngine v1 contract, built by `oespec generate` (not committed)."""\n'


def generate(ctx: GenerationContext) -> list[Output]:
    sources = {rel: text for rel, text in ctx.proto_sources().items() if rel.startswith("openengine/v1/")}
    if not sources:
        return []
    try:
        modules = compile_python(sources)
    except ProtocError as err:
        raise GenerationError("bindings", f"protoc rejected the contract:\n{err.message}") from None
    outputs = [Output(f"{PACKAGE_DIR}/{rel[len('openengine/'):]}" if rel.startswith("openengine/") else rel,
                      data, committed=False)
               for rel, data in modules.items() if rel.startswith("openengine/v1/")]
    outputs.append(Output(f"{PACKAGE_DIR}/v1/__init__.py", INIT, committed=False))
    return outputs
