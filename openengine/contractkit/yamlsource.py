"""The located loader: read a YAML (or JSON) file into a tree of located nodes.

The registry (`profiles.yaml`), the reference engine's configuration and the conformance
runner's expected-failures file are all read with it, so every input file gets the same
file:line:column errors.

Every mapping, sequence and scalar keeps its 1-based line and column, so each later stage can point
at the exact key or value it is unhappy with. Duplicate keys are collected here (YAML parsers
usually keep the last one silently), and anything the parser rejects becomes a `SourceError` with a
location: this stage never lets another exception escape.
"""

from __future__ import annotations

import functools
import gc
import io
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Union

from openengine.contractkit.locations import Loc

MAX_DEPTH = 64
# Aliases let a few lines expand into an exponential tree ("billion laughs"); a real registry is a
# few thousand nodes, so anything far beyond this is refused rather than expanded.
MAX_NODES = 200_000


class SourceError(Exception):
    """The file cannot be used at all: missing, unreadable, or not YAML. Exit status 2."""

    def __init__(self, path: str, loc: Loc, message: str, hint: str = ""):
        super().__init__(f"{path}:{loc}: {message}" if loc.line else f"{path}: {message}")
        self.path = path
        self.loc = loc
        self.message = message
        self.hint = hint


@dataclass
class YScalar:
    value: Any            # str, int, float, bool or None, resolved as YAML 1.2 does
    raw: str              # the source text, so `version: 1.10` can be read as "1.10", not 1.1
    loc: Loc
    tag: str = ""

    def plain(self) -> Any:
        return self.value


@dataclass
class YSeq:
    items: list["YNode"]
    loc: Loc

    def plain(self) -> list:
        return [item.plain() for item in self.items]


@dataclass
class YMap:
    entries: dict[str, "YNode"]
    key_locs: dict[str, Loc]
    loc: Loc
    # Keys seen more than once: (key, location of the repeat, location of the first).
    duplicates: list[tuple[str, Loc, Loc]] = field(default_factory=list)

    def plain(self) -> dict:
        return {key: node.plain() for key, node in self.entries.items()}

    def get(self, key: str) -> "YNode | None":
        return self.entries.get(key)

    def key_loc(self, key: str) -> Loc:
        return self.key_locs.get(key, self.loc)

    def value_loc(self, key: str) -> Loc:
        node = self.entries.get(key)
        return node.loc if node is not None else self.loc


YNode = Union[YScalar, YSeq, YMap]


@dataclass
class SourceFile:
    path: str
    text: str
    root: YNode

    def walk_duplicates(self) -> Iterator[tuple[str, Loc, Loc]]:
        yield from _walk_duplicates(self.root)


def _walk_duplicates(node: YNode) -> Iterator[tuple[str, Loc, Loc]]:
    if isinstance(node, YMap):
        yield from node.duplicates
        for child in node.entries.values():
            yield from _walk_duplicates(child)
    elif isinstance(node, YSeq):
        for child in node.items:
            yield from _walk_duplicates(child)


def _loc(node) -> Loc:
    mark = node.start_mark
    return Loc(mark.line + 1, mark.column + 1)


def _scalar_value(node) -> Any:
    """The value of a scalar node as YAML 1.2 reads it: null, booleans, integers and floats by
    ruamel's own constructor; the text for every other tag (a timestamp stays text) and for a
    scalar that does not parse as its tag says."""
    if node.tag.rpartition(":")[2] not in ("null", "bool", "int", "float"):
        return node.value
    constructor = _constructor()
    try:   # the tag's own constructor, not construct_object: that one keeps every node it made
        return constructor.yaml_constructors[node.tag](constructor, node)
    except Exception:   # `!!int abc`: ruamel's constructors raise several types
        return node.value


@functools.cache
def _constructor():
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).constructor


def _convert(node, depth: int, path: str, counted: Iterator[int]) -> YNode:
    """`node` as a located node; `counted` numbers every node converted so far."""
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if next(counted) >= MAX_NODES:
        raise SourceError(path, _loc(node), f"the document expands to more than {MAX_NODES} nodes",
                          "write the values out instead of nesting aliases")
    if depth > MAX_DEPTH:
        raise SourceError(path, _loc(node), f"nesting deeper than {MAX_DEPTH} levels",
                          "flatten the document; the registry never needs this depth")
    if isinstance(node, ScalarNode):
        return YScalar(_scalar_value(node), node.value, _loc(node), node.tag or "")
    if isinstance(node, SequenceNode):
        return YSeq([_convert(item, depth + 1, path, counted) for item in node.value], _loc(node))
    if isinstance(node, MappingNode):
        entries: dict[str, YNode] = {}
        key_locs: dict[str, Loc] = {}
        duplicates: list[tuple[str, Loc, Loc]] = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise SourceError(path, _loc(key_node), "mapping keys must be plain scalars",
                                  "write the key as a simple word such as `name:`")
            key = str(key_node.value)
            if key == "<<":
                raise SourceError(path, _loc(key_node), "YAML merge keys (`<<`) are not supported",
                                  "write the merged keys out in full")
            if key in entries:
                duplicates.append((key, _loc(key_node), key_locs[key]))
                continue
            entries[key] = _convert(value_node, depth + 1, path, counted)
            key_locs[key] = _loc(key_node)
        return YMap(entries, key_locs, _loc(node), duplicates)
    raise SourceError(path, _loc(node), f"unsupported YAML node {type(node).__name__}")


def _position(text: str, offset: int) -> Loc:
    line = text.count("\n", 0, offset) + 1
    return Loc(line, offset - (text.rfind("\n", 0, offset) + 1) + 1)


# Anything outside YAML's printable set: tab, line breaks and printable Unicode.
_NOT_PRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _check_characters(text: str, path: str) -> None:
    found = _NOT_PRINTABLE.search(text)
    if found is not None:
        ch = found.group()
        what = "a NUL byte (U+0000)" if ch == "\x00" else f"the control character U+{ord(ch):04X}"
        raise SourceError(path, _position(text, found.start()), f"{what}: YAML does not allow it in a document",
                          "delete it (an editor may show it as a blank or a box); only tabs and line "
                          "breaks may appear among the control characters")


def _check_flow_depth(text: str, path: str) -> None:
    """Flow collections (`[...]`, `{...}`) nested past MAX_DEPTH, found before the parser recurses
    into them, and reported at the bracket that goes too deep."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:   # too few brackets to nest that deep
        return
    depth, quote, offset = 0, "", 0
    while offset < len(text):
        ch = text[offset]
        if quote:
            if ch == quote:
                quote = ""
        elif ch == "#" and (offset == 0 or text[offset - 1] in " \t\n"):
            end = text.find("\n", offset)
            offset = len(text) if end < 0 else end
            continue
        elif depth and ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise SourceError(path, _position(text, offset),
                                  f"nesting deeper than {MAX_DEPTH} levels of flow collections",
                                  "flatten the value; the registry never needs this depth (is a bracket unclosed?)")
        elif ch in "]}" and depth:
            depth -= 1
        offset += 1


def _alias_composer():
    """ruamel's composer, except that an alias (`*name`) is located where it is written, not at
    its anchor: a repeat made through an alias is reported at the repeat. Its content (and the
    locations inside it) stays the anchor's."""
    import copy

    from ruamel.yaml.composer import Composer
    from ruamel.yaml.events import AliasEvent

    class AliasLocatingComposer(Composer):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if not self.parser.check_event(AliasEvent):
                return super().compose_node(parent, index)
            mark = self.parser.peek_event().start_mark
            node = copy.copy(super().compose_node(parent, index))
            node.start_mark = mark
            return node

    return AliasLocatingComposer


def _compose(text: str) -> list:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)  # composing only: no comment gathering
    yaml.allow_duplicate_keys = True
    yaml.Composer = _alias_composer()
    # The node tree only grows while it is composed, and holds no cycles: the collector's full
    # passes over it would make reading a registry twice the size take more than twice as long.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return list(yaml.compose_all(io.StringIO(text)))
    finally:
        if collecting:
            gc.enable()


def _unterminated_quote(text: str, failed_line: int) -> Loc | None:
    """The opening quote of a quoted scalar, before `failed_line`, that does not close on its own
    line and is the cause of the failure: closing it there lets the parser get past `failed_line`.
    (A quoted scalar may legally span lines, so an open quote alone proves nothing.)"""
    lines = text.split("\n")
    candidate = None
    for number, line in enumerate(lines[: max(failed_line - 1, 0)], 1):
        for match in re.finditer(r"""(?:^\s*-\s+|:\s+|^\s*)(["'])""", line):
            quote, rest = match.group(1), line[match.end():]
            closed = (rest.replace('\\"', "").count('"') % 2 == 1) if quote == '"' else \
                (rest.replace("''", "").count("'") % 2 == 1)
            candidate = None if closed else (number, match.end(), quote)
            break
    if candidate is None:
        return None
    number, column, quote = candidate
    repaired = lines[: number - 1] + [lines[number - 1] + quote] + lines[number:]
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        _compose("\n".join(repaired))
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        if mark is None or mark.line + 1 <= failed_line:
            return None
    except (YAMLError, ValueError, TypeError, AttributeError, IndexError, KeyError, UnicodeError, RecursionError):
        return None
    return Loc(number, column)


def parse_text(text: str, path: str = "<string>") -> SourceFile:
    """Parse YAML text into located nodes, or raise `SourceError` (and nothing else).

    Lexical problems are located where they are, not where the parser gives up: a forbidden
    character at its own position, runaway flow nesting at the bracket that goes too deep, and a
    quoted string that never closes at its opening quote."""
    _check_characters(text, path)
    _check_flow_depth(text, path)
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        nodes = _compose(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        loc = Loc(mark.line + 1, mark.column + 1) if mark is not None else Loc(1, 1)
        problem = err.problem or err.context or "invalid YAML"
        if "quoted scalar" in str(err.context or "") and err.context_mark is not None:
            opened = Loc(err.context_mark.line + 1, err.context_mark.column + 1)
        else:
            opened = _unterminated_quote(text, loc.line)
        if opened is not None and opened.line < loc.line:
            raise SourceError(path, opened, f"YAML syntax error: the quoted string that opens here is not closed on its line; the "
                              f"YAML parser then failed at line {loc.line}: {problem}",
                              "close the quote on the same line (or remove it)") from None
        raise SourceError(path, loc, f"YAML syntax error: {problem}",
                          "fix the YAML syntax at this position") from None
    except (YAMLError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            UnicodeError, RecursionError) as err:
        raise SourceError(path, Loc(1, 1), f"YAML could not be read: {err}",
                          "check the file is valid UTF-8 YAML") from None
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        raise SourceError(path, Loc(1, 1), "the file is empty", "start from the documented layout")
    if len(nodes) > 1:
        raise SourceError(path, _loc(nodes[1]), "the file holds more than one YAML document",
                          "remove the `---` separator and keep a single document")
    try:
        root = _convert(nodes[0], 0, path, itertools.count())
    except RecursionError:
        raise SourceError(path, Loc(1, 1), "YAML aliases nest too deeply",
                          "write the values out instead of using aliases") from None
    return SourceFile(path, text, root)


def read_file(path: Path | str, display_path: str | None = None) -> SourceFile:
    """Read and parse a file; a missing or undecodable file is a `SourceError`."""
    shown = display_path or str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise SourceError(shown, Loc(), "no such file",
                          "pass the path of a registry file, e.g. profiles.yaml") from None
    except IsADirectoryError:
        raise SourceError(shown, Loc(), "is a directory, not a file", "pass the registry file itself") from None
    except OSError as err:
        raise SourceError(shown, Loc(), f"cannot be read: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SourceError(shown, Loc(line, column), "the file is not valid UTF-8",
                          "save the file as UTF-8") from None
    return parse_text(text, shown)
