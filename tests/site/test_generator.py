"""The docs generator: a page per profile, valid pages without protos, regions kept current."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from oespec.generate import GenerationContext, GenerationError, stale_outputs, write_outputs
from oespec.generate_with_catalogues import plan
from oespec.generate import docs
from oespec.registry import load_registry

from .conftest import DATA, ROOT


def _docs_outputs(root, registry):
    return {o.path: o.content for o in plan(registry, root, only=["docs"])}


@pytest.fixture(scope="module")
def repository_plan(registry):
    """The docs generator's outputs for the repository, planned once for the tests that read them."""
    return tuple(plan(registry, ROOT, only=["docs"]))


@pytest.fixture(scope="module")
def repository_docs(repository_plan) -> dict[str, str]:
    return {o.path: o.content for o in repository_plan}


def test_every_profile_has_a_page_and_a_nav_entry(registry, repository_docs):
    outputs = repository_docs
    nav = outputs[f"{docs.GENERATED_DIR}/{docs.NAV_FILE}"]
    for profile in registry.profiles:
        page = outputs[f"{docs.GENERATED_DIR}/{docs.profile_page_path(profile)}"]
        assert page.startswith("<!-- generated from profiles.yaml")
        assert f"# {profile.name}\n" in page
        for limit in profile.limits:
            assert f"`{limit.name}`" in page
        for rpc in profile.rpcs:
            assert f"### {rpc.method}\n" in page
        assert docs.profile_page_path(profile) in nav


def test_the_additions_page_lists_what_only_the_proposal_defines(registry, repository_docs):
    """What upstream v1 defines never appears; each addition links its reference entry."""
    page = repository_docs[f"{docs.GENERATED_DIR}/{docs.ADDITIONS_PAGE}"]
    sections = dict(part.split("\n", 1) for part in page.split("\n## ")[1:])
    for profile in registry.profiles:
        assert f"`{profile.name}`" in sections["Profiles"]
    services = sections["Services and RPCs"]
    assert "[`Discovery/GetCapabilities`](protocol/discovery_service.md#openengine-v1-discovery)" in services
    assert "`Control" not in services and "`Inference" not in services
    assert "`GetCapabilitiesRequest`" in sections["Messages and enums"]
    assert "`GenerateRequest`" not in sections["Messages and enums"]
    extensions = sections["Fields and values added to upstream's messages and enums"]
    assert "`ServerInfo.capability_revision`" in extensions and "`uint64 capability_revision = 100`" in extensions
    assert "`EngineRole.ENGINE_ROLE_ENCODER`" in extensions and "temperature" not in extensions
    # Every entry links to where the specification states it.
    unlinked = [row for row in page.splitlines() if row.startswith("| [") and row.rstrip().endswith("| — |")]
    assert unlinked == []


def test_committed_pages_are_current(repository_plan):
    stale = stale_outputs(ROOT, list(repository_plan))
    assert stale == [], "run `make generate`"


@pytest.fixture
def bare_root(tmp_path):
    shutil.copy(DATA / "hostile-profiles.yaml", tmp_path / "profiles.yaml")
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "index.md").write_text("# Home\n", encoding="utf-8")
    return tmp_path


def _registry(root):
    return load_registry(root / "profiles.yaml").registry


def test_without_protos_the_reference_is_empty_but_valid(bare_root):
    outputs = _docs_outputs(bare_root, _registry(bare_root))
    index = outputs[f"{docs.GENERATED_DIR}/{docs.PROTOCOL}/index.md"]
    assert "# Protocol reference" in index and "No proto files yet." in index
    assert not [p for p in outputs if p.startswith(f"{docs.GENERATED_DIR}/{docs.PROTOCOL}/") and
                not p.endswith("/index.md")]
    assert "protocol: []" in outputs[f"{docs.GENERATED_DIR}/{docs.NAV_FILE}"]


def test_missing_breaking_module_is_tolerated(bare_root, monkeypatch):
    monkeypatch.setitem(sys.modules, "oespec.breaking", None)      # import raises ImportError
    outputs = _docs_outputs(bare_root, _registry(bare_root))
    assert "not available" in outputs[f"{docs.GENERATED_DIR}/{docs.BREAKING_RULES_PAGE}"]


def test_breaking_rules_are_catalogued(repository_docs):
    from oespec.breaking import iter_rules

    page = repository_docs[f"{docs.GENERATED_DIR}/{docs.BREAKING_RULES_PAGE}"]
    for rule in iter_rules():
        assert f"`{rule.id}`" in page


def test_requirements_of_a_profile_link_to_their_anchor(bare_root):
    (bare_root / "spec" / "load.md").write_text(
        "# Load\n\n**REQ-LOAD-001** *(wire)* The first message MUST be settings.\n\n"
        "**REQ-CORE-001** *(wire)* Every engine MUST serve the core.\n", encoding="utf-8")
    outputs = _docs_outputs(bare_root, _registry(bare_root))
    load_page = outputs[f"{docs.GENERATED_DIR}/{docs.PROFILES}/load.md"]
    assert "[**REQ-LOAD-001**](../../load.md#req-load-001)" in load_page
    assert "REQ-CORE-001" not in load_page
    core_page = outputs[f"{docs.GENERATED_DIR}/{docs.PROFILES}/core.md"]
    assert "REQ-CORE-001" in core_page and "REQ-LOAD-001" not in core_page


def test_templates_refuse_unescaped_text():
    with pytest.raises(TypeError, match="raw str"):
        docs._finalize("<script>")


def _oespec(*args, cwd):
    return subprocess.run([sys.executable, "-m", "oespec.cli", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.slow
def test_stale_region_fails_check_and_generate_fixes_it(bare_root):
    page = bare_root / "spec" / "index.md"
    page.write_text("# Home\n\n<!-- oespec:begin limits:openengine.load -->\nold\n"
                    "<!-- oespec:end limits:openengine.load -->\n\nText after.\n", encoding="utf-8")
    check = _oespec("generate", "--check", "--only", "docs", cwd=bare_root)
    assert check.returncode == 1
    assert "spec/index.md" in check.stdout + check.stderr
    assert _oespec("generate", "--only", "docs", cwd=bare_root).returncode == 0
    text = page.read_text(encoding="utf-8")
    assert "`max_watchers`" in text and "\nold\n" not in text and text.endswith("Text after.\n")
    assert _oespec("generate", "--check", "--only", "docs", cwd=bare_root).returncode == 0


def test_mistyped_marker_fails_with_its_location(bare_root):
    (bare_root / "spec" / "index.md").write_text(
        "# Home\n\n<!-- oespec:begin limits:openengine.lod -->\n<!-- oespec:end limits:openengine.lod -->\n",
        encoding="utf-8")
    result = _oespec("generate", "--only", "docs", cwd=bare_root)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "spec/index.md:3:" in out and "DOC002" in out and "Traceback" not in out
    with pytest.raises(GenerationError):
        plan(_registry(bare_root), bare_root, only=["docs"])


def test_outputs_are_deterministic(registry, repository_plan):
    first = repository_plan
    second = plan(registry, ROOT, only=["docs"])
    assert [(o.path, o.content) for o in first] == [(o.path, o.content) for o in second]


def test_message_pages_name_the_owning_profile_and_the_requirements_citing_it(repository_docs):
    page = repository_docs[f"{docs.GENERATED_DIR}/reference/protocol/load.md"]
    section = page[page.index("## WatchLoadRequest\n"):]
    section = section[:section.index("\n## ", 1)]
    assert "Profile: [`openengine.load`](../profiles/load.md)." in section
    # REQ-LOAD-006 names WatchLoadRequest's field `interval_ms`, not the message itself.
    assert "[**REQ-LOAD-006**](../../load.md#req-load-006)" in section


def test_requirement_checks_list_rules_and_cases_by_kind(repository_docs):
    outputs = repository_docs
    page = outputs[f"{docs.GENERATED_DIR}/{docs.REQUIREMENT_CHECKS_PAGE}"]
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| [**REQ-")}
    watch = next(line for req, line in rows.items() if "REQ-LOAD-004" in req)
    assert "conformance-cases.md#case-load-watch-" in watch
    assert any("breaking-rules.md#oeb" in line for line in rows.values())
    assert any("validator-rules.md#oev" in line for line in rows.values())
    cases = outputs[f"{docs.GENERATED_DIR}/{docs.CASES_PAGE}"]
    assert '<a id="case-load-watch-settings-first"></a>`load.watch.settings-first`' in cases
    index = outputs[f"{docs.GENERATED_DIR}/{docs.REQUIREMENTS_PAGE}"]
    assert "[Protocol additions](../additions.md)" in index and "](../additions.md) |" in index
    assert "| additions.md |" not in index


def test_stability_is_on_every_profile_page_and_in_the_matrix(registry, repository_docs):
    outputs = repository_docs
    for profile in registry.profiles:
        page = outputs[f"{docs.GENERATED_DIR}/{docs.profile_page_path(profile)}"]
        assert f"| Stability | {profile.stability} |" in page
    matrix = outputs[f"{docs.GENERATED_DIR}/{docs.MATRIX_PAGE}"]
    assert matrix.count('<span class="oe-vertical">') == len(registry.profiles)


def _table_rows(page: str) -> list[list[str]]:
    """The body rows of the page's tables, as their cells."""
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in page.splitlines()
            if line.startswith("| <a id=")]


def _row_id(cells: list[str]) -> str:
    return cells[0].split("`")[1]


def test_rule_pages_list_exactly_the_catalogue_in_its_order(repository_docs):
    """Each rule page and the case page is the family's catalogue (`oespec rules`), entry for entry,
    with the requirements each entry cites."""
    from oespec.catalogues import family_specs

    families = family_specs()
    outputs = repository_docs
    for family, page, cited_column in (("check", docs.CHECK_RULES_PAGE, -1),
                                       ("breaking", docs.BREAKING_RULES_PAGE, -1),
                                       ("validator", docs.VALIDATOR_RULES_PAGE, 3),
                                       ("conformance", docs.CASES_PAGE, 2)):
        rows = _table_rows(outputs[f"{docs.GENERATED_DIR}/{page}"])
        specs = families[family]
        assert [_row_id(r) for r in rows] == [s.id for s in specs], family
        for row, spec in zip(rows, specs):
            cited = [c for c in row[cited_column].split("**") if c.startswith("REQ-")]
            assert cited == list(spec.requirements), (family, spec.id, row[cited_column])


def test_rule_pages_show_what_the_catalogue_entries_say(bare_root):
    """The pages print the entries they are handed and nothing else: an entry added to a family
    appears with its facts, and the requirement matrix links it."""
    from oespec import generate
    from oespec.generate import RuleCatalogues
    from openengine.contractkit.rules import RuleSpec, Severity

    (bare_root / "spec" / "load.md").write_text(
        "# Load\n\n**REQ-LOAD-001** *(wire)* The first message MUST be settings.\n", encoding="utf-8")
    catalogues = RuleCatalogues(
        check=(RuleSpec("OE998", "made-up-check", "check", "versions", "a made-up rule", Severity.WARNING,
                        requirements=("REQ-LOAD-001",)),),
        breaking=(RuleSpec("OEB998", "made-up-break", "breaking", "profile", "a made-up change", None, bump="minor",
                           requirements=("REQ-LOAD-001",), facts=(("breaks", "servers"),)),),
        validator=(RuleSpec("OEV998", "made-up-validation", "validator", "input", "a made-up answer",
                            Severity.ERROR),),
        python_only_validator_rules=frozenset({"OEV998"}),
        cases=(RuleSpec("load.made-up", "load-made-up", "conformance", "load", "a made-up case", Severity.ERROR,
                        requirements=("REQ-LOAD-001",),
                        facts=(("profile", "openengine.load"), ("when", "absent"), ("disruptive", "yes"))),))
    outputs = {o.path: o.content for o in generate.plan(_registry(bare_root), bare_root, only=["docs"],
                                                          rules=catalogues)}
    page = lambda p: outputs[f"{docs.GENERATED_DIR}/{p}"]  # noqa: E731
    assert _table_rows(page(docs.CHECK_RULES_PAGE)) == [[
        '<a id="oe998"></a>`OE998`', "made-up-check", "warning", "versions", "a made-up rule",
        "[**REQ-LOAD-001**](../load.md#req-load-001)"]]
    assert _table_rows(page(docs.BREAKING_RULES_PAGE)) == [[
        '<a id="oeb998"></a>`OEB998`', "made-up-break", "profile", "servers", "a minor version bump of the profile",
        "a made-up change", "[**REQ-LOAD-001**](../load.md#req-load-001)"]]
    validator = _table_rows(page(docs.VALIDATOR_RULES_PAGE))
    assert [_row_id(r) for r in validator] == ["OEV998"] and validator[0][-1] == "Python validators"
    case = _table_rows(page(docs.CASES_PAGE))
    assert [_row_id(r) for r in case] == ["load.made-up"]
    assert case[0][1] == "[openengine.load](profiles/load.md) (absence)" and "Disruptive" in case[0][3]
    checks = page(docs.REQUIREMENT_CHECKS_PAGE)
    row = next(line for line in checks.splitlines() if line.startswith("| [**REQ-LOAD-001**]"))
    assert [c.strip() for c in row.strip("|").split(" | ")][2:] == [
        "[`OE998`](check-rules.md#oe998)", "[`OEB998`](breaking-rules.md#oeb998)", "—",
        "[`load.made-up`](conformance-cases.md#case-load-made-up)"]


def test_every_generated_page_carries_the_do_not_edit_header(registry, repository_docs):
    """Pages, the navigation lists and the DOT graph; spec pages with regions are hand-written and
    keep their own first line."""
    from oespec.generate import HEADER_TEXT

    outputs = repository_docs
    generated = {path: text for path, text in outputs.items() if path.startswith(f"{docs.GENERATED_DIR}/")}
    assert len(generated) > len(registry.profiles) + 8
    for path, text in generated.items():
        assert HEADER_TEXT in text.split("\n", 1)[0], path
    for page in (docs.CHECK_RULES_PAGE, docs.BREAKING_RULES_PAGE, docs.VALIDATOR_RULES_PAGE, docs.CASES_PAGE,
                 docs.REQUIREMENT_CHECKS_PAGE, docs.REQUIREMENTS_PAGE):
        assert f"{docs.GENERATED_DIR}/{page}" in generated, page


def test_a_hand_edited_rule_page_is_stale(tmp_path, repository_plan):
    """`make check` (`oespec generate --check`) names a rule page that no longer matches the
    catalogue."""
    outputs = list(repository_plan)
    page = next(o for o in outputs if o.path == f"{docs.GENERATED_DIR}/{docs.CHECK_RULES_PAGE}")
    write_outputs(tmp_path, outputs)
    edited = tmp_path / page.path
    edited.write_text(edited.read_text(encoding="utf-8").replace("`OE054`", "`OE054` (edited)"),
                      encoding="utf-8")
    assert stale_outputs(tmp_path, outputs) == [page.path]


def test_profile_table_names_wrap_only_after_a_dot(repository_docs):
    matrix = repository_docs[f"{docs.GENERATED_DIR}/{docs.MATRIX_PAGE}"]
    assert '[<span class="oe-name">openengine.<wbr>load</span>](load.md)' in matrix
    # Elsewhere a profile name is plain text.
    cases = repository_docs[f"{docs.GENERATED_DIR}/{docs.CASES_PAGE}"]
    assert "<wbr>" not in cases and "[openengine.load](profiles/load.md)" in cases


def test_each_capability_message_names_its_own_profile(registry, repository_docs):
    """Capabilities holds every capability message, but each belongs to its profile, not the core."""
    import re

    page = repository_docs[f"{docs.GENERATED_DIR}/{docs.PROTOCOL}/capabilities.md"]
    for profile in registry.profiles:
        if profile.capability is None:
            continue
        section = page.split(f"\n## {profile.capability.message}\n", 1)[1].split("\n## ", 1)[0]
        assert re.search(rf"^Profile: \[`{re.escape(profile.name)}`\]\([^)]*\)\.$", section, re.M), \
            (profile.name, section[:400])
