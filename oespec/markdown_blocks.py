"""The block structure of a Markdown page, as CommonMark reads it (markdown-it-py).

The spec scanner and the generated-region scanner both treat what a fence holds as text: a
requirement id or a marker shown as an example is neither a requirement nor a region. The spec
scanner reads requirements from paragraphs (list items' included).
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _block_parser():
    from markdown_it import MarkdownIt

    # Only the block structure is needed; inline parsing would be most of the work.
    return MarkdownIt("commonmark").disable(["inline", "text_join"])


def fenced_lines(text: str) -> frozenset[int]:
    """The 1-based numbers of the lines of `text` inside a fenced code block, the fences included
    (a fence left open runs to the end of the page)."""
    return frozenset(number + 1 for token in _block_parser().parse(text) if token.type == "fence" and token.map
                     for number in range(*token.map))


def paragraphs(text: str) -> list[tuple[int, str]]:
    """Each paragraph of `text` (in a list item or not): its first line's 0-based number and its
    lines, each stripped, joined by single spaces."""
    return [(token.map[0], " ".join(line.strip() for line in token.content.splitlines()))
            for token in _block_parser().parse(text) if token.type == "inline" and token.map]
