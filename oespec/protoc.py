"""Compile proto sources with the protoc bundled in grpcio-tools, from an in-memory tree.

Generation compiles before writing anything, so protoc works on a temporary copy of `proto/`
with the planned files overlaid. It runs in this process (cheaper than starting another Python),
with file descriptor 2 pointed at a temporary file so its diagnostics become findings.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from oespec.buildcache import BuildCache

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2


class ProtocError(Exception):
    """protoc rejected the sources; `message` holds its located diagnostics (path:line:col)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@lru_cache(maxsize=1)
def well_known_include() -> str:
    import grpc_tools

    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


def read_sources(proto_root: Path) -> dict[str, str]:
    """Every .proto under `proto_root`, by its path relative to it."""
    return {p.relative_to(proto_root).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(Path(proto_root).rglob("*.proto"))}


def _materialize(sources: dict[str, str], where: Path) -> list[str]:
    files = []
    for rel, text in sorted(sources.items()):
        target = where / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        files.append(rel)
    return files


_PROTOC_LOCK = threading.Lock()   # file descriptor 2 is process-wide


def _run_protoc(args: list[str], cwd: Path) -> None:
    """Run protoc on `args`; input files are given relative to `cwd` (the proto root)."""
    from grpc_tools import protoc

    args = [a if a.startswith("-") else str(cwd / a) for a in args]
    with _PROTOC_LOCK, tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            code = protoc.main(["protoc", *args])
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = captured.read().decode("utf-8", "replace")
    if code != 0:
        text = text.strip() or f"protoc exited with {code}"
        raise ProtocError(text.replace(str(cwd) + os.sep, ""))


def compile_descriptor_set(sources: dict[str, str], *, source_info: bool = True,
                           cache: BuildCache | None = None) -> descriptor_pb2.FileDescriptorSet:
    """Every file of `sources` (paths relative to the proto root) with its imports, as descriptors.
    `cache` is the checkout's cache, given only when `sources` are that checkout's `proto/`."""
    name = f"descriptors-source-info-{source_info}.pb"
    data = cache.get(name) if cache is not None else None
    if data is None:
        data = _compile_descriptor_set(sources, source_info)
        if cache is not None:
            cache.put(name, data)
    return _descriptor_set(data)


def _descriptor_set(data: bytes) -> descriptor_pb2.FileDescriptorSet:
    from google.protobuf import descriptor_pb2

    return descriptor_pb2.FileDescriptorSet.FromString(data)


def _compile_descriptor_set(sources: dict[str, str], source_info: bool) -> bytes:
    return _protoc(sources, source_info=source_info)[0]


def compile_all(sources: dict[str, str]) -> tuple[descriptor_pb2.FileDescriptorSet, dict[str, bytes]]:
    """One protoc run for everything generation needs: the descriptor set (imports and source
    info included) and the Python modules by path. Each protoc start costs more than the compile."""
    data, modules = _protoc(sources, source_info=True, python=True)
    return _descriptor_set(data), modules


def _protoc(sources: dict[str, str], *, source_info: bool,
            python: bool = False) -> tuple[bytes, dict[str, bytes]]:
    """The descriptor set of `sources` (imports included) and, with `python`, their Python modules."""
    with tempfile.TemporaryDirectory(prefix="oespec-protoc-") as tmp:
        src, out, fds_path = Path(tmp) / "src", Path(tmp) / "out", Path(tmp) / "set.pb"
        out.mkdir()
        args = [f"-I{src}", f"-I{well_known_include()}", "--include_imports",
                f"--descriptor_set_out={fds_path}"]
        if source_info:
            args.append("--include_source_info")
        if python:
            args += [f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}"]
        _run_protoc(args + _materialize(sources, src), src)
        modules = {p.relative_to(out).as_posix(): p.read_bytes()
                   for p in sorted(out.rglob("*")) if p.is_file()}
        return fds_path.read_bytes(), modules
