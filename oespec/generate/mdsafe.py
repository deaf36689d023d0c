"""Untrusted text (registry descriptions, proto comments) turned into Markdown that cannot carry markup.

Anyone can open a pull request that edits `profiles.yaml` or a proto comment, and the site renders
that text. Markdown passes raw HTML through, so every value is escaped before it reaches a page:
`<`, `>` and `&` become entities (no element, no entity trick), `{`/`}` too (no attribute lists),
`[`/`]` (no link, no image), `|` too inside table cells; a written link survives only when its
target is an absolute http(s) or mailto URL, and never as an image. Code spans are kept as written: Markdown already shows their content
literally, and escaping it would show the entities instead.

The docs templates enforce this: their `finalize` refuses a plain `str`, so a value that did not
pass through one of these functions cannot reach a page (see `docs.environment`).
"""

from __future__ import annotations

import re

__all__ = ["Md", "inline", "block", "cell", "code", "fence", "raw", "anchor_id", "SAFE_LINK"]


class Md(str):
    """Markdown that is safe to emit as is: escaped text, or markup the generator wrote itself."""


_CODE_SPAN_RE = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_LINK_RE = re.compile(r"\[(?P<text>[^\[\]\n]*)\]\((?P<url>[^()\s]*)\)")
# Registry text is shown on several pages, so a relative link would resolve differently on each:
# only absolute web and mail links are kept.
SAFE_LINK = re.compile(r"^(?:https?://[\w.-]+(?:[/?#][^\s<>\"'`]*)?|mailto:[^\s<>\"'`]+)$", re.IGNORECASE)

# Entity tables as `str.translate` maps: one C loop per text instead of a Python step per character
# (escaping is most of the time spent rendering the reference pages).
_TEXT_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "{": "&#123;", "}": "&#125;"})
_CELL_ENTITIES = {**_TEXT_ENTITIES, ord("|"): "&#124;"}


def _escape_text(text: str, table: dict[int, str]) -> str:
    """Escape text that is not a kept link: brackets too, so no link or image can form."""
    return text.translate(table).replace("[", "\\[").replace("]", "\\]")


def _escape_prose(text: str, table: dict[int, str]) -> str:
    """Escape text outside code spans; keep well-formed, safe links."""
    out: list[str] = []
    pos = 0
    for match in _LINK_RE.finditer(text):
        before = text[pos:match.start()]
        url = match.group("url")
        label = match.group("text").translate(table)
        if SAFE_LINK.match(url) and label.strip():
            # `![..](..)` would be an image fetched from anywhere: the `!` stays text.
            bang = before.endswith("!")
            out.append(_escape_text(before[:-1] if bang else before, table) + ("&#33;" if bang else ""))
            out.append(f"[{label}]({url.translate(table)})")
        else:
            # Show what was written, but as text: `javascript:` and friends never become a link.
            out.append(_escape_text(before + match.group(0), table))
        pos = match.end()
    out.append(_escape_text(text[pos:], table))
    return "".join(out)


def _escape(text: str, table: dict[int, str]) -> str:
    out: list[str] = []
    pos = 0
    for match in _CODE_SPAN_RE.finditer(text):
        out.append(_escape_prose(text[pos:match.start()], table))
        # Tables do not split cells at pipes inside code spans: the span stays as written.
        out.append(match.group(0))
        pos = match.end()
    out.append(_escape_prose(text[pos:], table))
    return "".join(out)


def inline(text: object) -> Md:
    """One line of prose (newlines folded into spaces)."""
    return Md(_escape(" ".join(str(text or "").split()), _TEXT_ENTITIES))


def cell(text: object) -> Md:
    """Prose for a table cell: one line, pipes escaped."""
    return Md(_escape(" ".join(str(text or "").split()), _CELL_ENTITIES))


def block(text: object) -> Md:
    """Paragraphs of prose, blank lines kept as paragraph breaks, each paragraph folded.

    Every paragraph becomes plain paragraph text: indentation and leading markers that would
    start a code block, a heading or a raw HTML block lose their meaning.
    """
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", str(text or "").strip())]
    escaped = [_escape(para, _TEXT_ENTITIES) for para in paragraphs if para]
    return Md("\n\n".join("\\" + e if re.match(r"^(#|[-*+] |\d+[.)] |=+$|-+$|!!!|\?\?\?|:::)", e) else e
                           for e in escaped))


def code(text: object) -> Md:
    """A code span showing `text` literally, whatever backticks it contains."""
    value = " ".join(str(text if text is not None else "").split())
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or not value else ""
    return Md(f"{fence}{pad}{value}{pad}{fence}")


def fence(text: object, lang: str = "") -> Md:
    """A fenced code block showing `text` literally; the fence outgrows any backtick run inside."""
    value = str(text if text is not None else "").rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`{3,}", value)), default=2)
    marker = "`" * (longest + 1)
    return Md(f"{marker}{re.sub(r'[^a-z0-9_+-]', '', lang)}\n{value}\n{marker}")


def anchor_id(name: str) -> str:
    """An anchor id for a name: its lower-case letters and digits, other runs as hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def raw(markup: str) -> Md:
    """Markup the generator itself wrote (tables, links to its own pages): emitted unchanged."""
    return Md(markup)
