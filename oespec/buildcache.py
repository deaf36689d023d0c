"""The toolkit's one cache: results computed from a checkout's contract inputs, kept under
`build/oespec-cache/` (never committed) in a folder named by the digest of those inputs.

The inputs are the registry, every file under `proto/`, `spec/`, `schemas/` and
`conformance/reports/` (the Conformance page is built from the kept reports), the text of the `oespec` and
`openengine` packages (templates and catalogues included), `requirements.txt` and the Python
version: any change is another key, so a result is never reused for other inputs. Entries are
written to a temporary file and renamed; a checkout that cannot be written only loses the speed.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

# Set to any non-empty value to compute everything afresh and keep nothing.
DISABLE_ENV = "OESPEC_NO_CACHE"
INPUT_FOLDERS = ("proto", "spec", "schemas", "conformance/reports")
TOOLKIT_PACKAGES = ("oespec", "openengine")
KEPT = 8                      # keys kept; an edit leaves the previous key's folder behind


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def inputs_digest(root: Path, registry: Path) -> str:
    """The digest of every input named above, each file by its path and bytes."""
    # The toolkit that runs, and the checkout's own copy when it is another (generation reads the
    # runtime's input schemas from the checkout).
    homes = sorted({Path(__file__).resolve().parents[1], root.resolve()})
    files = [(str(registry), registry)]   # as given: it is the path findings show
    files += [(p.relative_to(root).as_posix(), p) for name in INPUT_FOLDERS for p in _files(root / name)]
    for home in homes:
        for package in TOOLKIT_PACKAGES:
            files += [(p.relative_to(home).as_posix(), p) for p in _files(home / package)]
        files.append(("requirements.txt", home / "requirements.txt"))
    digest = hashlib.sha256(sys.version.encode())
    for name, path in files:
        data = path.read_bytes() if path.is_file() else b""
        for part in (name.encode(), data):
            digest.update(len(part).to_bytes(8, "little") + part)
    return digest.hexdigest()


class BuildCache:
    """The entries (named byte strings, or Python values pickled) computed from one set of inputs.
    The folder is the checkout's own, trusted as its bytecode caches are."""

    def __init__(self, root: Path, registry: Path):
        self.base = Path(root) / "build" / "oespec-cache"
        self.folder = self.base / inputs_digest(Path(root), Path(registry))

    def get(self, name: str) -> bytes | None:
        try:
            return (self.folder / name).read_bytes()
        except OSError:
            return None

    def put(self, name: str, data: bytes) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            os.utime(self.folder)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{name}.")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.folder / name)
            keys = sorted(self.base.iterdir(), key=lambda p: p.stat().st_mtime_ns)
            for old in keys[:-KEPT]:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:   # a read-only checkout, or another run pruning the same folder
            pass


    def load(self, name: str):
        """The value `keep` saved under `name`, or None (never kept, or unreadable)."""
        data = self.get(name)
        try:
            return None if data is None else pickle.loads(data)
        except Exception:   # noqa: BLE001 - a damaged entry is a miss, whatever it raises
            return None

    def keep(self, name: str, value) -> None:
        self.put(name, pickle.dumps(value))


def for_checkout(root: Path | str, registry: Path | str) -> BuildCache | None:
    """The cache of the checkout at `root` for `registry`, or None when $OESPEC_NO_CACHE is set."""
    return None if os.environ.get(DISABLE_ENV) else BuildCache(Path(root), Path(registry))
