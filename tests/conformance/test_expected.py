"""The expected-failures file: format, required reasons, and the xfail / stale outcomes."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from openengine.conformance import ExpectedFailuresError, Outcome, load_expected_failures
from openengine.conformance.expected import document_entries, entry_problems
from openengine.contractkit.yamlsource import parse_text

from tests.conformance.conftest import reference_engine, run_suite

KNOWN = {"load.watch.sequence", "core.generate.stream"}


def test_yaml_and_json_forms(tmp_path):
    y = tmp_path / "x.yaml"
    y.write_text("expected_failures:\n  - case: load.watch.sequence\n    reason: not yet\n")
    assert load_expected_failures(y, known_cases=KNOWN) == {"load.watch.sequence": "not yet"}
    j = tmp_path / "x.json"
    j.write_text(json.dumps([{"case": "core.generate.stream", "reason": "later"}]))
    assert load_expected_failures(j, known_cases=KNOWN) == {"core.generate.stream": "later"}


@pytest.mark.parametrize("text, fragment, line", [
    ("- case: load.watch.sequence\n", "'reason' is a required property", 1),
    ("- case: load.watch.sequence\n  reason: '  '\n", "reason", 2),
    ("- case: no.such.case\n  reason: x\n", "unknown case id", 1),
    ("- {case: load.watch.sequence, reason: a}\n- {case: load.watch.sequence, reason: b}\n", "twice", 2),
    ("- {case: load.watch.sequence, reason: a, extra: 1}\n", "unknown key 'extra'", 1),
    ("other: []\n", "unknown key 'other'", 1),
    ("- [1, 2]\n", "not of type 'object'", 1),
    ("- {case: [\n", "YAML syntax error", 2),
])
def test_malformed_entries_are_refused_at_their_line(tmp_path, text, fragment, line):
    """The same located loader as the registry: file:line:column, the rule broken, a hint."""
    p = tmp_path / "x.yaml"
    p.write_text(text)
    with pytest.raises(ExpectedFailuresError, match=fragment) as exc:
        load_expected_failures(p, known_cases=KNOWN)
    assert str(exc.value).startswith(f"{p}:{line}:")


def test_a_typo_in_a_key_gets_the_known_key_as_hint(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("expected_failures:\n  - case: load.watch.sequence\n    reson: later\n")
    with pytest.raises(ExpectedFailuresError) as exc:
        load_expected_failures(p, known_cases=KNOWN)
    assert f"{p}:3:5:" in str(exc.value) and "did you mean 'reason'" in str(exc.value)


def test_a_key_given_twice_is_refused_at_the_repeat(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("- case: load.watch.sequence\n  reason: a\n  reason: b\n")
    with pytest.raises(ExpectedFailuresError, match="'reason' is given twice") as exc:
        load_expected_failures(p, known_cases=KNOWN)
    assert str(exc.value).startswith(f"{p}:3:3:")


@pytest.mark.parametrize("text", [
    "null", "[]", "expected_failures:\n", "expected_failures: []", "- {case: a.b, reason: x}",
    "expected_failures:\n  - {case: load.watch-x.y1, reason: ' r '}\n  - {case: a-, reason: x}",
    '{"expected_failures": [{"case": "core.generate.stream", "reason": "later"}]}',
    "42", "'text'", "{other: 1}", "expected_failures: 3", "expected_failures: {case: a}",
    "{expected_failures: [], other: 1}", "- 1", "- null", "- []", "- {case: a}", "- {reason: r}",
    "- {case: A.b, reason: r}", "- {case: a..b, reason: r}", "- {case: a., reason: r}",
    "- {case: '-a', reason: r}", "- {case: 7, reason: r}", "- {case: a, reason: ''}",
    "- {case: a, reason: ' '}", "- {case: a, reason: true}", "- {case: a, reason: [x]}",
    "- {case: a, reason: r, x: 1}", "[[]]", "- {case: a, reason: r}\n- {case: b}",
])
def test_the_format_check_gives_the_published_schemas_verdict(text):
    """The runtime checks the file's shape without a JSON Schema library; the schema published for
    editors (and shipped beside the module) must accept and refuse exactly the same documents."""
    schema = json.loads(resources.files("openengine.conformance").joinpath("expected_failures.schema.json")
                        .read_text("utf-8"))
    root = parse_text(text, "x.yaml").root
    entries, problems = document_entries(root)
    problems += [p for where, node in entries for p in entry_problems(node, where)]
    schema_errors = list(jsonschema.Draft202012Validator(schema).iter_errors(root.plain()))
    assert bool(problems) == bool(schema_errors), (problems, [e.message for e in schema_errors])


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
    from oespec.cli import run

    p = tmp_path / "x.yaml"
    p.write_text("- case: load.watch.sequence\n")
    assert run(["conformance", "--target", "127.0.0.1:1", "--expected-failures", str(p)]) == 2
    assert "reason" in capsys.readouterr().err
