"""The Conformance page: built from the reports kept in conformance/reports/, each of which is a
valid report of the published format."""

from __future__ import annotations

import copy
import json
import shutil

import jsonschema
import pytest

from oespec.generate import GenerationError
from oespec.generate import docs, reports
from oespec.generate_with_catalogues import plan
from oespec.registry import load_registry

from .conftest import DATA, ROOT

PAGE = f"{docs.GENERATED_DIR}/{docs.REPORTS_PAGE}"
KEPT = {"reference", "counting-example", "llama-tiny", "upstream-only"}


def _result(case, profile, outcome, reason="", requirements=("REQ-CORE-001",)):
    return {"case": case, "profile": profile, "requirements": list(requirements), "title": case,
            "outcome": outcome, "reason": reason, "seconds": 0.1}


def _report(name, results, *, advertised=("openengine.core",), discovery="served", conforms=True,
            verdict="CONFORMS"):
    counts = {o: sum(1 for r in results if r["outcome"] == o)
              for o in ("pass", "fail", "skip", "unchecked", "error", "xfail", "stale")}
    return {
        "$schema": "https://openengine.dev/schemas/conformance_report.schema.json",
        "kind": "openengine-conformance-report", "version": 1, "date": "2026-11-02T10:15:00+00:00",
        "target": "127.0.0.1:1",
        "implementation": {"engine_name": name, "engine_version": "2.1", "instance_id": "i",
                           "role": "ENGINE_ROLE_AGGREGATED", "schema_revision": 2, "schema_release": "r",
                           "capability_revision": 1, "discovery": discovery},
        "contract": {"schema_revision": 2, "minimum_client_revision": 1, "schema_release": "release-9",
                     "registry_revision": 3},
        "runner": {"name": "oespec conformance", "version": "0.9"},
        "profiles": {"advertised": [{"name": p, "version": "1.0"} for p in advertised], "forced": []},
        "verdict": {"conforms": conforms, "text": verdict, "counts": counts, "unchecked_requirements": []},
        "results": results,
    }


@pytest.fixture
def root(tmp_path):
    """A checkout of its own: a registry with one optional profile, and two kept reports."""
    shutil.copy(DATA / "hostile-profiles.yaml", tmp_path / "profiles.yaml")
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "index.md").write_text("# Home\n", encoding="utf-8")
    (tmp_path / "schemas").mkdir()
    shutil.copy(ROOT / reports.REPORT_SCHEMA_FILE, tmp_path / reports.REPORT_SCHEMA_FILE)
    folder = tmp_path / reports.REPORTS_DIR
    folder.mkdir(parents=True)
    good = _report("good-engine", [_result("core.a.one", "openengine.core", "pass"),
                                   _result("core.a.two", "openengine.core", "pass"),
                                   _result("core.a.three", "openengine.core", "skip", "not configured"),
                                   _result("other.rpcs.absent", "openengine.other", "pass")])
    legacy = _report("legacy<b>", [_result("core.a.one", "openengine.core", "pass"),
                                   _result("core.discovery.answers", "openengine.core", "fail",
                                           "add the Discovery service | <script>")],
                     advertised=(), discovery="Discovery/GetCapabilities failed with UNIMPLEMENTED",
                     conforms=False, verdict="DOES NOT CONFORM: 1 case(s) core.discovery.answers")
    (folder / "a-good.json").write_text(json.dumps(good, indent=2) + "\n", encoding="utf-8")
    (folder / "b-legacy.json").write_text(json.dumps(legacy, indent=2) + "\n", encoding="utf-8")
    return tmp_path


def _page(root) -> str:
    registry = load_registry(root / "profiles.yaml").registry
    return {o.path: o.content for o in plan(registry, root, only=["docs"])}[PAGE]


def test_the_page_is_the_matrix_of_the_reports_in_the_folder(root):
    page = _page(root)
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    # One summary row and one matrix row per report, in file-name order, engine text escaped.
    assert ("| [good-engine](#engine-a-good) | 2.1 | ENGINE_ROLE_AGGREGATED | 2 (release-9); engine names 2 "
            "| oespec conformance 0.9 | 2026-11-02 10:15 UTC | **CONFORMS** (pass 3, skip 1) |") in rows
    assert any(r.startswith("| [legacy&lt;b&gt;](#engine-b-legacy) |") and
               r.endswith("| **DOES NOT CONFORM** (pass 1, fail 1) |") for r in rows)
    matrix = {r.split(" | ")[0]: r.split(" | ")[1:] for r in rows
              if "pass " in r or "not advertised" in r}
    assert matrix["| good-engine"][0] == "pass 2, fail 0, unchecked 0, skip 1"
    assert "not advertised (absence: pass 1)" in matrix["| good-engine"]
    # The mandatory profile is judged even when the engine lists nothing.
    assert matrix["| legacy&lt;b&gt;"][0] == "pass 1, fail 1, unchecked 0, skip 0 (not listed: no Discovery)"
    # The upstream-only engine's gaps are listed as a migration checklist, escaped.
    assert "migration checklist" in page
    assert "add the Discovery service &#124; &lt;script&gt;" in page and "<script>" not in page


def test_a_report_the_schema_refuses_stops_generation_naming_its_file(root):
    path = root / reports.REPORTS_DIR / "b-legacy.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["results"][0]["outcome"] = "maybe"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(GenerationError) as caught:
        _page(root)
    assert "conformance/reports/b-legacy.json" in str(caught.value)
    assert "results/0/outcome" in str(caught.value)


def test_every_kept_report_is_valid_and_round_trips():
    schema = json.loads((ROOT / reports.REPORT_SCHEMA_FILE).read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    files = reports.report_files(ROOT)
    assert {p.stem for p in files} >= KEPT, "run `make conformance-reports`"
    for path in files:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text)
        validator.validate(doc)
        # Written as `oespec conformance --report` writes it, so load then dump gives the same file.
        assert json.dumps(copy.deepcopy(doc), indent=2) + "\n" == text, path.name
