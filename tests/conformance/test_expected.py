"""The expected-failures file: format, required reasons, and the xfail / stale outcomes."""

from __future__ import annotations

import json

import pytest

from openengine.conformance import ExpectedFailuresError, Outcome, load_expected_failures

from tests.conformance.conftest import reference_engine, run_suite

KNOWN = {"load.watch.sequence", "core.generate.stream"}


def test_yaml_and_json_forms(tmp_path):
    y = tmp_path / "x.yaml"
    y.write_text("expected_failures:\n  - case: load.watch.sequence\n    reason: not yet\n")
    assert load_expected_failures(y, known_cases=KNOWN) == {"load.watch.sequence": "not yet"}
    j = tmp_path / "x.json"
    j.write_text(json.dumps([{"case": "core.generate.stream", "reason": "later"}]))
    assert load_expected_failures(j, known_cases=KNOWN) == {"core.generate.stream": "later"}


@pytest.mark.parametrize("text, fragment", [
    ("- case: load.watch.sequence\n", "reason"),
    ("- case: load.watch.sequence\n  reason: '  '\n", "reason"),
    ("- case: no.such.case\n  reason: x\n", "unknown case id"),
    ("- {case: load.watch.sequence, reason: a}\n- {case: load.watch.sequence, reason: b}\n", "twice"),
    ("- {case: load.watch.sequence, reason: a, extra: 1}\n", "unknown keys"),
    ("other: []\n", "top-level"),
    ("- [1, 2]\n", "mapping"),
    ("- {case: [\n", "not valid YAML"),
])
def test_malformed_entries_are_refused(tmp_path, text, fragment):
    p = tmp_path / "x.yaml"
    p.write_text(text)
    with pytest.raises(ExpectedFailuresError, match=fragment):
        load_expected_failures(p, known_cases=KNOWN)


def test_xfail_passes_the_run_and_stale_fails_it():
    with reference_engine(profiles=("load",), faults=("watch-sequence-not-increasing",)) as eng:
        patterns = ["load.watch.sequence", "load.watch.settings-first"]
        xfail = run_suite(eng.address, patterns=patterns,
                          expected={"load.watch.sequence": "fault on purpose"})
        stale = run_suite(eng.address, patterns=patterns,
                          expected={"load.watch.settings-first": "was broken once"})
    by_id = {r.id: r for r in xfail.results}
    assert by_id["load.watch.sequence"].outcome is Outcome.XFAIL
    assert by_id["load.watch.sequence"].expected_reason == "fault on purpose"
    assert xfail.exit_code == 0
    by_id = {r.id: r for r in stale.results}
    assert by_id["load.watch.settings-first"].outcome is Outcome.STALE
    assert by_id["load.watch.sequence"].outcome is Outcome.FAIL
    assert stale.exit_code == 1


def test_cli_refuses_a_bad_file_with_status_2(tmp_path, capsys):
    from codegen.cli import run

    p = tmp_path / "x.yaml"
    p.write_text("- case: load.watch.sequence\n")
    assert run(["conformance", "--target", "127.0.0.1:1", "--expected-failures", str(p)]) == 2
    assert "reason" in capsys.readouterr().err
