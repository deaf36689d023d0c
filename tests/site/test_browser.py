"""The site as a reader meets it: a real headless Chromium on the built site, served on 127.0.0.1.

Each catalogue's tests share a worker and one browser, and each catalogue's site is built once:
the repository's own and a generated catalogue of fifteen profiles (tests/site/conftest.py). At
1280 px and at 390 px every checked page has a meaningful title, its main column neither
overflows nor clips content, and the dependency picture's boxes all link to their profile's page. The reader's path (the
navigation to a profile, its limits table, the search box) is followed too. Every request the
browser makes must go to the local server: the site works offline. Screenshots are kept in
build/screenshots/ (one folder per catalogue) for a person to look at; CI uploads the folder.
"""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import SCREENSHOTS
from .htmlscan import scan

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                                "(.ci/run installs it: apt-get install -y chromium)"),
]

PROFILE = "openengine.load"
RPC = "WatchLoad"
SITE_NAME = "OpenEngine profiles"
WIDTHS = {"desktop": 1280, "phone": 390}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _serving(directory):
    handler = functools.partial(_Quiet, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@dataclass(frozen=True)
class Catalogue:
    """A built site being served, and the registry it was generated from."""

    name: str
    url: str
    registry: object


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def server(built_site):
    with _serving(built_site) as url:
        yield url


@pytest.fixture(scope="module", params=["repository", "fifteen"])
def catalogue(request):
    """The repository's site, then the fifteen-profile one (tests are grouped by it, so each
    site is served once)."""
    from oespec.registry import load_registry

    if request.param == "repository":
        registry = request.getfixturevalue("registry")
        with _serving(request.getfixturevalue("built_site")) as url:
            yield Catalogue("repository", url, registry)
    else:
        site = request.getfixturevalue("fifteen_site")
        registry = load_registry(site.parent / "profiles.yaml").registry
        assert registry is not None and len(registry.profiles) == 15
        with _serving(site) as url:
            yield Catalogue("fifteen", url, registry)


# The search index every page hands to a web worker on load, where the theme builds its search
# (a tenth of a CPU-second a page): loaded only for the test that searches.
SEARCH_INDEX = "search/search_index.json"


@contextlib.contextmanager
def _open_page(browser, url: str, width: int, *, search: bool = False):
    """A page in a fresh browser context of the given width that may only fetch from `url`."""
    context = browser.new_context(viewport={"width": width, "height": 900 if width > 600 else 844})
    elsewhere: list[str] = []

    def only_local(route):
        if route.request.url == url + SEARCH_INDEX and not search:
            route.abort()
        elif route.request.url.startswith(url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        yield page
    finally:
        context.close()
    assert elsewhere == [], f"the site fetched from elsewhere: {elsewhere}"


@pytest.fixture
def page(browser, server):
    with _open_page(browser, server, WIDTHS["desktop"]) as opened:
        yield opened


def _shot(page, name: str, folder: str = "repository", **kwargs) -> None:
    out = SCREENSHOTS / folder
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / f"{name}.png"), **kwargs)


def _heading(page) -> str:
    return page.locator("article h1").first.inner_text().rstrip("¶ \n")


def test_reader_finds_a_profile_its_limits_and_an_rpc(browser, server, registry):
    with _open_page(browser, server, WIDTHS["desktop"], search=True) as page:
        _find_a_profile_its_limits_and_an_rpc(page, server, registry)


def _find_a_profile_its_limits_and_an_rpc(page, server, registry):
    profile = registry.profile(PROFILE)
    assert profile is not None and profile.limits and any(r.method == RPC for r in profile.rpcs)
    first_limit = profile.limits[0].name

    page.goto(server)
    assert "OpenEngine" in _heading(page)
    assert page.get_by_role("link", name="Profiles").first.is_visible()
    _shot(page, "01-home")

    # Navigation: the Profiles tab, then the profile in the side navigation.
    page.locator(".md-tabs").get_by_role("link", name="Profiles").click()
    page.wait_for_url("**/reference/profiles/")
    page.locator(".md-sidebar--primary").get_by_role("link", name=PROFILE, exact=True).click()
    page.wait_for_url(f"**/reference/profiles/{profile.short_name}/")
    assert _heading(page) == PROFILE

    # The limits table: one row per limit, with type, default, range, unit and since.
    limits = page.locator("article table").filter(has=page.locator("th", has_text="Default"))
    assert limits.count() == 1
    headers = [h.strip() for h in limits.locator("th").all_inner_texts()]
    assert headers[:5] == ["Limit", "Type (unit)", "Default", "Range", "Since"]
    rows = limits.locator("tbody tr")
    assert rows.count() == len(profile.limits)
    first_row = [c.strip() for c in rows.first.locator("td").all_inner_texts()]
    assert first_row[0] == first_limit and first_row[1].startswith(str(profile.limits[0].type))
    page.evaluate("document.getElementById('limits').scrollIntoView()")
    _shot(page, "02-profile-limits")

    # Search: type the RPC's name, pick the result, land on its section.
    page.locator("input.md-search__input").click()
    page.keyboard.type(RPC, delay=20)       # as a person types: the theme searches on key events
    results = page.locator(".md-search-result__item")
    results.first.wait_for()
    hit = page.locator(".md-search-result__link").filter(has_text=RPC).first
    hit.wait_for()
    _shot(page, "03-search")
    hit.click()
    page.wait_for_load_state()
    assert RPC in page.locator("article").inner_text()
    _shot(page, "04-search-result")


# The pages checked at both widths in every catalogue: (screenshot name, path, expected heading).
PAGES = [
    ("home", "", "OpenEngine"),
    ("profile", "reference/profiles/load/", PROFILE),
    ("matrix", "reference/profiles/", "Profiles"),
    ("dependencies", "reference/profiles/dependencies/", "Profile dependencies"),
    ("message", "reference/protocol/load/", "load.proto"),
    ("requirement-checks", "reference/requirement-checks/", "Requirement checks"),
]
# Checked in the repository's catalogue only: their content does not grow with the profiles.
MORE_PAGES = [
    ("core", "reference/profiles/core/", "openengine.core"),
    ("capabilities", "reference/protocol/capabilities/", "capabilities.proto"),
    ("requirements", "reference/requirements/", "Requirements index"),
    ("cases", "reference/conformance-cases/", "Conformance cases"),
    ("check-rules", "reference/check-rules/", "Registry check rules"),
    ("validator-rules", "reference/validator-rules/", "Validator rules"),
]
FULL_PAGE = ("matrix", "dependencies", "message")

# Layout facts of the open page: the main column's overflow (`.md-content`: the article and the
# margins the theme lets tables and code blocks reach into), each table against its frame, and
# content the reader cannot see: an element that hides what overflows it (overflow hidden or
# clipped, an ellipsis) while its content is larger, or an element reaching outside what shows it
# (the main column, or the nearest scrolling frame) unless that frame is one of `scrollable`.
LAYOUT = """(scrollable) => {
  const main = document.querySelector('.md-content');
  const column = main.getBoundingClientRect();
  const hides = v => v === 'hidden' || v === 'clip';
  const scrolls = v => v === 'auto' || v === 'scroll';
  const describe = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
      ' "' + (el.innerText || el.textContent || '').trim().slice(0, 40) + '"';
  const clipped = [], outside = [];
  for (const el of main.querySelectorAll('*')) {
    const s = getComputedStyle(el);
    if (s.display === 'none' || s.visibility === 'hidden') continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if ((hides(s.overflowX) && el.scrollWidth > el.clientWidth + 1) ||
        (hides(s.overflowY) && el.scrollHeight > el.clientHeight + 1) ||
        (s.textOverflow === 'ellipsis' && el.scrollWidth > el.clientWidth + 1)) clipped.push(describe(el));
    let frame = el.parentElement;
    while (frame && frame !== main && !scrolls(getComputedStyle(frame).overflowX)) frame = frame.parentElement;
    if (frame === main) frame = null;
    const edge = frame ? frame.getBoundingClientRect() : column;
    if ((r.right > edge.right + 1 || r.left < edge.left - 1) &&
        !(frame && scrollable.some(selector => frame.closest(selector))))
      outside.push(describe(el) + ' in ' + (frame ? describe(frame) : 'the main column'));
  }
  const tables = [...main.querySelectorAll('table')].map(t => {
    const wrap = t.closest('.md-typeset__scrollwrap') || t.parentElement;
    return {matrix: t.hasAttribute('data-matrix'), width: t.scrollWidth, room: wrap.clientWidth,
            head: t.querySelector('th') ? t.querySelector('th').innerText : ''};
  });
  return {mainScroll: main.scrollWidth, mainWidth: main.clientWidth,
          docScroll: document.documentElement.scrollWidth, viewport: window.innerWidth,
          clipped, outside, tables};
}"""
# What may scroll sideways inside its own frame on a phone: the profile matrix (it keeps its grid)
# and code blocks. The dependency picture fits the column whole. At 1280 px nothing may.
PHONE_SCROLLABLE = [".oe-matrix", "pre"]

# Words of table cells that the layout broke inside the word (between two letters or digits),
# as `before|after`: a name wraps after a dot, underscore or slash, or at a hyphen, never mid-word.
MID_WORD_BREAKS = """() => [...document.querySelectorAll('article td')].flatMap(td => {
  const out = [], walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const whole = document.createRange(); whole.selectNodeContents(n);
    if (whole.getClientRects().length < 2) continue;    // on one line: nothing broke inside it
    const text = n.textContent; let previous = null;
    for (let i = 0; i < text.length; i++) {
      const range = document.createRange(); range.setStart(n, i); range.setEnd(n, i + 1);
      const box = range.getClientRects()[0]; if (!box) continue;
      if (previous !== null && box.top > previous + 2 && /[A-Za-z0-9]/.test(text[i - 1]) && /[A-Za-z0-9]/.test(text[i]))
        out.push(text.slice(Math.max(0, i - 12), i) + '|' + text.slice(i, i + 8));
      previous = box.top;
    }
  }
  return out;
})"""


def _check_layout(page, where) -> None:
    layout = page.evaluate(LAYOUT, PHONE_SCROLLABLE if where[1] == "phone" else [])
    assert layout["mainScroll"] <= layout["mainWidth"] + 1, (where, layout["mainScroll"], layout["mainWidth"])
    assert layout["docScroll"] <= layout["viewport"] + 1, (where, layout["docScroll"], layout["viewport"])
    assert layout["clipped"] == [], (where, layout["clipped"][:5])
    assert layout["outside"] == [], (where, layout["outside"][:5])
    for table in layout["tables"]:
        # At 1280 px every table fits its column; on a phone tables become labelled blocks, and
        # the profile matrix keeps its grid and scrolls inside its frame.
        if where[1] == "desktop" or not table["matrix"]:
            assert table["width"] <= table["room"] + 1, (where, table)
    assert page.evaluate(MID_WORD_BREAKS) == [], where


def _check_title(page, path: str, expected: str, where) -> None:
    """The heading is the expected one, and the tab says which page this is (the home page: the
    site's name); never a file name such as "Index"."""
    heading = _heading(page)
    assert expected in heading, (where, heading)
    title = page.title()
    assert title == (f"{heading} - {SITE_NAME}" if path else SITE_NAME), (where, title)
    assert not title.lower().startswith("index"), (where, title)


NODES = """() => {
  const svg = document.querySelector('article figure.oe-depgraph svg');
  const box = svg.getBoundingClientRect();
  return [...svg.querySelectorAll('g.node')].map(n => {
    const r = n.getBoundingClientRect(), a = n.querySelector('a'), t = n.querySelector('text');
    return {name: n.querySelector('title').textContent,
            href: a && new URL(a.getAttribute('href'), location.href).href,
            font: t.getBoundingClientRect().height,
            inside: r.left >= box.left - 1 && r.right <= box.right + 1 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1};
  });
}"""


def _check_picture(page, registry, where) -> None:
    """Every profile is a box inside the drawing, with text of at least 11 px, linking to its page,
    and the page each box links to opens with that profile's name as its heading."""
    page.locator("article figure.oe-depgraph svg").wait_for()
    nodes = page.evaluate(NODES)
    assert sorted(n["name"] for n in nodes) == sorted(p.name for p in registry.profiles), where
    fits = page.evaluate("() => { const f = document.querySelector('article figure.oe-depgraph');"
                         " return f.scrollWidth <= f.clientWidth + 1; }")
    assert fits, where                                     # whole, never cut off at the screen's edge
    for node in nodes:
        assert node["inside"], (where, node)
        if where[1] == "desktop":
            assert node["font"] >= 11, (where, node)
        profile = registry.profile(node["name"])
        assert node["href"] and node["href"].endswith(f"/reference/profiles/{profile.short_name}/"), (where, node)
        response = page.request.get(node["href"])
        assert response.status == 200, (where, node)
        assert f"<title>{profile.name} - {SITE_NAME}</title>" in response.text(), (where, node)


def _check_message_page(page, registry, where) -> None:
    """A message's section names its owning profile and links the requirements that cite it."""
    text = page.evaluate("""() => {
      const out = []; let el = document.querySelector('article h2#watchloadrequest').nextElementSibling;
      while (el && el.tagName !== 'H2') { out.push(el.innerText); el = el.nextElementSibling; }
      return out.join('\\n');
    }""")
    assert f"Profile: {PROFILE}." in text, where
    assert "REQ-LOAD-006" in text, where


# Pieces of profile names in the profile table (the generator lets them wrap only after a dot)
# that the layout broke across lines; a piece with a hyphen may wrap there.
BROKEN_NAMES = """() => [...document.querySelectorAll('article td .oe-name')].flatMap(name =>
  [...name.childNodes].filter(n => n.nodeType === Node.TEXT_NODE && !n.textContent.includes('-'))
    .filter(n => { const r = document.createRange(); r.selectNodeContents(n);
                   return new Set([...r.getClientRects()].map(b => Math.round(b.top))).size > 1; })
    .map(n => name.textContent))"""


@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_pages_have_titles_and_nothing_overflows_or_is_clipped(browser, catalogue, width):
    """Home, a profile page, the matrix, the dependency picture, a message page and the requirement
    matrix, in both catalogues and at both widths (and more reference pages in the repository's)."""
    pages = PAGES + (MORE_PAGES if catalogue.name == "repository" else [])
    with _open_page(browser, catalogue.url, WIDTHS[width]) as page:
        for name, path, heading in pages:
            where = (catalogue.name, width, path or "home")
            page.goto(catalogue.url + path)
            page.wait_for_load_state()
            _check_title(page, path, heading, where)
            _check_layout(page, where)
            if name == "dependencies":
                _check_picture(page, catalogue.registry, where)
            if name == "message":
                _check_message_page(page, catalogue.registry, where)
            if name == "matrix":
                assert page.locator("article td .oe-name").count() >= len(catalogue.registry.profiles)
                assert page.evaluate(BROKEN_NAMES) == [], where
            _shot(page, f"{width}-{name}", catalogue.name, full_page=name in FULL_PAGE)


def test_profile_pages_and_the_matrix_show_stability(browser, catalogue):
    registry = catalogue.registry
    stabilities = {p.stability for p in registry.profiles}
    if catalogue.name == "fifteen":
        assert {"experimental", "deprecated", "stable"} <= stabilities
    with _open_page(browser, catalogue.url, WIDTHS["desktop"]) as page:
        page.goto(catalogue.url + "reference/profiles/")
        matrix = page.locator("article table[data-matrix]")
        headers = [h.strip() for h in matrix.locator("th").all_inner_texts()][1:]
        assert len(headers) == len(registry.profiles)
        for header, p in zip(headers, registry.profiles):
            assert header.split() == [p.short_name, p.stability], header
        # The profile page of each stability the catalogue has.
        for stability in sorted(stabilities):
            profile = next(p for p in registry.profiles if p.stability == stability)
            page.goto(catalogue.url + f"reference/profiles/{profile.short_name}/")
            summary = page.locator("article table").first
            assert [h.strip() for h in summary.locator("th").all_inner_texts()] == ["Property", "Value"]
            row = summary.locator("tr", has_text="Stability")
            assert row.locator("td").nth(1).inner_text().strip() == stability, profile.name


def test_a_click_on_a_picture_box_opens_its_profile(page, server, registry):
    page.goto(server + "reference/profiles/dependencies/")
    page.locator("article figure.oe-depgraph g.node a").first.click()
    page.wait_for_url("**/reference/profiles/*/")
    assert _heading(page) in {p.name for p in registry.profiles}


def test_a_message_requirement_link_opens_the_requirement(page, server):
    page.goto(server + "reference/protocol/load/")
    assert page.locator("article h2#watchloadrequest").count() == 1
    page.locator("article a", has_text="REQ-LOAD-006").first.click()
    page.wait_for_url("**/load/#req-load-006")
    assert page.locator("[id='req-load-006']").count() == 1


def test_requirement_pages_show_titles_and_link_what_checks_each_requirement(page, server):
    """The requirements index names each requirement's page by its title, and both it and the
    requirement checks matrix link rules and cases whose anchors exist (each target page is
    opened once)."""
    page.goto(server + "reference/requirements/")
    rows = page.evaluate("""() => [...document.querySelectorAll('article table tbody tr')].map(tr => {
      const cells = [...tr.querySelectorAll('td')];
      const page = cells[2].querySelector('a');
      return {req: cells[0].innerText.trim(), page: page.innerText.trim(), pageHref: page.href,
              checks: [...cells[4].querySelectorAll('a')].map(a => a.href)};
    })""")
    assert len(rows) > 50
    targets: dict[str, set[str]] = {}
    titles: dict[str, str] = {}
    for row in rows:
        titles.setdefault(row["pageHref"], row["page"])
        for href in row["checks"]:
            url, _, anchor = href.partition("#")
            targets.setdefault(url, set()).add(anchor)
    assert sum(bool(r["checks"]) for r in rows) > len(rows) // 2

    page.goto(server + "reference/requirement-checks/")
    hrefs = page.evaluate("""() => [...document.querySelectorAll('article table tbody td:not(:first-child) a')]
                             .map(a => a.href)""")
    assert any("/conformance-cases/#case-" in h for h in hrefs) and any("/validator-rules/#oev" in h for h in hrefs)
    assert any("/check-rules/#oe" in h for h in hrefs) and any("/breaking-rules/#oeb" in h for h in hrefs)
    for href in hrefs:
        url, _, anchor = href.partition("#")
        targets.setdefault(url, set()).add(anchor)

    # Each target page once, as served: its title and its ids are in the HTML the build wrote
    # (the theme adds neither), so reading them needs no rendering.
    for url in sorted(set(titles) | set(targets)):
        response = page.request.get(url)
        assert response.status == 200, url
        served = response.text()
        if url in titles:
            title = titles[url]
            assert not title.endswith(".md"), title        # a page title, not a file name
            assert f"<title>{html.escape(title, quote=False)} - {SITE_NAME}</title>" in served, (url, title)
        ids = {attrs["id"] for _, attrs in scan(served).elements if attrs.get("id")}
        missing = targets.get(url, set()) - ids
        assert missing == set(), (url, sorted(missing)[:5])
