"""mkdocs hooks that join the hand-written spec and the generated reference into one site.

The docs dir is `spec/`; the pages `oespec generate` writes under `site/generated/` are added as if
they were in it, `oespec:NAME` navigation entries expand to the page lists of
`site/generated/nav.yml` (so a new profile or proto file needs no edit of mkdocs.yml), and the JSON
Schemas are published under `/schemas/` for clients in any language. Each numbered requirement gets
the anchor the generated pages link to; the dependency picture is drawn at build time by Graphviz
`dot`; table cells get wrap points and labels for narrow screens. Under `mkdocs serve` every
rebuild first regenerates the pages, so a registry edit shows up live; `make site` never writes
(`make check` says when what is committed is stale).

The repository root is the folder that holds the docs dir; tests point the docs dir elsewhere to
build a site from other inputs.
"""

from __future__ import annotations

import html
import logging
import re
import shutil
import subprocess
from pathlib import Path

import yaml
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.oespec")

GENERATED = Path("site") / "generated"
NAV_FILE = "nav.yml"
NAV_PREFIX = "oespec:"


def _generated_dir(config) -> Path:
    return Path(config["docs_dir"]).resolve().parent / GENERATED


def _expand(entries, lists: dict, where: str):
    out = []
    for entry in entries:
        if isinstance(entry, str) and entry.startswith(NAV_PREFIX):
            name = entry[len(NAV_PREFIX):]
            if name not in lists:
                raise PluginError(f"mkdocs.yml nav: {entry!r} names no page list of {where} "
                                  f"(known: {', '.join(sorted(lists)) or 'none'}); run `make generate`")
            out.extend(lists[name] or [])
        elif isinstance(entry, dict):
            out.append({title: _expand(value, lists, where) if isinstance(value, list) else value
                        for title, value in entry.items()})
        else:
            out.append(entry)
    return out


_serving = False


def on_startup(command: str, dirty: bool) -> None:
    global _serving
    _serving = command == "serve"


def _regenerate(root: Path) -> None:
    """Rewrite the generated pages (and generated regions) from the current registry and protos."""
    from oespec.check import run_rules
    from openengine.contractkit.rules import Severity
    from oespec.generate import GenerationError, write_outputs
    from oespec.generate_with_catalogues import plan
    from oespec.registry import SourceError, load_registry

    try:
        resolved = load_registry(root / "profiles.yaml", display_path="profiles.yaml")
    except SourceError as err:
        log.warning("profiles.yaml not regenerated: %s", err)
        return
    errors = [d for d in run_rules(resolved) if d.severity >= Severity.ERROR]
    if resolved.registry is None or errors:
        for d in errors[:10]:
            log.warning("%s:%s:%s: %s %s", d.path, d.line, d.column, d.rule_id, d.message)
        log.warning("the registry has errors; the site shows the pages generated last")
        return
    try:
        outputs = plan(resolved.registry, root, only=["proto", "docs"])
    except GenerationError as err:
        log.warning("pages not regenerated: %s", err)
        return
    docs = [o for o in outputs if not o.path.startswith("proto/")]
    for path in write_outputs(root, docs):
        log.info("regenerated %s", path)


def on_config(config):
    if _serving:
        _regenerate(Path(config["docs_dir"]).resolve().parent)
    nav_file = _generated_dir(config) / NAV_FILE
    if config["nav"] is None:
        return config
    lists = yaml.safe_load(nav_file.read_text(encoding="utf-8")) if nav_file.is_file() else {}
    lists = {**(lists or {}), "spec": unlisted_spec_pages(config["nav"], Path(config["docs_dir"]))}
    config["nav"] = _expand(config["nav"], lists, nav_file.as_posix())
    return config


def _named_pages(entries):
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            if isinstance(value, list):
                yield from _named_pages(value)
            elif isinstance(value, str) and not value.startswith(NAV_PREFIX):
                yield value


def unlisted_spec_pages(nav, docs_dir: Path) -> list[str]:
    """The pages of the docs dir (`spec/`) that the navigation names nowhere, in name order."""
    named = set(_named_pages(nav))
    pages = sorted(p.relative_to(docs_dir).as_posix() for p in docs_dir.rglob("*.md") if p.is_file())
    return [page for page in pages if page not in named]


# JSON Schemas published under /schemas/ for clients and editors in any language: the generated
# schemas of the proto3 JSON mapping, and the schema of profiles.yaml itself.
SCHEMA_SOURCES = (("schemas", "*.schema.json"), ("oespec/registry", "profiles.schema.json"))


def on_files(files: Files, config) -> Files:
    root = _generated_dir(config)
    if not root.is_dir():
        raise PluginError(f"{root}: no generated pages; run `make generate`")
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name == NAV_FILE or path.name.startswith("."):
            continue
        src_uri = path.relative_to(root).as_posix()
        if files.get_file_from_path(src_uri) is not None:
            raise PluginError(f"generated page {src_uri} has the same path as spec/{src_uri}; "
                              "rename the spec page")
        files.append(File.generated(config, src_uri, abs_src_path=str(path)))
    checkout = Path(config["docs_dir"]).resolve().parent
    for folder, pattern in SCHEMA_SOURCES:
        for path in sorted((checkout / folder).glob(pattern)):
            if files.get_file_from_path(f"schemas/{path.name}") is None:
                files.append(File.generated(config, f"schemas/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.generated_by is not None:
        return GENERATED_HEADER.sub("", markdown, count=1)
    from oespec.spec import parse_markdown

    found, _ = parse_markdown(markdown, page.file.src_uri)
    if not found:
        return markdown
    lines = markdown.split("\n")
    for req in found:
        lines[req.line - 1] = lines[req.line - 1].replace(
            f"**{req.id}**", f'<a id="{req.anchor}" class="oe-req" href="#{req.anchor}">**{req.id}**</a>', 1)
    return "\n".join(lines)


GENERATED_HEADER = re.compile(r"\A<!-- generated from profiles\.yaml[^\n]*-->\n+")


# ------------------------------------------------------------------------- dependency picture

MIN_SCALE = 0.62
DEPGRAPH = re.compile(r'<div class="oe-depgraph" data-dot="(?P<dot>[^"]+)"(?P<attrs>[^>]*)></div>')
SVG_LINK = re.compile(r'xlink:href="(?P<url>[^"]*)"')


def inline_svg(svg: str, link: "callable", attrs: str = "") -> str:
    """Graphviz's SVG made fit for inlining: no prolog, scalable to the column, links resolved."""
    svg = re.sub(r"<!--.*?-->\s*", "", svg[svg.index("<svg"):], flags=re.S)
    size = re.search(r'<svg width="(?P<w>[\d.]+)pt" height="(?P<h>[\d.]+)pt"', svg)
    if size:
        # Natural size at most, scaled down to the column but never below MIN_SCALE of it, so the
        # 14 pt names stay at least 11 px tall; past that the figure scrolls sideways (site.css).
        width = float(size["w"])
        svg = svg.replace(size[0], f'<svg class="oe-depgraph-svg" '
                                   f'style="max-width: {width:g}pt; min-width: {width * MIN_SCALE:.0f}pt"', 1)

    def one(m: re.Match) -> str:
        url = html.escape(link(html.unescape(m["url"])))
        return f'href="{url}" xlink:href="{url}"'

    return f'<figure class="oe-depgraph"{attrs}>{SVG_LINK.sub(one, svg)}</figure>'


def _depgraph(page_html: str, page, config, files: Files) -> str:
    """Each dependency picture of a page drawn by Graphviz `dot` from its DOT file; a missing `dot`
    or a failed layout stops the build."""
    where = page.file.src_uri
    dot = shutil.which("dot")

    def one(m: re.Match) -> str:
        source = _generated_dir(config) / m["dot"]
        if not source.is_file():
            raise PluginError(f"{where}: {m['dot']} is not generated; run `make generate`")
        if dot is None:
            raise PluginError(f"{where}: the dependency picture needs Graphviz `dot`; install Debian's "
                              "`graphviz` (`make setup` does when it may run apt-get)")
        proc = subprocess.run([dot, "-Tsvg"], input=source.read_text(encoding="utf-8"), capture_output=True,
                              text=True, timeout=60)
        if proc.returncode != 0:
            raise PluginError(f"{where}: dot failed: {proc.stderr.strip()}")

        def link(src_uri: str) -> str:
            target = files.get_file_from_path(src_uri)
            if target is None:
                raise PluginError(f"{where}: the dependency picture links to {src_uri}, which is not a page")
            return get_relative_url(target.url, page.url)

        return inline_svg(proc.stdout, link, m["attrs"])

    return DEPGRAPH.sub(one, page_html)


# ------------------------------------------------------------------------------- table labels

TABLE = re.compile(r"<table>.*?</table>", re.S)
HEADER_CELL = re.compile(r"<th[^>]*>(.*?)</th>", re.S)
ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
DATA_CELL = re.compile(r"<td(?=[\s>])")


MATRIX_TABLE = re.compile(r'(<div class="oe-matrix">\s*)<table>')


def label_cells(table: str) -> str:
    """Each `<td>` of a table of three or more columns gets `data-label` = the text of its
    column's header, and the table `data-stack` (site.css shows such a table as labelled blocks
    on a phone)."""
    labels = [" ".join(html.unescape(TAG.sub("", h)).split()) for h in HEADER_CELL.findall(table)]
    if len(labels) < 3:         # two columns fit a phone as they are
        return table
    table = "<table data-stack>" + table[len("<table>"):]

    def row(m: re.Match) -> str:
        cells = iter(labels)
        return "<tr>" + DATA_CELL.sub(lambda _: f'<td data-label="{html.escape(next(cells, ""))}"', m[1]) + "</tr>"

    return ROW.sub(row, table)


# An identifier in a table cell may wrap after a dot, underscore or slash (a hyphen already is a
# break opportunity), never inside a word: in a code span, and in a long word of the cell's text
# (`(ResponseOptions.return_output_logprobs)` in a description would otherwise widen its column).
CELL_CODE = re.compile(r"<code>([^<]*)</code>")
IDENTIFIER_BREAK = re.compile(r"(?<=[._/])(?=[^\s._/])")
CELL = re.compile(r"(<td\b[^>]*>)(.*?)(</td>)", re.S)
TAG = re.compile(r"(<[^>]+>)")
LONG_WORD = re.compile(r"[^\s<>&]{20,}")


def identifier_breaks(table: str) -> str:
    """`<wbr>` after each dot, underscore and slash inside the code spans of a table's cells and
    inside the long words of their text."""
    table = CELL_CODE.sub(lambda m: "<code>" + IDENTIFIER_BREAK.sub("<wbr>", m[1]) + "</code>", table)

    def text(part: str) -> str:
        return LONG_WORD.sub(lambda w: IDENTIFIER_BREAK.sub("<wbr>", w[0]), part)

    def cell(m: re.Match) -> str:
        parts = TAG.split(m[2])   # text and tags alternate; only the text is touched
        return m[1] + "".join(part if k % 2 else text(part) for k, part in enumerate(parts)) + m[3]

    return CELL.sub(cell, table)


def on_page_content(page_html: str, page, config, files) -> str:
    if "oe-depgraph" in page_html:
        page_html = _depgraph(page_html, page, config, files)
    # The profile matrix keeps its grid on a phone (it scrolls inside its frame): not labelled.
    page_html = MATRIX_TABLE.sub(r"\1<table data-matrix>", page_html)
    return TABLE.sub(lambda m: label_cells(identifier_breaks(m[0])), page_html)

