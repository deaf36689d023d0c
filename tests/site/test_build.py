"""The built site: strict, offline, every profile present, registry text escaped."""

from __future__ import annotations

import html
import re

import pytest

from .conftest import DATA, BuildFailed, mkdocs_build, site_from
from .htmlscan import injected, scan

# Site builds. The built sites are shared across workers (conftest.built_once), so these tests
# spread over the workers rather than queue behind the browser tests.
pytestmark = pytest.mark.slow

HOME = "# Home\n\nWelcome. See the [profiles](reference/profiles/index.md).\n"


def test_every_profile_has_a_built_page(built_site, registry):
    for profile in registry.profiles:
        page = built_site / "reference" / "profiles" / profile.short_name / "index.html"
        assert page.is_file(), profile.name
        assert profile.name in page.read_text(encoding="utf-8")


def test_home_page_is_the_spec_index(built_site):
    home = built_site / "index.html"
    assert home.is_file() and (built_site / "search" / "search_index.json").is_file()


def test_json_schemas_are_published(built_site):
    """Clients in other languages fetch the schemas from the site; they are the generated files."""
    import json

    from .conftest import ROOT

    published = {p.name for p in (built_site / "schemas").glob("*.json")}
    expected = {p.name for p in (ROOT / "schemas").glob("*.schema.json")} | {"profiles.schema.json"}
    assert published == expected
    for name in published:
        source = ROOT / ("oespec/registry" if name == "profiles.schema.json" else "schemas") / name
        assert json.loads((built_site / "schemas" / name).read_text()) == json.loads(source.read_text())
    index = (built_site / "index.html").read_text(encoding="utf-8")
    assert 'href="schemas/capabilities.schema.json"' in index


def _external(url: str | None) -> bool:
    return bool(url) and bool(re.match(r"^(https?:)?//", url.strip()))


def test_nothing_is_loaded_from_elsewhere(built_site):
    """No page loads a script, style, font, image or frame from another host."""
    offenders = []
    for page in built_site.rglob("*.html"):
        for tag, attrs in scan(page.read_text(encoding="utf-8")).elements:
            if tag in ("script", "img", "iframe", "source", "video", "audio", "embed") and _external(attrs.get("src")):
                offenders.append((page.name, tag, attrs.get("src")))
            if tag == "link" and _external(attrs.get("href")) and attrs.get("rel") not in ("canonical",):
                offenders.append((page.name, tag, attrs.get("href")))
    for css in built_site.rglob("*.css"):
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", css.read_text(encoding="utf-8")):
            if _external(url):
                offenders.append((css.name, "css", url))
    for css in built_site.rglob("*.css"):
        assert "@import url(http" not in css.read_text(encoding="utf-8")
    assert offenders == []


# One site from the hostile registry for the tests that read a passing build: a spec page with a
# requirement the generated pages link to, and a page named only by `oespec:spec` in the navigation.
LOAD_PAGE = "# Load\n\n**REQ-LOAD-001** *(wire)* The first message MUST be the settings.\n"
NEW_PAGE = "# Structured output\n\nA new profile's page.\n"


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    spec = {"index.md": HOME, "load.md": LOAD_PAGE, "structured-output.md": NEW_PAGE}
    config = site_from(root, DATA / "hostile-profiles.yaml", spec, nav_spec=["oespec:spec"])
    mkdocs_build(config, root / "build")   # strict: a dangling anchor or a page left out of the nav fails it
    return root / "build"


def _content(page_html: str) -> str:
    """The article of a material page (the theme's own scripts are outside it)."""
    start = page_html.index('<article class="md-content__inner')
    return page_html[start:page_html.index("</article>", start)]


def test_hostile_registry_text_is_shown_escaped(hostile_site):
    core = (hostile_site / "reference" / "profiles" / "core" / "index.html").read_text(encoding="utf-8")
    load = (hostile_site / "reference" / "profiles" / "load" / "index.html").read_text(encoding="utf-8")
    index = (hostile_site / "reference" / "profiles" / "index.html").read_text(encoding="utf-8")
    for html in (core, load, index):
        article = _content(html)        # the theme's own markup (code blocks, icons) is layout only
        assert injected(article, strict=False) == [], injected(article, strict=False)
    core_text = "".join(scan(_content(core)).text)
    # The profile description and the limit description, shown as the text they are.
    assert "<script>alert(1)</script>" in core_text
    assert "<img src=x onerror=alert(2)>" in core_text
    assert '<script>alert("limit")</script>' in core_text
    assert "<img src=x onerror=alert(7)>" in core_text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in _content(core)
    assert '<script>alert("load-limit")</script>' in "".join(scan(_content(load)).text)


def test_hostile_text_stays_out_of_the_search_index(hostile_site):
    index = (hostile_site / "search" / "search_index.json").read_text(encoding="utf-8")
    assert "<script>alert" not in index and "<img src=x" not in index


def test_a_broken_link_and_a_page_left_out_of_the_navigation_fail_the_build(tmp_path):
    # One build with both: strict mode fails on any warning, and names each.
    config = site_from(tmp_path, DATA / "hostile-profiles.yaml",
                       {"index.md": HOME + "\nSee [the missing page](missing.md).\n", "orphan.md": "# Orphan\n"},
                       nav_spec=["index.md"])
    with pytest.raises(BuildFailed) as failure:
        mkdocs_build(config, tmp_path / "build")
    output = str(failure.value)
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    assert any("missing.md" in line for line in warnings), output
    assert any('not included in the "nav"' in line for line in warnings) and "orphan.md" in output, output


def test_requirements_get_anchors_that_generated_pages_link_to(hostile_site):
    page = (hostile_site / "load" / "index.html").read_text(encoding="utf-8")
    assert 'id="req-load-001"' in page
    profile = (hostile_site / "reference" / "profiles" / "load" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../../load/#req-load-001"' in profile


def test_fifteen_profiles_fit_the_dependency_picture_and_every_node_links_to_its_page(fifteen_site):
    from oespec.registry import load_registry

    registry = load_registry(fifteen_site.parent / "profiles.yaml").registry
    assert len(registry.profiles) == 15
    page_dir = fifteen_site / "reference" / "profiles" / "dependencies"
    page = (page_dir / "index.html").read_text(encoding="utf-8")
    figure = page.index('<figure class="oe-depgraph"')
    svg = page[page.index("<svg", figure):page.index("</svg>", figure)]
    box = [float(v) for v in re.search(r'viewBox="([^"]+)"', svg)[1].split()]
    # Graphviz draws in a group translated to the bottom-left corner, y growing upwards.
    shift = [float(v) for v in re.search(r'translate\(([-\d.]+) ([-\d.]+)\)', svg).groups()]
    nodes = [(html.unescape(name), body) for name, body in
             re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]+)</title>(.*?)</g>\s*</g>', svg, re.S)]
    assert sorted(n for n, _ in nodes) == sorted(p.name for p in registry.profiles)
    for name, body in nodes:
        href = re.search(r'\bhref="([^"]+)"', body)[1]
        target = (page_dir / href / "index.html").resolve()
        profile = registry.profile(name)
        assert target == (fifteen_site / "reference" / "profiles" / profile.short_name / "index.html").resolve()
        assert target.is_file(), href
        points = [tuple(map(float, p.split(","))) for p in re.search(r'points="([^"]+)"', body)[1].split()] \
            if 'points="' in body else []
        paths = re.findall(r'd="M([-\d.]+),([-\d.]+)', body)
        for x, y in points + [tuple(map(float, p)) for p in paths]:
            assert box[0] <= x + shift[0] <= box[0] + box[2] and box[1] <= y + shift[1] <= box[1] + box[3], (name, x, y)
    assert "experimental" in svg and "deprecated" in svg


def test_fifteen_profiles_each_get_a_matrix_column_with_their_stability(fifteen_site):
    index = (fifteen_site / "reference" / "profiles" / "index.html").read_text(encoding="utf-8")
    matrix = index[index.index("<table data-matrix>"):]
    headers = re.findall(r'<th[^>]*>(.*?)</th>', matrix[:matrix.index("</thead>")], re.S)
    assert len(headers) == 16
    assert any("experimental" in h for h in headers) and any("deprecated" in h for h in headers)


def test_a_new_spec_page_enters_the_navigation_without_editing_mkdocs_yml(hostile_site):
    """`oespec:spec` in the Specification section stands for every spec page named nowhere else."""
    home = (hostile_site / "index.html").read_text(encoding="utf-8")
    assert re.search(r'href="structured-output/"[^>]*>\s*(<span[^>]*>\s*)?Structured output', home), home[:2000]
