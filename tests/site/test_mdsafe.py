"""Untrusted text becomes Markdown that renders as the same text, never as markup."""

from __future__ import annotations

import markdown
import pytest

from oespec.generate import mdsafe

from .htmlscan import injected, scan


def render(md_text: str) -> str:
    return markdown.markdown(md_text, extensions=["tables", "admonition", "def_list", "footnotes"])


HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[click](javascript:alert(1))",
    "![pixel](https://tracker.example/p.png)",
    "<https://example.org>",
    "&lt;script&gt;",
    "<!-- comment --> <style>body{}</style>",
]


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("escape", [mdsafe.inline, mdsafe.cell, mdsafe.block])
def test_hostile_text_renders_without_elements(text, escape):
    html = render(escape(text)) if escape is not mdsafe.cell else render(f"| h |\n| --- |\n| {escape(text)} |")
    page = scan(html)
    assert injected(html) == [] and page.comments == [], html
    # A written link survives only as a plain web link.
    assert all(a.get("href", "").startswith("https://") for tag, a in page.elements if tag == "a"), html
    if "<" in text:      # markup is shown as the text it was
        assert text in "".join(page.text)


def test_text_is_kept_readable():
    html = render(mdsafe.inline("a <b> & c"))
    assert "a &lt;b&gt; &amp; c" in html


def test_code_spans_are_kept_literal():
    html = render(mdsafe.inline("use `x<y>` here"))
    assert "<code>x&lt;y&gt;</code>" in html


def test_web_links_are_kept_but_never_as_images():
    html = render(mdsafe.inline("see [the spec](https://example.org/spec) and ![i](https://example.org/i.png)"))
    assert '<a href="https://example.org/spec">the spec</a>' in html
    assert "<img" not in html


def test_attribute_lists_cannot_form():
    text = mdsafe.block('Para { onclick="alert(1)" }')
    assert "{" not in text and "}" not in text


def test_pipes_do_not_split_table_cells():
    html = render(f"| a | b |\n| --- | --- |\n| {mdsafe.cell('x | y')} | z |")
    assert html.count("<td>") == 2


def test_block_keeps_paragraphs_and_defuses_block_syntax():
    html = render(mdsafe.block("# not a heading\n\nsecond\n\n    not code"))
    assert "<h1>" not in html and "<pre>" not in html
    assert html.count("<p>") == 3


def test_code_outgrows_backticks():
    assert render(mdsafe.code("a`b")).count("<code>") == 1
    assert "a`b" in render(mdsafe.code("a`b"))
