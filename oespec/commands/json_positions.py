"""Positions in JSON text: where each value starts, and where each key is.

`oespec validate` reports violations at the line of the offending key. The standard `json`
module gives no positions, so this small scanner walks the text once (after `json` has accepted
it) and maps each path to its (line, column). Keys are normalised to proto field names, so a
violation path such as `generation.max_logprobs` finds `"maxLogprobs"` as well.
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any, Iterator

_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
_WS = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()


def snake(key: str) -> str:
    return _CAMEL.sub(lambda m: "_" + m.group(1).lower(), key)


class _Positions:
    def __init__(self, text: str):
        self.line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    def at(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1


def iter_values(text: str) -> Iterator[tuple[int, Any, dict[str, tuple[int, int]]]]:
    """Each JSON value of `text` (one per line, or concatenated like grpcurl prints a stream):
    (line of its start, the value, path -> (line, column) of every key in it).
    Raises ValueError with a line and column when the text is not JSON."""
    pos = _Positions(text)
    i = _WS.match(text, 0).end()
    while i < len(text):
        try:
            value, end = _decoder.raw_decode(text, i)
        except json.JSONDecodeError as err:
            raise ValueError(f"{err.msg} at line {err.lineno} column {err.colno}", err.lineno, err.colno) from None
        keys: dict[str, tuple[int, int]] = {}
        _scan(text, i, "", keys, pos)
        yield pos.at(i)[0], value, keys
        i = _WS.match(text, end).end()


def _scan(text: str, i: int, path: str, keys: dict, pos: _Positions) -> int:
    """Walk the value starting at `i`, recording key positions; return the offset after it."""
    i = _WS.match(text, i).end()
    ch = text[i]
    if ch == "{":
        i = _WS.match(text, i + 1).end()
        if text[i] == "}":
            return i + 1
        while True:
            i = _WS.match(text, i).end()
            key, end = _decoder.raw_decode(text, i)
            child = f"{path}.{snake(key)}" if path else snake(key)
            keys.setdefault(child, pos.at(i))
            i = _WS.match(text, end).end() + 1          # past ':'
            i = _scan(text, i, child, keys, pos)
            i = _WS.match(text, i).end()
            if text[i] == ",":
                i += 1
                continue
            return i + 1                                 # past '}'
    if ch == "[":
        i = _WS.match(text, i + 1).end()
        if text[i] == "]":
            return i + 1
        index = 0
        while True:
            child = f"{path}[{index}]"
            keys.setdefault(child, pos.at(_WS.match(text, i).end()))
            i = _scan(text, i, child, keys, pos)
            i = _WS.match(text, i).end()
            if text[i] == ",":
                i += 1
                index += 1
                continue
            return i + 1
    _, end = _decoder.raw_decode(text, i)
    return end


def locate(keys: dict[str, tuple[int, int]], path: str) -> tuple[int, int] | None:
    """The position of `path`, or of its nearest enclosing key that exists."""
    candidate = path
    while candidate:
        if candidate in keys:
            return keys[candidate]
        single = re.sub(r"^([a-z_]+)\[0\]", r"\1", candidate)   # `model_info[0]` given as one object
        if single != candidate and single in keys:
            return keys[single]
        cut = max(candidate.rfind("."), candidate.rfind("["))
        candidate = candidate[:cut] if cut > 0 else ""
    return None
