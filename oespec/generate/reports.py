"""The site's Conformance page: the published conformance reports (`conformance/reports/*.json`,
written by `oespec conformance --report`) as a matrix of engines by profiles.

The reports are inputs like profiles.yaml: `oespec generate` rebuilds the page from the committed
reports, and `oespec generate --check` finds the page stale when a report changed. A report that
is not valid JSON or does not match `schemas/conformance_report.schema.json` stops generation with
its file named, never with a page built from half a report. Every string from a report is engine
output, so it reaches the page only through `mdsafe`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from oespec.generate import GenerationError, Problem
from oespec.generate.mdsafe import Md, anchor_id, cell
from openengine.contractkit.locations import Loc

REPORTS_DIR = "conformance/reports"
REPORT_SCHEMA_FILE = "schemas/conformance_report.schema.json"
PAGE = "conformance-reports.md"
# The outcomes a matrix cell counts, in the order it shows them; the others are rare enough to
# show only when present.
CELL_OUTCOMES = ("pass", "fail", "unchecked", "skip")
OTHER_OUTCOMES = ("error", "xfail", "stale")
NOT_ADVERTISED = "not advertised"


@dataclass
class EngineReport:
    """One report as the page shows it: the document as written, and its outcomes by profile."""

    file: str                      # checkout-relative path of the report
    doc: dict                      # the report, valid against the schema

    @cached_property
    def by_profile(self) -> dict[str, dict[str, int]]:
        """Profile -> outcome -> how many of its cases had it."""
        by_profile: dict[str, dict[str, int]] = {}
        for result in self.doc["results"]:
            counts = by_profile.setdefault(result["profile"], {})
            counts[result["outcome"]] = counts.get(result["outcome"], 0) + 1
        return by_profile

    @property
    def anchor(self) -> Md:
        return Md("engine-" + anchor_id(Path(self.file).stem))

    @property
    def counts(self) -> str:
        """The verdict's outcome counts in words (`pass 12, fail 1`)."""
        return ", ".join(f"{o} {n}" for o, n in self.doc["verdict"]["counts"].items() if n) or "no case ran"

    @property
    def gaps(self) -> list[dict]:
        """The failed cases (a migration checklist when discovery is not served)."""
        return [r for r in self.doc["results"] if r["outcome"] in ("fail", "error", "stale")]

    @property
    def migrating(self) -> bool:
        """An engine of upstream's layout alone: it does not serve the profiles' discovery."""
        return self.doc["implementation"]["discovery"] != "served"

    @property
    def advertised(self) -> dict[str, str]:
        """Profile -> the version the engine advertised."""
        return {p["name"]: p["version"] for p in self.doc["profiles"]["advertised"]}

    def cell(self, profile: str, *, mandatory: bool = False) -> str:
        """A matrix cell: the outcome counts of a judged profile's cases (advertised, forced, or
        the mandatory one, which is judged whatever the engine lists), else `not advertised` with
        how its absence checked out."""
        counts = self.by_profile.get(profile, {})
        shown = ", ".join(f"{outcome} {counts.get(outcome, 0)}" for outcome in CELL_OUTCOMES + OTHER_OUTCOMES
                          if counts.get(outcome) or outcome in CELL_OUTCOMES)
        if profile in self.advertised:
            return shown
        if profile in self.doc["profiles"]["forced"]:
            return f"forced: {shown}"
        if mandatory and counts:
            return f"{shown} (not listed: no Discovery)" if self.migrating else f"{shown} (not listed)"
        if not counts:
            return NOT_ADVERTISED
        absent = ", ".join(f"{o} {n}" for o, n in counts.items() if n)
        return f"{NOT_ADVERTISED} (absence: {absent})"


def schema_validator(root: Path):
    import jsonschema

    schema = json.loads((Path(root) / REPORT_SCHEMA_FILE).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def report_files(root: Path) -> list[Path]:
    return sorted((Path(root) / REPORTS_DIR).glob("*.json"))


def read_report(path: Path, rel: str, validator) -> dict:
    """The report at `path`, valid against the schema; a located GenerationError otherwise."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise _refused(rel, Loc(1, 1), f"cannot read the report: {err}") from None
    except json.JSONDecodeError as err:
        raise _refused(rel, Loc(err.lineno, err.colno), f"not JSON: {err.msg}") from None
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        raise _refused(rel, Loc(1, 1), f"does not match {REPORT_SCHEMA_FILE} at {where}: {first.message}"
                       + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    return doc


def _refused(rel: str, loc: Loc, message: str) -> GenerationError:
    hint = f"regenerate it with `make conformance-reports`, or remove it from {REPORTS_DIR}/"
    return GenerationError("reports", f"{rel}: {message}", problems=[Problem(rel, loc, message, hint)])


def load_reports(root: Path) -> list[EngineReport]:
    """Every committed report, in file-name order, each checked against the schema."""
    files = report_files(root)
    if not files:
        return []
    validator = schema_validator(root)
    return [EngineReport(rel, read_report(path, rel, validator))
            for path in files for rel in [path.relative_to(root).as_posix()]]


def profile_columns(registry_profiles: list[str], reports: list[EngineReport]) -> list[str]:
    """The registry's profiles in its order, then any other profile a report names."""
    return list(dict.fromkeys([*registry_profiles, *(name for report in reports
                                                     for name in (*report.by_profile, *report.advertised))]))


def date_shown(date: str) -> Md:
    """`2026-12-05T08:42:01.123+00:00` -> `2026-12-05 08:42 UTC`: the page is for readers."""
    from datetime import datetime, timezone

    try:
        when = datetime.fromisoformat(date).astimezone(timezone.utc)
    except ValueError:
        return cell(date)
    return Md(when.strftime("%Y-%m-%d %H:%M UTC"))
