"""The site as a reader meets it: a real headless Chromium on the built site, served on 127.0.0.1.

Opens the home page, follows the navigation to a profile page, reads its limits table, and uses
the search box to find an RPC by name. Every request the browser makes must go to the local
server: the site works offline. Screenshots land in build/screenshots/ for a person to look at.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest

from .conftest import SCREENSHOTS

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.xdist_group("site"),
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                                "(.ci/run installs it: apt-get install -y chromium)"),
]

PROFILE = "openengine.load"
RPC = "WatchLoad"


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


@pytest.fixture(scope="module")
def server(built_site):
    with _serving(built_site) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    elsewhere: list[str] = []

    def only_local(route):
        if route.request.url.startswith(server):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()
    assert elsewhere == [], f"the site fetched from elsewhere: {elsewhere}"


def _shot(page, name: str, **kwargs) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), **kwargs)


def test_reader_finds_a_profile_its_limits_and_an_rpc(page, server, registry):
    profile = registry.profile(PROFILE)
    assert profile is not None and profile.limits and any(r.method == RPC for r in profile.rpcs)
    first_limit = profile.limits[0].name

    page.goto(server)
    heading = page.locator("article h1").first
    assert "OpenEngine" in heading.inner_text()
    assert page.get_by_role("link", name="Profiles").first.is_visible()
    _shot(page, "01-home")

    # Navigation: the Profiles tab, then the profile in the side navigation.
    page.locator(".md-tabs").get_by_role("link", name="Profiles").click()
    page.wait_for_url("**/reference/profiles/")
    page.locator(".md-sidebar--primary").get_by_role("link", name=PROFILE, exact=True).click()
    page.wait_for_url(f"**/reference/profiles/{profile.short_name}/")
    assert page.locator("article h1").first.inner_text().rstrip("¶ \n") == PROFILE

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


WIDTHS = {"desktop": 1280, "phone": 390}

# The pages a reader checks at both widths: (screenshot name, path, expected title).
PAGES = [
    ("home", "", "OpenEngine"),
    ("profile", "reference/profiles/load/", PROFILE),
    ("matrix", "reference/profiles/", "Profiles"),
    ("dependencies", "reference/profiles/dependencies/", "Profile dependencies"),
    ("message", "reference/protocol/load/", "load.proto"),
    ("requirement-checks", "reference/requirement-checks/", "Requirement checks"),
    ("requirements", "reference/requirements/", "Requirements index"),
    ("cases", "reference/conformance-cases/", "Conformance cases"),
    ("validator-rules", "reference/validator-rules/", "Validator rules"),
]

# Layout facts of the open page: the main column's overflow (`.md-content`: the article and the
# margins the theme lets tables and code blocks reach into), and each table against its frame.
LAYOUT = """() => {
  const article = document.querySelector('.md-content');
  const tables = [...article.querySelectorAll('table')].map(t => {
    const frame = t.closest('.md-typeset__scrollwrap') || t.parentElement;
    return {matrix: t.hasAttribute('data-matrix'), width: t.scrollWidth, room: frame.clientWidth,
            right: t.getBoundingClientRect().right, head: t.querySelector('th') ? t.querySelector('th').innerText : ''};
  });
  return {articleScroll: article.scrollWidth, articleWidth: article.clientWidth,
          docScroll: document.documentElement.scrollWidth, viewport: window.innerWidth,
          articleRight: article.getBoundingClientRect().right, tables};
}"""


@pytest.fixture(params=sorted(WIDTHS), ids=sorted(WIDTHS))
def sized_page(request, browser, server):
    width = WIDTHS[request.param]
    context = browser.new_context(viewport={"width": width, "height": 900 if width > 600 else 844})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(server)
                  else route.abort())
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield request.param, page
    context.close()


def test_every_page_has_its_title_and_nothing_overflows(sized_page, server):
    """At 1280 px every table fits its column; on a phone tables become labelled blocks (the
    profile matrix scrolls inside its frame); the main column never overflows."""
    width, page = sized_page
    for name, path, title in PAGES:
        page.goto(server + path)
        page.wait_for_load_state()
        heading = page.locator("article h1").first.inner_text().rstrip("¶ \n")
        assert title in heading, (path, heading)
        # The tab says which page this is (the home page: the site's name).
        assert page.title().startswith(heading if path else "OpenEngine"), (path, page.title())
        assert not page.title().startswith("Index"), path
        layout = page.evaluate(LAYOUT)
        assert layout["articleScroll"] <= layout["articleWidth"] + 1, (width, path, layout)
        assert layout["docScroll"] <= layout["viewport"] + 1, (width, path, layout)
        for table in layout["tables"]:
            if width == "desktop" or not table["matrix"]:
                assert table["width"] <= table["room"] + 1, (width, path, table)
        _shot(page, f"{width}-{name}", full_page=name in ("matrix", "dependencies", "message"))


def test_profile_page_and_matrix_show_stability(page, server, registry):
    profile = registry.profile(PROFILE)
    page.goto(server + f"reference/profiles/{profile.short_name}/")
    summary = page.locator("article table").first
    assert [h.strip() for h in summary.locator("th").all_inner_texts()] == ["Property", "Value"]
    row = summary.locator("tr", has_text="Stability")
    assert row.locator("td").nth(1).inner_text().strip() == profile.stability

    page.goto(server + "reference/profiles/")
    matrix = page.locator("article table[data-matrix]")
    headers = [h.strip() for h in matrix.locator("th").all_inner_texts()][1:]
    assert len(headers) == len(registry.profiles)
    for header, p in zip(headers, registry.profiles):
        assert header.split() == [p.short_name, p.stability], header


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


def _check_picture(page, server, registry, name):
    """Every profile is a box inside the drawing, with text of at least 11 px, linking to its page."""
    page.goto(server + "reference/profiles/dependencies/")
    page.locator("article figure.oe-depgraph svg").wait_for()
    nodes = page.evaluate(NODES)
    _shot(page, name, full_page=True)
    assert sorted(n["name"] for n in nodes) == sorted(p.name for p in registry.profiles)
    for node in nodes:
        assert node["inside"], node
        assert node["font"] >= 11, node            # on a phone the figure scrolls sideways instead
        profile = registry.profile(node["name"])
        assert node["href"].endswith(f"/reference/profiles/{profile.short_name}/"), node
        assert page.request.get(node["href"]).status == 200, node


def test_dependency_picture_is_readable_and_every_node_links_to_its_profile(sized_page, server, registry):
    width, page = sized_page
    _check_picture(page, server, registry, f"{width}-dependencies-picture")
    # A click on a box opens its profile's page.
    page.locator("article figure.oe-depgraph g.node a").first.click()
    page.wait_for_url("**/reference/profiles/*/")
    assert page.locator("article h1").first.inner_text().rstrip("¶ \n") in {p.name for p in registry.profiles}


def test_message_page_names_its_profile_and_the_requirements_citing_it(page, server):
    page.goto(server + "reference/protocol/load/")
    section = page.locator("article h2#watchloadrequest")
    assert section.count() == 1
    text = page.evaluate("""() => {
      const out = []; let el = document.querySelector('article h2#watchloadrequest').nextElementSibling;
      while (el && el.tagName !== 'H2') { out.push(el.innerText); el = el.nextElementSibling; }
      return out.join('\\n');
    }""")
    assert "Profile: openengine.load." in text
    assert "REQ-LOAD-006" in text
    link = page.locator("article a", has_text="REQ-LOAD-006").first
    link.click()
    page.wait_for_url("**/load/#req-load-006")


def test_requirement_checks_link_rules_and_cases_that_resolve(page, server):
    page.goto(server + "reference/requirement-checks/")
    rows = page.locator("article table tbody tr")
    assert rows.count() > 50
    hrefs = page.evaluate("""() => [...document.querySelectorAll('article table tbody td:not(:first-child) a')]
                             .map(a => a.href)""")
    assert any("/conformance-cases/#case-" in h for h in hrefs) and any("/validator-rules/#oev" in h for h in hrefs)
    for href in sorted(set(hrefs))[:400]:
        url, _, anchor = href.partition("#")
        page.goto(href)
        assert page.locator(f"[id='{anchor}']").count() == 1, href


def test_fifteen_profiles_stay_readable_at_1280(browser, fifteen_site):
    """The largest catalogue tested: the picture keeps every box inside and readable, and the
    matrix fits the column without scrolling."""
    from codegen.registry import load_registry

    registry = load_registry(fifteen_site.parent / "profiles.yaml").registry
    with _serving(fifteen_site) as url:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(url)
                      else route.abort())
        page = context.new_page()
        _check_picture(page, url, registry, "desktop-fifteen-dependencies")
        page.goto(url + "reference/profiles/")
        layout = page.evaluate(LAYOUT)
        matrix = [t for t in layout["tables"] if t["matrix"]]
        assert len(matrix) == 1 and matrix[0]["width"] <= matrix[0]["room"] + 1, matrix
        assert layout["docScroll"] <= layout["viewport"] + 1, layout
        page.evaluate("document.getElementById('profile-matrix').scrollIntoView()")
        _shot(page, "desktop-fifteen-matrix")
        context.close()
