"""Reuse a generation plan while nothing it was computed from has changed.

Planning renders every generated file (and imports the runtime for the catalogues the pages list),
which is most of what `oespec generate --check` costs. The plan is a function of the files it
reads: the registry, the proto and spec trees, the templates, and the code that ran (the
toolkit, the runtime, the libraries). Instead of listing those by hand, a run with no usable entry
records them as they are used, through Python's audit hooks (PEP 578): every file opened for
reading (a failed open counts: it records that the file was absent), every folder listed, and every
module loaded when planning ends. The entry keeps a fingerprint of each: the SHA-256 of the bytes
for files of the checkout and of the toolkit's own source tree, and size plus modification time
for installed libraries and the standard library. A later run reuses the plan only when every
fingerprint still matches and every listed folder holds the same names; any edit, added or removed
file, or upgraded library makes it plan afresh. Scratch space the plan creates (protoc's temporary
folders) and the caches under `build/oespec-cache/` are not inputs and are not recorded.

A test such as `is_file()` opens nothing and raises no audit event, so generators learn whether an
optional file is there by opening it (the failed open is recorded). As a second net, the listing
of every folder between the checkout and each path seen is kept as well.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from oespec.generate import Output
from oespec.buildcache import BuildCache, digest

# Part of every key: an entry written by an earlier layout of this module is never read.
FORMAT = "plan 1"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@dataclass
class InputRecorder:
    """Paths a computation read while it ran (absolute, as opened)."""

    files: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)
    scratch: set[str] = field(default_factory=set)   # created by the computation itself


_ACTIVE: list[InputRecorder] = []
_HOOKED = False


def _absolute(path) -> str | None:
    if isinstance(path, int):
        return None
    if path is None:
        return os.getcwd()
    try:
        return os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None


def _audit(event: str, args: tuple) -> None:
    if not _ACTIVE:
        return
    try:
        if event == "open":
            path, mode, flags = args
            if isinstance(mode, str) and any(c in mode for c in "wax+"):
                return
            if isinstance(flags, int) and flags & _WRITE_FLAGS:
                return
            target, where = _absolute(path), "files"
        elif event in ("os.listdir", "os.scandir"):
            target, where = _absolute(args[0] if args else None), "folders"
        elif event in ("tempfile.mkdtemp", "tempfile.mkstemp"):
            target, where = _absolute(args[0] if args else None), "scratch"
        else:
            return
        if target is not None:
            for recorder in _ACTIVE:
                getattr(recorder, where).add(target)
    except Exception:   # an exception here would fail the audited operation itself
        return


class recording:
    """`with recording() as rec:` collects what the block reads into `rec`."""

    def __enter__(self) -> InputRecorder:
        global _HOOKED
        if not _HOOKED:
            sys.addaudithook(_audit)   # cannot be removed; idle (one list test) outside a recording
            _HOOKED = True
        self.recorder = InputRecorder()
        _ACTIVE.append(self.recorder)
        return self.recorder

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self.recorder)


# ------------------------------------------------------------------------------- fingerprints

def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f + os.sep) for f in folders)


def file_print(path: str, hashed: bool) -> list:
    """["sha", hex] of the bytes (files of the checkout and the toolkit), ["stat", size, mtime]
    (installed code), or ["absent"]."""
    try:
        if hashed:
            with open(path, "rb") as fh:
                return ["sha", hashlib.sha256(fh.read()).hexdigest()]
        st = os.stat(path)
        return ["stat", st.st_size, st.st_mtime_ns]
    except (FileNotFoundError, NotADirectoryError):
        return ["absent"]
    except IsADirectoryError:
        return ["folder"]
    except OSError as err:
        return ["error", err.errno]


def folder_print(path: str) -> str | None:
    """The digest of a folder's sorted names (bytecode caches aside: Python writes them on its own),
    None when it is not a folder."""
    try:
        names = sorted(name for name in os.listdir(path) if name != "__pycache__")
    except OSError:
        return None
    return digest(*names)


def _ancestors(path: str, top: str) -> Iterator[str]:
    """The folders from `top` down to the one holding `path`, when `path` lies under `top`."""
    folder = os.path.dirname(path)
    while _under(folder, (top,)):
        yield folder
        if folder == top:
            break
        folder = os.path.dirname(folder)


@dataclass(frozen=True)
class Inputs:
    """What a plan was computed from: file path -> fingerprint, folder path -> listing digest."""

    files: dict[str, list]
    folders: dict[str, str | None]

    def unchanged(self, hashed: Callable[[str], bool]) -> bool:
        for path, printed in self.files.items():
            if file_print(path, hashed(path)) != printed:
                return False
        return all(folder_print(path) == printed for path, printed in self.folders.items())


def _module_files() -> Iterator[str]:
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            yield os.path.abspath(path)


def snapshot(recorder: InputRecorder, explicit: list[str], hashed: Callable[[str], bool],
             ignored: tuple[str, ...], top: str | None = None) -> Inputs:
    """The fingerprints of everything `recorder` saw, the loaded modules and the `explicit` paths.
    Under `top` (the checkout) the listing of every folder on the way to a file or folder seen is
    kept too: a check such as `is_file()` or `is_dir()` opens nothing, and a file or folder that
    appears where the computation found none changes one of those listings."""
    skip = tuple(recorder.scratch) + ignored
    paths = {p for p in recorder.files | set(_module_files())
             if not _under(p, skip) and "__pycache__" not in p.split(os.sep)}
    files = {p: file_print(p, hashed(p)) for p in sorted(paths)}
    files.update({p: file_print(p, True) for p in explicit})
    listed = {p for p in recorder.folders if not _under(p, skip)}
    if top is not None:
        for seen in paths | listed:
            listed.update(a for a in _ancestors(seen, top) if not _under(a, skip))
    folders = {p: folder_print(p) for p in sorted(listed)}
    return Inputs(files, folders)


# ----------------------------------------------------------------------------------- the cache

def _encode_outputs(outputs: list[Output]) -> bytes:
    return marshal.dumps([(o.path, o.content, o.committed) for o in outputs])


def _decode_outputs(data: bytes) -> list[Output] | None:
    try:
        rows = marshal.loads(data)
        return [Output(path, content, committed) for path, content, committed in rows]
    except (ValueError, EOFError, TypeError):
        return None


class PlanCache:
    """Plans of one checkout, one entry per (registry, root, generator selection)."""

    def __init__(self, store: BuildCache, root: Path, registry: Path, selection: list[str]):
        self.store = store
        self.root = os.path.abspath(root)
        self.registry = os.path.abspath(registry)
        toolkit = str(Path(__file__).resolve().parents[2])   # the checkout holding oespec/
        self.hashed_folders = (self.root, toolkit, os.path.dirname(self.registry))
        # Python and the installed libraries, even when the virtual environment sits in the checkout.
        self.installed = tuple({os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
        self.ignored = (os.path.abspath(Path(root) / "build" / "oespec-cache"), str(store.folder.resolve()))
        from oespec.generate import GENERATORS

        # sys.path decides which file an import finds, so a different search path is another entry.
        self.key = digest(FORMAT, sys.version, sys.executable, json.dumps(sys.path), self.root, self.registry,
                          json.dumps(sorted(selection)), json.dumps(GENERATORS))

    def _hashed(self, path: str) -> bool:
        return _under(path, self.hashed_folders) and not _under(path, self.installed)

    def lookup(self) -> list[Output] | None:
        entry = self.store.get(self.key)
        if entry is None or "inputs" not in entry or "outputs" not in entry:
            return None
        try:
            raw = json.loads(entry["inputs"])
            inputs = Inputs(raw["files"], raw["folders"])
        except (ValueError, KeyError, TypeError):
            return None
        if not inputs.unchanged(self._hashed):
            return None
        return _decode_outputs(entry["outputs"])

    def prepare(self) -> None:
        """Create the cache's folder before a recording, so that creating it afterwards does not
        change a folder listing the plan saw."""
        try:
            self.store.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass

    def save(self, recorder: InputRecorder, outputs: list[Output]) -> bool:
        inputs = snapshot(recorder, [self.registry], self._hashed, self.ignored, top=self.root)
        return self.store.put(self.key, {
            "inputs": json.dumps({"files": inputs.files, "folders": inputs.folders}).encode("utf-8"),
            "outputs": _encode_outputs(outputs),
        })


def cached_plan(cache: PlanCache | None, compute: Callable[[], list[Output]]) -> list[Output]:
    """`compute()`, or the outputs it gave last time when none of its inputs has changed."""
    if cache is None:
        return compute()
    hit = cache.lookup()
    if hit is not None:
        return hit
    cache.prepare()
    with recording() as recorder:
        outputs = compute()
    cache.save(recorder, outputs)
    return outputs
