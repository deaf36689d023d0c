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


def load_expected_failures(path: str | Path, *, known_cases: set[str] | None = None) -> dict[str, str]:
    """Case id -> reason. Unknown case ids, duplicates and missing reasons are errors."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ExpectedFailuresError(f"{p}: cannot read: {err.strerror}") from None
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as err:
        raise ExpectedFailuresError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: "
                                    f"{err}") from None
    if isinstance(data, dict):
        extra = set(data) - {"expected_failures"}
        if extra:
            raise ExpectedFailuresError(f"{p}: unknown top-level keys {sorted(extra)}; "
                                        "use `expected_failures`")
        data = data.get("expected_failures") or []
    if data is None:
        data = []
    if not isinstance(data, list):
        raise ExpectedFailuresError(f"{p}: expected a list of entries with `case` and `reason`")
    out: dict[str, str] = {}
    for i, entry in enumerate(data, 1):
        where = f"{p}: entry {i}"
        if not isinstance(entry, dict):
            raise ExpectedFailuresError(f"{where}: expected a mapping with `case` and `reason`")
        extra = set(entry) - {"case", "reason"}
        if extra:
            raise ExpectedFailuresError(f"{where}: unknown keys {sorted(extra)}")
        case_id, reason = entry.get("case"), entry.get("reason")
        if not isinstance(case_id, str) or not case_id.strip():
            raise ExpectedFailuresError(f"{where}: `case` must name a case id")
        if not isinstance(reason, str) or not reason.strip():
            raise ExpectedFailuresError(f"{where} ({case_id}): `reason` is required; say why it fails")
        if known_cases is not None and case_id not in known_cases:
            raise ExpectedFailuresError(f"{where}: unknown case id {case_id!r} "
                                        "(`oespec conformance --list` prints them)")
        if case_id in out:
            raise ExpectedFailuresError(f"{where}: {case_id} is listed twice")
        out[case_id] = reason.strip()
    return out
