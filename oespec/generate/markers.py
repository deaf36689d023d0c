"""Generated regions inside hand-written Markdown, between two HTML comments on lines of their own:

    <!-- oespec:begin limits:openengine.load -->
    (generated; rewritten by `oespec generate`)
    <!-- oespec:end limits:openengine.load -->

Everything outside the markers is kept byte for byte; markers inside fenced code blocks are text.
Any wrong marker is an error at its file and line: a typo must never turn into a region that
silently stops updating.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from openengine.contractkit.diagnostics import Diagnostic
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from oespec.markdown_blocks import fenced_lines
from openengine.contractkit.rules import RuleCatalogue, RuleSpec

MALFORMED = "DOC001"
UNKNOWN_REGION = "DOC002"
UNCLOSED = "DOC003"
UNOPENED = "DOC004"
NESTED = "DOC005"
MISMATCHED = "DOC006"
REPEATED = "DOC007"
MARKER_RULES = RuleCatalogue("docs", (RuleSpec(rule_id, name, "docs", "markers", purpose, Severity.ERROR)
                                     for rule_id, name, purpose in (
    (MALFORMED, "marker-syntax", "a generated-region marker is `<!-- oespec:begin NAME -->` or "
                                 "`<!-- oespec:end NAME -->`"),
    (UNKNOWN_REGION, "marker-region", "a marker names a region the generators fill"),
    (UNCLOSED, "marker-closed", "every begin marker has its end marker"),
    (UNOPENED, "marker-opened", "every end marker follows its begin marker"),
    (NESTED, "marker-nesting", "generated regions do not nest"),
    (MISMATCHED, "marker-pair", "an end marker names the region its begin opened"),
    (REPEATED, "marker-once", "each region appears once per page"))))

_MARKER_RE = re.compile(r"^\s*<!--\s*oespec:(?P<kind>begin|end)\s+(?P<name>[A-Za-z0-9_.:/-]+)\s*-->\s*$")
# Anything that looks meant as a marker: an HTML comment whose first word starts with "oespec".
_CANDIDATE_RE = re.compile(r"<!--\s*oespec\b", re.IGNORECASE)


class MarkerError(Exception):
    """Markers of one or more files are wrong; `diagnostics` holds every finding."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(
            f"{d.path}:{d.line}:{d.column}: {d.rule_id} {d.message}" + (f" (hint: {d.hint})" if d.hint else "")
            for d in self.diagnostics))


def _diag(file: str, line: int, rule_id: str, message: str, hint: str) -> Diagnostic:
    return Diagnostic.at(file, Loc(line, 1), rule_id, Severity.ERROR, message, hint)


def has_markers(text: str) -> bool:
    return _CANDIDATE_RE.search(text) is not None


def scan(text: str, file: str, known: Callable[[str], bool]
         ) -> tuple[list[tuple[str, int, int]], list[Diagnostic]]:
    """The regions of a document, each (name, line of its begin marker, line of its end marker),
    and a finding for every wrong marker."""
    regions: list[tuple[str, int, int]] = []
    problems: list[Diagnostic] = []
    open_region: tuple[str, int] | None = None
    fenced = fenced_lines(text)
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if number in fenced or not _CANDIDATE_RE.search(line):
            continue
        marker = _MARKER_RE.match(line)
        if not marker:
            problems.append(_diag(file, number, MALFORMED, f"malformed generated-region marker: {line.strip()}",
                                  "write `<!-- oespec:begin NAME -->` or `<!-- oespec:end NAME -->` "
                                  "alone on its line"))
            continue
        kind, name = marker.group("kind"), marker.group("name")
        if kind == "begin":
            if open_region is not None:
                problems.append(_diag(file, number, NESTED,
                                      f"region {name!r} begins inside region {open_region[0]!r} "
                                      f"(begun at line {open_region[1]})",
                                      f"close {open_region[0]!r} first; regions cannot nest"))
                continue
            if not known(name):
                problems.append(_diag(file, number, UNKNOWN_REGION, f"unknown generated region {name!r}",
                                      "see the region names listed in site/README.md"))
            open_region = (name, number)
            continue
        if open_region is None:
            problems.append(_diag(file, number, UNOPENED, f"region {name!r} ends but was never begun",
                                  f"add `<!-- oespec:begin {name} -->` above, or remove this line"))
            continue
        begun_name, begun_line = open_region
        open_region = None
        if name != begun_name:
            problems.append(_diag(file, number, MISMATCHED,
                                  f"region {begun_name!r} (begun at line {begun_line}) is ended as {name!r}",
                                  f"end it with `<!-- oespec:end {begun_name} -->`"))
            continue
        if name in seen:
            problems.append(_diag(file, begun_line, REPEATED,
                                  f"region {name!r} already appears at line {seen[name]}",
                                  "show a region once per page; link to it elsewhere"))
            continue
        seen[name] = begun_line
        if known(name):
            regions.append((name, begun_line, number))
    if open_region is not None:
        problems.append(_diag(file, open_region[1], UNCLOSED, f"region {open_region[0]!r} is never ended",
                              f"add `<!-- oespec:end {open_region[0]} -->` after it"))
    return regions, problems


def rewrite(text: str, file: str, render: Callable[[str], str | None]) -> str:
    """`text` with every region's content replaced by `render(name)`; raises `MarkerError`.

    `render` returns the region's Markdown, or None for a name it does not know. The content is
    written between blank lines, so a table or list right after a marker still renders.
    """
    bodies: dict[str, str] = {}

    def known(name: str) -> bool:
        if name not in bodies:
            body = render(name)
            if body is None:
                return False
            bodies[name] = body
        return True

    regions, problems = scan(text, file, known)
    if problems:
        raise MarkerError(problems)
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    cursor = 0
    for name, begin, end in regions:
        out.extend(lines[cursor:begin])                 # up to and including the begin marker
        body = bodies[name].strip("\n")
        out.append("\n" + body + "\n\n" if body else "\n")
        cursor = end - 1                                 # the end marker and what follows
    out.extend(lines[cursor:])
    return "".join(out)
