"""Profile versions (`MAJOR.MINOR`) and version ranges (`>= 1.2, < 2.0`).

The registry writes prerequisites as ranges; the compiled contract carries the same text, so the
toolkit and the runtime parse and compare it with this one implementation.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

_VERSION_RE = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_COMPARATOR_RE = re.compile(r"^\s*(>=|<=|==|>|<)\s*([0-9]+\.[0-9]+)\s*$")
_COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}


@dataclass(frozen=True, order=True)
class Version:
    """A profile version, MAJOR.MINOR. Ordered numerically (1.10 > 1.9)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> "Version":
        match = _VERSION_RE.match(str(text).strip())
        if not match:
            raise ValueError(f"{text!r} is not a MAJOR.MINOR version")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True)
class VersionRange:
    """A conjunction of comparators such as `>= 1.2, < 2.0`."""

    comparators: tuple[tuple[str, Version], ...]

    @classmethod
    def parse(cls, text: str) -> "VersionRange":
        comparators = []
        for part in str(text).split(","):
            match = _COMPARATOR_RE.match(part)
            if not match:
                raise ValueError(f"{part.strip()!r} is not a comparator like '>= 1.0'")
            comparators.append((match.group(1), Version.parse(match.group(2))))
        return cls(tuple(comparators))

    def contains(self, version: Version | tuple[int, int]) -> bool:
        if not isinstance(version, Version):
            version = Version(*version)
        return all(_COMPARE[op](version, bound) for op, bound in self.comparators)

    def __str__(self) -> str:
        return ", ".join(f"{op} {v}" for op, v in self.comparators)
