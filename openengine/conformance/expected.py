"""The expected-failures file: lets an engine adopt the suite one case at a time.

YAML or JSON, either a list or a mapping with an `expected_failures` list; each entry names a
case id and gives a reason (required):

    expected_failures:
      - case: load.watch.heartbeat-idle
        reason: heartbeats land in the next release

An expected failure that fails is reported as `xfail` and does not fail the run; one that now
passes is reported as `stale` and DOES fail the run, so the file is kept honest.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from openengine.contractkit.locations import Loc
from openengine.contractkit.yamlsource import SourceError, YMap, YNode, YScalar, YSeq, read_file

# The file's shape, as its JSON Schema (expected_failures.schema.json beside this module,
# published as schemas/expected_failures.schema.json for editors) describes it. It is checked here
# by hand so that the runtime needs no JSON Schema library; tests/conformance/test_expected.py
# holds both to the same verdicts.
SCHEMA_NAME = "schemas/expected_failures.schema.json"
DOCUMENT_KEYS = ("expected_failures",)
ENTRY_KEYS = ("case", "reason")
CASE_ID = re.compile(r"[a-z0-9][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)*")


class ExpectedFailuresError(ValueError):
    """The file is unreadable or an entry is malformed; the message names the file and entry."""



@dataclass(frozen=True)
class Problem:
    """A located problem of the file, with its hint."""

    loc: Loc
    message: str
    hint: str

def load_expected_failures(path: str | Path, *, known_cases: set[str] | None = None) -> dict[str, str]:
    """Case id -> reason. Read with the located loader the registry uses, so a malformed file is
    reported as file:line:column with a hint; unknown case ids and duplicates are errors too."""
    p = Path(path)
    try:
        source = read_file(p, str(p))
    except SourceError as err:
        where = f"{err.path}:{err.loc.line}:{err.loc.column}" if err.loc.line else err.path
        hint = "pass the path of an expected-failures file (YAML or JSON)" if err.message == "no such file" \
            else err.hint
        raise ExpectedFailuresError(f"{where}: {err.message}" + (f" (hint: {hint})" if hint else "")) from None
    entries, problems = document_entries(source.root)
    for where, node in entries:
        problems += entry_problems(node, where)
    if problems:
        problems.sort(key=lambda x: (x.loc.line, x.loc.column))
        raise ExpectedFailuresError("; ".join(f"{p}:{x.loc.line}:{x.loc.column}: {x.message} (hint: {x.hint})"
                                              for x in problems))
    out: dict[str, str] = {}
    for i, (_where, node) in enumerate(entries, 1):
        # The shape is right; what it cannot tell is which cases exist.
        where = f"{p}:{node.loc.line}:{node.loc.column}: entry {i}"
        case_id, reason = node.get("case").value, node.get("reason").value
        if known_cases is not None and case_id not in known_cases:
            raise ExpectedFailuresError(f"{where}: unknown case id {case_id!r} "
                                        "(`oespec conformance --list` prints them)")
        if case_id in out:
            raise ExpectedFailuresError(f"{where}: {case_id} is listed twice")
        out[case_id] = reason.strip()
    return out


def document_entries(root: YNode) -> tuple[list[tuple[str, YNode]], list[Problem]]:
    """The entry nodes, each with its path (`expected_failures[0]`), and the problems of the
    document's outer shape: empty, a list of entries, or a mapping holding the list."""
    if _is_null(root):
        return [], []
    if isinstance(root, YSeq):
        return [(f"[{i}]", item) for i, item in enumerate(root.items)], []
    if not isinstance(root, YMap):
        return [], [Problem(root.loc, f"(document): {_shown(root)} is not a list of entries or a mapping "
                                      "with `expected_failures`",
                            f"write `expected_failures:` and a list of entries; see {SCHEMA_NAME}")]
    problems = _key_problems(root, DOCUMENT_KEYS, "(document)")
    inner = root.get("expected_failures")
    if inner is None or _is_null(inner):
        return [], problems
    if not isinstance(inner, YSeq):
        return [], problems + [Problem(inner.loc, f"expected_failures: {_shown(inner)} is not of type 'array'",
                                       "write a list of entries, each with `case` and `reason`")]
    return [(f"expected_failures[{i}]", item) for i, item in enumerate(inner.items)], problems


def entry_problems(node: YNode, where: str) -> list[Problem]:
    """Every way one entry breaks the format, each at the key or value concerned."""
    if not isinstance(node, YMap):
        return [Problem(node.loc, f"{where}: {_shown(node)} is not of type 'object'",
                        "write a mapping with `case` and `reason`")]
    problems = _key_problems(node, ENTRY_KEYS, where)
    for key in ENTRY_KEYS:
        value = node.get(key)
        if value is None:
            problems.append(Problem(node.loc, f"{where}: '{key}' is a required property",
                                    f"add the missing key; see {SCHEMA_NAME}"))
        elif not (isinstance(value, YScalar) and isinstance(value.value, str)):
            problems.append(Problem(value.loc, f"{where}.{key}: {_shown(value)} is not of type 'string'",
                                    "write a string (quote it if YAML reads it as another type)"))
        elif key == "case" and not CASE_ID.fullmatch(value.value):
            problems.append(Problem(value.loc, f"{where}.case: {value.value!r} is not a case id",
                                    "write the id as `oespec conformance --list` prints it, "
                                    "e.g. load.watch.sequence"))
        elif key == "reason" and not value.value.strip():
            problems.append(Problem(value.loc, f"{where}.reason: the reason is empty",
                                    "say why the engine fails the case (a reason is required)"))
    return problems


def _key_problems(node: YMap, known: tuple[str, ...], where: str) -> list[Problem]:
    """Unknown keys (with the known key closest to each, a typo's likely fix) and repeated keys."""
    problems = []
    for key in node.entries:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = (f"did you mean {close[0]!r}? " if close else "") + f"known keys: {', '.join(known)}"
            problems.append(Problem(node.key_loc(key), f"{where}: unknown key {key!r}", hint))
    for key, again, first in node.duplicates:
        problems.append(Problem(again, f"{where}: key {key!r} is given twice (first at line {first.line})",
                                "keep one of them"))
    return problems


def _is_null(node: YNode) -> bool:
    return isinstance(node, YScalar) and node.value is None


def _shown(node: YNode) -> str:
    """A node as a message names it: a scalar by its value, a collection by its kind."""
    if isinstance(node, YSeq):
        return "a list"
    if isinstance(node, YMap):
        return "a mapping"
    return repr(node.value)
