"""A position in a source file, shared by the toolkit's findings and the descriptor model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Loc:
    """A 1-based position in a file. Line 0 means the whole file (no better position known)."""

    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        return f"{self.line}:{self.column}" if self.line else ""


NOWHERE = Loc()
