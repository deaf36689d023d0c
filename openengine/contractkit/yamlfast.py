"""The located loader's fast path: compose a plain YAML document from libyaml's events.

The pure-Python parser that defines the loader's behaviour (YAML 1.2, every error located) costs
most of a registry check; libyaml, through PyYAML's C extension, reads the same document about
ten times faster. This path takes only documents where the two cannot disagree on the result: one
document of mappings, sequences and scalars, without tags, anchors, aliases, directives or merge
keys, no deeper than the loader allows. Scalars are resolved with YAML 1.2's core rules, as the
full loader resolves them. For anything else (a syntax error included) it answers None and the
caller parses with the full loader, which reports exactly what it always reported.
"""

from __future__ import annotations

import re

from openengine.contractkit.locations import Loc

_PREFIX = "tag:yaml.org,2002:"
# YAML 1.2 core schema resolution of plain scalars, in the order the full loader tries them
# (keyed by first character there; the first pattern that matches wins).
_RESOLVERS: tuple[tuple[str, re.Pattern], ...] = (
    ("bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")),
    ("float", re.compile(r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                             |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
                             |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
                             |[-+]?\.(?:inf|Inf|INF)
                             |\.(?:nan|NaN|NAN))$""", re.X)),
    ("int", re.compile(r"""^(?:[-+]?0b[0-1_]+
                           |[-+]?0o?[0-7_]+
                           |[-+]?[0-9_]+
                           |[-+]?0x[0-9a-fA-F_]+)$""", re.X)),
    ("merge", re.compile(r"^<<$")),
    ("null", re.compile(r"^(?:~|null|Null|NULL|)$")),
    ("timestamp", re.compile(r"""^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}
                                 |[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}
                                  (?:[Tt]|[\ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?
                                  (?:[\ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)$""", re.X)),
    ("value", re.compile(r"^=$")),
)
_FIRST = {"bool": "tTfF", "float": "-+0123456789.", "int": "-+0123456789", "merge": "<",
          "null": "~nN", "timestamp": "0123456789", "value": "="}


def resolve_plain(value: str) -> str:
    """The tag YAML 1.2's core schema gives a plain (unquoted, untagged) scalar."""
    first = value[:1]
    for name, pattern in _RESOLVERS:
        if (first in _FIRST[name] if first else name == "null") and pattern.match(value):
            return _PREFIX + name
    return _PREFIX + "str"


# A block scalar header with a comment glued to it (`|#note`): libyaml reads it, the full parser
# refuses it, so such a document is left to the full parser.
_GLUED_HEADER_COMMENT = re.compile(r"[|>][-+0-9]*#")


class _Unsupported(Exception):
    """The document needs the full loader."""


def compose(text: str, max_depth: int, max_nodes: int, scalar_value, nodes):
    """The located tree of `text`, or None when the full loader must read it. `scalar_value(tag,
    text)` turns a resolved scalar into its value; `nodes` is the (YMap, YScalar, YSeq) classes of
    `openengine.contractkit.yamlsource`, passed in so that module alone imports this one."""
    try:
        from yaml import _yaml
        from yaml import events as ev
    except ImportError:   # PyYAML without libyaml: the full loader does everything
        return None
    YMap, YScalar, YSeq = nodes

    if _GLUED_HEADER_COMMENT.search(text):
        return None
    parser = _yaml.CParser(text)
    budget = [max_nodes]

    def nxt():
        return parser.get_event()

    def node(event, depth: int):
        budget[0] -= 1
        if budget[0] < 0 or depth > max_depth or getattr(event, "anchor", None) is not None:
            raise _Unsupported
        loc = Loc(event.start_mark.line + 1, event.start_mark.column + 1)
        if isinstance(event, ev.ScalarEvent):
            if event.tag is not None:
                raise _Unsupported
            plain, _quoted = event.implicit
            if plain and not event.value:
                raise _Unsupported   # an empty value: the parsers place it differently
            tag = resolve_plain(event.value) if plain else _PREFIX + "str"
            return YScalar(scalar_value(tag, event.value), event.value, loc, tag)
        if isinstance(event, ev.SequenceStartEvent):
            if event.tag is not None:
                raise _Unsupported
            items = []
            while not isinstance(following := nxt(), ev.SequenceEndEvent):
                items.append(node(following, depth + 1))
            return YSeq(items, loc)
        if isinstance(event, ev.MappingStartEvent):
            if event.tag is not None:
                raise _Unsupported
            entries, key_locs, duplicates = {}, {}, []
            while not isinstance(key_event := nxt(), ev.MappingEndEvent):
                if not isinstance(key_event, ev.ScalarEvent) or key_event.anchor is not None \
                        or key_event.tag is not None or key_event.value == "<<":
                    raise _Unsupported
                key = key_event.value
                key_loc = Loc(key_event.start_mark.line + 1, key_event.start_mark.column + 1)
                value = node(nxt(), depth + 1)
                if key in entries:
                    duplicates.append((key, key_loc, key_locs[key]))
                    continue
                entries[key] = value
                key_locs[key] = key_loc
            return YMap(entries, key_locs, loc, duplicates)
        raise _Unsupported   # an alias

    try:
        if not isinstance(nxt(), ev.StreamStartEvent):
            return None
        start = nxt()
        if not isinstance(start, ev.DocumentStartEvent) or start.version is not None or start.tags:
            return None
        root = node(nxt(), 0)
        if not isinstance(nxt(), ev.DocumentEndEvent) or not isinstance(nxt(), ev.StreamEndEvent):
            return None
        return root
    except _Unsupported:
        return None
    except Exception:   # libyaml's error, or anything it found odd: the full loader decides
        return None
