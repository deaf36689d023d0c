"""The conformance soak's section of results.md is written from its record (bench/soak.json) and
survives a `make bench`, which rewrites the rest of the file."""

from __future__ import annotations

from bench import soak

RECORD = {"date": "2026-01-01 00:00 UTC", "cpus": 2, "burners": 2, "patterns": None,
          "runs_asked": 3, "minutes": None, "load_start": "2.0 1.0 0.5", "load_end": "2.1 2.0 1.5",
          "load_during": "min 1.9, median 2.1, max 2.4",
          "engines": [{"engine": "reference", "runs": 3, "cases": 330, "failures": {},
                       "bad_runs": 0, "tracebacks": 0, "seconds": 60.0, "reasons": {}}]}


def test_the_section_is_appended_then_replaced_in_place():
    once = soak.with_section("# Results\n\n## Fleet\n", RECORD)
    assert once.startswith("# Results\n\n## Fleet\n") and once.count(soak.BEGIN) == 1
    assert "| reference | 3 | 330 | 0 | 0 | 0 | 1.0 |" in once
    later = dict(RECORD, engines=[dict(RECORD["engines"][0], runs=50, cases=5500)])
    twice = soak.with_section(once + "\n## Later\n", later)
    assert twice.count(soak.BEGIN) == 1 and twice.endswith("## Later\n")
    assert "| reference | 50 | 5500 |" in twice and "| reference | 3 |" not in twice


def test_without_a_record_the_text_is_unchanged():
    assert soak.with_section("# Results\n", None) == "# Results\n"


def test_the_recorded_soak_reads_back(tmp_path):
    path = tmp_path / "soak.json"
    assert soak.load_record(path) is None
    path.write_text('{"date": "x"')
    assert soak.load_record(path) is None
    assert soak.load_record() is not None        # the one in bench/, which results.md shows
