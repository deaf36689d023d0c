"""A content-addressed store of build results under `build/` (never committed).

An entry is a set of named byte strings saved under the hex digest of everything that produced
it, so a changed input gives a different key and the old entry is simply never asked for again.
Entries are written to a temporary sibling and renamed into place (concurrent runs, such as
parallel tests on one checkout, never see half an entry); each carries the digest of its own
bytes, so a truncated or damaged entry reads as a miss and the caller recomputes. A cache that
cannot be written (read-only checkout, full disk) only costs speed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

FORMAT = b"oespec-cache 1\n"


def digest(*parts: bytes | str) -> str:
    """One key from several parts; each is length-prefixed, so no two part lists collide."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _pack(entries: dict[str, bytes]) -> bytes:
    names = sorted(entries)
    index = json.dumps([[name, len(entries[name])] for name in names]).encode("utf-8")
    body = b"".join(entries[name] for name in names)
    check = hashlib.sha256(index + b"\n" + body).hexdigest().encode("ascii")
    return FORMAT + check + b"\n" + index + b"\n" + body


def _unpack(blob: bytes) -> dict[str, bytes] | None:
    if not blob.startswith(FORMAT):
        return None
    rest = blob[len(FORMAT):]
    check, _, rest = rest.partition(b"\n")
    if hashlib.sha256(rest).hexdigest().encode("ascii") != check:
        return None
    index_text, _, body = rest.partition(b"\n")
    try:
        index = json.loads(index_text)
    except ValueError:
        return None
    entries, offset = {}, 0
    for name, size in index:
        entries[name] = body[offset:offset + size]
        offset += size
    return entries if offset == len(body) else None


# Entries kept per kind; the least recently written go first (each edit of a proto leaves a new
# compile behind, and only the latest few are ever asked for again).
MAX_ENTRIES = 32


class BuildCache:
    """Entries of one kind (`protoc`, `plan`) under `folder`."""

    def __init__(self, folder: Path | str, max_entries: int = MAX_ENTRIES):
        self.folder = Path(folder)
        self.max_entries = max_entries

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.bin"

    def get(self, key: str) -> dict[str, bytes] | None:
        try:
            blob = self.path(key).read_bytes()
        except OSError:
            return None
        return _unpack(blob)

    def put(self, key: str, entries: dict[str, bytes]) -> bool:
        """Save an entry; False when the folder cannot be written (the result is simply not kept)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{key[:16]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(_pack(entries))
                os.replace(tmp, self.path(key))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            return False
        self._prune()
        return True

    def _prune(self) -> None:
        try:
            entries = sorted(self.folder.glob("*.bin"), key=lambda p: p.stat().st_mtime_ns)
            for old in entries[: max(0, len(entries) - self.max_entries)]:
                old.unlink(missing_ok=True)
        except OSError:   # another run pruned the same entry first
            pass


# Set to any non-empty value to compute everything afresh and keep nothing (timing a cold run,
# or ruling the cache out when something looks wrong).
DISABLE_ENV = "OESPEC_NO_CACHE"


def for_checkout(root: Path | str, kind: str) -> BuildCache | None:
    """The cache of `kind` in the checkout at `root` (`build/oespec-cache/<kind>/`), or None when
    $OESPEC_NO_CACHE is set."""
    if os.environ.get(DISABLE_ENV):
        return None
    return BuildCache(Path(root) / "build" / "oespec-cache" / kind)
