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

import json
from pathlib import Path


class ExpectedFailuresError(ValueError):
    """The file is unreadable or an entry is malformed; the message names the file and entry."""


def expected_failures_schema() -> dict:
    """The file's JSON Schema (shipped with the package, published as
    schemas/expected_failures.schema.json)."""
    from importlib import resources

    return json.loads(resources.files("openengine.conformance").joinpath("expected_failures.schema.json")
                      .read_text("utf-8"))


def load_expected_failures(path: str | Path, *, known_cases: set[str] | None = None) -> dict[str, str]:
    """Case id -> reason. Read with the located loader the registry uses, so a malformed file is
    reported as file:line:column with a hint; unknown case ids and duplicates are errors too."""
    from openengine.contractkit.yamlsource import SourceError, YMap, YSeq, read_file, schema_problems

    p = Path(path)
    try:
        source = read_file(p, str(p))
    except SourceError as err:
        where = f"{err.path}:{err.loc.line}:{err.loc.column}" if err.loc.line else err.path
        hint = "pass the path of an expected-failures file (YAML or JSON)" if err.message == "no such file" \
            else err.hint
        raise ExpectedFailuresError(f"{where}: {err.message}" + (f" (hint: {hint})" if hint else "")) from None
    problems = schema_problems(source, expected_failures_schema(), "schemas/expected_failures.schema.json")
    if problems:
        raise ExpectedFailuresError("; ".join(f"{p}:{x.loc.line}:{x.loc.column}: {x.message} (hint: {x.hint})"
                                              for x in problems))
    root = source.root
    if isinstance(root, YMap):
        root = root.get("expected_failures")
    nodes = root.items if isinstance(root, YSeq) else []
    data = [n.plain() for n in nodes]
    out: dict[str, str] = {}
    for i, (entry, node) in enumerate(zip(data, nodes), 1):
        # The schema has judged each entry's shape; what it cannot know is which cases exist.
        where = f"{p}:{node.loc.line}:{node.loc.column}: entry {i}"
        case_id, reason = entry["case"], entry["reason"]
        if known_cases is not None and case_id not in known_cases:
            raise ExpectedFailuresError(f"{where}: unknown case id {case_id!r} "
                                        "(`oespec conformance --list` prints them)")
        if case_id in out:
            raise ExpectedFailuresError(f"{where}: {case_id} is listed twice")
        out[case_id] = reason.strip()
    return out
