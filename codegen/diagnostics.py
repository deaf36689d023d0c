"""The toolkit's name for the one diagnostic record and its printers (`contractkit.diagnostics`),
kept so every stage imports them from one familiar place."""

from contractkit.diagnostics import (  # noqa: F401
    NOWHERE, PRINTERS, Diagnostic, Loc, Severity, exit_code, render_github, render_json, render_junit,
    render_text, sorted_diagnostics,
)
