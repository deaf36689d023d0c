"""Generated regions in hand-written Markdown: rewritten in place, and every wrong marker located."""

from __future__ import annotations

import pytest

from oespec.generate import markers

KNOWN = {"profile-table": "| a |\n| --- |\n| 1 |", "limits:openengine.load": "limits body"}


def render(name):
    return KNOWN.get(name)


def test_rewrite_replaces_only_region_content():
    text = ("# Title\n\nbefore\n<!-- oespec:begin profile-table -->\nstale\n<!-- oespec:end profile-table -->\n"
            "after\n")
    out = markers.rewrite(text, "spec/x.md", render)
    assert out == ("# Title\n\nbefore\n<!-- oespec:begin profile-table -->\n\n| a |\n| --- |\n| 1 |\n\n"
                   "<!-- oespec:end profile-table -->\nafter\n")
    assert markers.rewrite(out, "spec/x.md", render) == out


def test_two_regions_and_fenced_examples():
    text = ("<!-- oespec:begin profile-table -->\n<!-- oespec:end profile-table -->\n"
            "```markdown\n<!-- oespec:begin not-a-region -->\n```\n"
            "<!-- oespec:begin limits:openengine.load -->\nold\n<!-- oespec:end limits:openengine.load -->\n")
    out = markers.rewrite(text, "spec/x.md", render)
    assert "limits body" in out and "old" not in out
    assert "<!-- oespec:begin not-a-region -->\n```" in out


@pytest.mark.parametrize("text, rule, line", [
    ("a\n<!-- oespec:begin no-such-region -->\n<!-- oespec:end no-such-region -->\n", markers.UNKNOWN_REGION, 2),
    ("a\nb\n<!-- oespec:begin profile-table -->\nbody\n", markers.UNCLOSED, 3),
    ("<!-- oespec:end profile-table -->\n", markers.UNOPENED, 1),
    ("<!-- oespec:begin profile-table -->\n<!-- oespec:begin limits:openengine.load -->\n"
     "<!-- oespec:end limits:openengine.load -->\n<!-- oespec:end profile-table -->\n", markers.NESTED, 2),
    ("<!-- oespec:begin profile-table -->\n\n<!-- oespec:end limits:openengine.load -->\n", markers.MISMATCHED, 3),
    ("x\n<!-- oespec:begn profile-table -->\n", markers.MALFORMED, 2),
    ("x\n<!-- oespec:begin profile-table --> trailing\n", markers.MALFORMED, 2),
    ("<!-- oespec:begin profile-table -->\n<!-- oespec:end profile-table -->\n"
     "<!-- oespec:begin profile-table -->\n<!-- oespec:end profile-table -->\n", markers.REPEATED, 3),
])
def test_wrong_markers_are_errors_with_file_and_line(text, rule, line):
    with pytest.raises(markers.MarkerError) as caught:
        markers.rewrite(text, "spec/page.md", render)
    found = [(d.path, d.line, d.rule_id) for d in caught.value.diagnostics]
    assert ("spec/page.md", line, rule) in found
    assert f"spec/page.md:{line}:" in str(caught.value)
