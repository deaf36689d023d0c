"""The site as a reader meets it: a real headless Chromium on the built site, served on 127.0.0.1.

Opens the home page, follows the navigation to a profile page, reads its limits table, and uses
the search box to find an RPC by name. Every request the browser makes must go to the local
server: the site works offline. Screenshots land in build/screenshots/ for a person to look at.
"""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def server(built_site):
    handler = functools.partial(_Quiet, directory=str(built_site))
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
    assert headers[:6] == ["Limit", "Type", "Default", "Range", "Unit", "Since"]
    rows = limits.locator("tbody tr")
    assert rows.count() == len(profile.limits)
    first_row = [c.strip() for c in rows.first.locator("td").all_inner_texts()]
    assert first_row[0] == first_limit and first_row[1] == str(profile.limits[0].type)
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


def test_dependency_picture_is_shown(page, server):
    page.goto(server + "reference/profiles/dependencies/")
    picture = page.locator("article img[src$='dependencies.svg']")
    picture.wait_for()
    loaded = page.evaluate("img => img.complete && img.naturalWidth > 0", picture.element_handle())
    assert loaded
    _shot(page, "05-dependencies")
