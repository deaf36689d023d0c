"""Python stubs of upstream OpenEngine v1, generated from the pinned image, and the command line
that runs a script against them in a process whose `openengine` package is upstream's alone.

The project's own `openengine` is installed editable in the venv (a `.pth` finder) and usually on
PYTHONPATH too, so a child started the ordinary way would import it. The child is started with
`-I -S`: no site processing (no `.pth` finders) and no PYTHON* variables. The script then puts the
stubs folder first on sys.path and the venv's site-packages (for grpc and protobuf) after it, from
the `--stubs` and `--site-packages` arguments given here."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "upstream" / "openengine-v1.binpb"
CLIENT = Path(__file__).resolve().parent / "upstream_client.py"


def upstream_proto_files(image: Path = IMAGE) -> list[str]:
    """Upstream's own files in the image (not its google/protobuf imports)."""
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet.FromString(image.read_bytes())
    return [f.name for f in fds.file if not f.name.startswith("google/")]


def generate_upstream_stubs(out: Path, image: Path = IMAGE) -> Path:
    """`openengine/v1/*_pb2.py` and `*_pb2_grpc.py` under `out`, from the image alone. The packages
    get an `__init__.py` each, so `openengine` is a regular package rooted in `out` (a namespace
    package could be joined by another `openengine` folder further down sys.path)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "grpc_tools.protoc", f"--descriptor_set_in={image}",
           f"--python_out={out}", f"--grpc_python_out={out}", *upstream_proto_files(image)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"protoc could not generate upstream's stubs: {proc.stderr.strip()}")
    for package in ("openengine", "openengine/v1"):
        (out / package / "__init__.py").touch()
    return out


def site_packages() -> list[str]:
    """Where this interpreter's grpc and protobuf are installed (the venv's site-packages)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def upstream_command(stubs: Path, script: Path = CLIENT, *args: str) -> list[str]:
    """The command that runs `script` with upstream's stubs as its only `openengine`."""
    site = [a for path in site_packages() for a in ("--site-packages", path)]
    return [sys.executable, "-I", "-S", str(script), "--stubs", str(stubs), *site, *args]


@pytest.fixture(scope="session")
def upstream_stubs(tmp_path_factory) -> Path:
    """Upstream's stubs, generated once per session (per xdist worker) from the pinned image."""
    return generate_upstream_stubs(tmp_path_factory.mktemp("upstream-stubs"))
