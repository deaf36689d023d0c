"""Fenced code blocks of a Markdown page, as CommonMark reads them (markdown-it-py).

The spec scanner and the generated-region scanner both treat what a fence holds as text: a
requirement id or a marker shown as an example is neither a requirement nor a region.
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
