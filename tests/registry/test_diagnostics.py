"""The finding record's printers and exit status."""

from __future__ import annotations

import json

import pytest

from openengine.contractkit.diagnostics import (
    Diagnostic, exit_code, render_github, render_json, render_text, sorted_diagnostics,
)
from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity


def diag(rule="OE005", severity=Severity.ERROR, line=3, column=7, message="the summary is empty",
         hint="write the text", path="profiles.yaml", **details):
    return Diagnostic.at(path, Loc(line, column), rule, severity, message, hint, **details)


def test_text_shows_position_rule_hint_details_and_counts():
    out = render_text([diag(), diag("OE006", Severity.WARNING, line=9, column=1, hint="", baseline="a:1")])
    assert out.splitlines() == [
        "profiles.yaml:3:7: error OE005: the summary is empty",
        "    hint: write the text",
        "profiles.yaml:9:1: warning OE006: the summary is empty",
        "    baseline: a:1",
        "2 findings (1 error, 1 warning, 0 infos)",
    ]


def test_text_of_a_whole_file_finding_has_no_position():
    out = render_text([diag(line=0, column=0)])
    assert out.startswith("profiles.yaml: error OE005:")


def test_text_of_nothing_is_a_summary():
    assert render_text([]) == "0 findings (0 errors, 0 warnings, 0 infos)\n"


def test_json_round_trips_and_carries_details_only_when_present():
    out = json.loads(render_json([diag(), diag(line=4, bump="major")]))
    first, second = out["diagnostics"]
    assert first == {"path": "profiles.yaml", "line": 3, "column": 7, "rule_id": "OE005",
                     "severity": "error", "message": "the summary is empty", "hint": "write the text"}
    assert second["details"] == {"bump": "major"}


def test_github_annotations_per_severity():
    out = render_github([diag(), diag(severity=Severity.WARNING), diag(severity=Severity.INFO)])
    assert [line.split(" ", 1)[0] for line in out.splitlines()] == ["::error", "::warning", "::notice"]
    assert out.splitlines()[0] == ("::error file=profiles.yaml,line=3,col=7,title=OE005::"
                                   "the summary is empty (hint: write the text)")


def test_github_escapes_data_and_properties():
    d = diag(path="dir,with:odd%name.yaml", message="100% wrong\nsecond line\r", hint="")
    [line] = render_github([d]).splitlines()
    assert line == ("::error file=dir%2Cwith%3Aodd%25name.yaml,line=3,col=7,title=OE005::"
                    "100%25 wrong%0Asecond line%0D")


def test_github_whole_file_finding_has_no_line():
    [line] = render_github([diag(line=0, column=0)]).splitlines()
    assert line.startswith("::error file=profiles.yaml,title=OE005::")


def test_github_of_nothing_is_empty():
    assert render_github([]) == ""


@pytest.mark.parametrize("severities, fail_on, expected", [
    ([], Severity.ERROR, 0),
    ([Severity.WARNING], Severity.ERROR, 0),
    ([Severity.WARNING], Severity.WARNING, 1),
    ([Severity.INFO], Severity.WARNING, 0),
    ([Severity.INFO], Severity.INFO, 1),
    ([Severity.INFO, Severity.ERROR], Severity.ERROR, 1),
])
def test_exit_code(severities, fail_on, expected):
    assert exit_code([diag(severity=s) for s in severities], fail_on) == expected


def test_severity_parse():
    assert Severity.parse("Warning") is Severity.WARNING
    with pytest.raises(ValueError):
        Severity.parse("fatal")


def test_sorted_by_path_then_position():
    a, b, c = diag(line=9), diag(line=2, column=5), diag(path="a.yaml", line=50)
    assert sorted_diagnostics([a, b, c]) == [c, b, a]
