"""The proto3 JSON forms of scalar values, as regular expressions: integers written as strings
(with their range) and Timestamp strings.

Both the generated JSON Schemas (the toolkit's schema generator) and the Python validators
(`openengine.validate`) hold a document to these same expressions, so they agree on it.
A protobuf JSON parser is more lenient than the proto3 JSON mapping (Python's accepts `"1_000"`,
`"1e3"` and `"2026-1-5T1:2:3Z"`); the forms here are the mapping's. The expressions use only
syntax ECMA-262 and Python share, as JSON Schema `pattern` requires.
"""

from __future__ import annotations

import re
from functools import lru_cache

# RFC 3339 as proto3 JSON writes a Timestamp: a real calendar date (leap years included) from year
# 0001, a time of day with at most nine fractional digits, and `Z` or an offset within a day. On
# the first and last day of the Timestamp range (0001-01-01, 9999-12-31) only `Z`: an offset there
# can put the instant outside the range, which a pattern cannot compute.
_YEAR = "[0-9]{4}"
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
_DATE = (f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
         "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
         f"|{_LEAP_YEAR}-02-29)")
_TIME = "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?"
_OFFSET = "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
TIMESTAMP_PATTERN = f"^(?!0000)(?!(?:0001-01-01|9999-12-31)T[0-9:.]+[+-]){_DATE}{_TIME}{_OFFSET}$"


def _same_length(lo: str, hi: str) -> str:
    """Digit strings of one length from `lo` to `hi` (leading zeros included), `lo <= hi`."""
    if lo == hi:
        return lo
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    if lo[0] == hi[0]:
        return lo[0] + _group(_same_length(lo[1:], hi[1:]))
    rest = len(lo) - 1
    parts = []
    first, last = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * rest:
        parts.append(lo[0] + _group(_same_length(lo[1:], "9" * rest)))
        first += 1
    tail = None
    if hi[1:] != "9" * rest:
        tail = hi[0] + _group(_same_length("0" * rest, hi[1:]))
        last -= 1
    if first <= last:
        digits = str(first) if first == last else f"[{first}-{last}]"
        parts.append(f"{digits}[0-9]{{{rest}}}")
    if tail is not None:
        parts.append(tail)
    return _group("|".join(parts))


def _group(expression: str) -> str:
    return expression if len(expression) == 1 else f"(?:{expression})"


def _non_negative(lo: int, hi: int) -> str:
    """Decimal digits (no leading zeros, no sign) of the integers from `lo` to `hi`, 0 <= lo <= hi."""
    parts = []
    for length in range(len(str(lo)), len(str(hi)) + 1):
        first = max(lo, 10 ** (length - 1) if length > 1 else 0)
        last = min(hi, 10 ** length - 1)
        if first <= last:
            parts.append(_same_length(str(first), str(last)))
    return "|".join(parts)


@lru_cache(maxsize=None)
def integer_pattern(lo: int, hi: int) -> str:
    """An anchored expression for the integers from `lo` to `hi` written as a JSON string: decimal
    digits, leading zeros allowed, an optional `+`, and `-` for negative values (and `-0` where
    negative values are allowed at all)."""
    if lo > hi:
        raise ValueError(f"empty range {lo}..{hi}")
    branches = []
    if hi >= 0:
        branches.append(f"\\+?0*(?:{_non_negative(max(lo, 0), hi)})")
    if lo < 0:
        magnitudes = _non_negative(max(1, -hi), -lo)   # of the negative values, lo..min(hi, -1)
        zero = "|0" if hi >= 0 else ""
        branches.append(f"-0*(?:{magnitudes}{zero})")
    return "^(?:" + "|".join(branches) + ")$"


def matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text) is not None   # `re` keeps the compiled patterns
