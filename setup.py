"""Build hook: the wheel carries the contract's Python bindings, compiled from `proto/` when the
wheel is built (never at import time, never committed).

Everything else about the distribution is declared in pyproject.toml. The bindings are the same
files `oespec generate --only bindings` writes into a checkout (protoc's Python, stub and gRPC
outputs of every proto, plus `openengine/v1/__init__.py`); a test compares the two.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PROTO_ROOT = Path(__file__).resolve().parent / "proto"
V1_INIT = '"""Python bindings of the OpenEngine v1 contract, built by `oespec generate` (not committed)."""\n'


class BuildWithBindings(build_py):
    """`build_py`, then protoc (from the pinned grpcio-tools build requirement) into the build
    folder. An editable install leaves it out: a checkout builds its bindings with `make bindings`."""

    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            self.compile_bindings(Path(self.build_lib).resolve())

    def compile_bindings(self, out: Path) -> None:
        import grpc_tools
        from grpc_tools import protoc

        sources = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))
        if not sources:
            raise SystemExit(f"no .proto files under {PROTO_ROOT}: the sdist or checkout is incomplete")
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        # protoc resolves the inputs against -I, so it runs from the proto root.
        cwd = os.getcwd()
        os.chdir(PROTO_ROOT)
        try:
            code = protoc.main(["protoc", "-I.", f"-I{well_known}", f"--python_out={out}",
                                f"--pyi_out={out}", f"--grpc_python_out={out}", *sources])
        finally:
            os.chdir(cwd)
        if code != 0:
            raise SystemExit(f"protoc could not compile {PROTO_ROOT} (exit status {code})")
        (out / "openengine" / "v1" / "__init__.py").write_text(V1_INIT, encoding="utf-8")


setup(cmdclass={"build_py": BuildWithBindings})
