"""The OpenEngine conformance runner: tells an engine author, requirement by requirement, whether
an engine conforms.

    from openengine.conformance import Options, run

    report = run(Options(target="127.0.0.1:50051"))
    report.ok, report.results, report.coverage

Every case has a stable id (`load.watch.settings-first`) and cites the spec requirements it
checks. An engine of upstream's layout alone is judged like any other: each requirement the
proposal adds fails with what to add, so the report reads as a migration checklist.
"""

from openengine.conformance.cases import CASES, Case, Failed, Skipped, all_cases
from openengine.conformance.context import Options
from openengine.conformance.expected import ExpectedFailuresError, load_expected_failures
from openengine.conformance.matrix import Coverage, coverage, render_matrix
from openengine.conformance.report import (
    Progress, render_json, render_junit, render_text, report_document,
)
from openengine.conformance.runner import (
    CaseResult, Outcome, Report, plan, run, run_suite, unmatched_patterns,
)
from openengine.conformance.target import TargetUnusable, parse_target

__all__ = [
    "CASES", "Case", "CaseResult", "Coverage", "ExpectedFailuresError", "Failed", "Options",
    "Outcome", "Progress", "Report", "Skipped", "all_cases", "coverage", "load_expected_failures",
    "plan", "render_json", "render_junit", "render_matrix", "render_text", "report_document", "run",
    "run_suite",
    "TargetUnusable", "parse_target", "unmatched_patterns",
]
