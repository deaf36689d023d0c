"""The toolkit's name for the one diagnostic record and its printers (`openengine.contractkit.diagnostics`),
kept so every stage imports them from one familiar place."""

from openengine.contractkit.diagnostics import (  # noqa: F401
    NO_CONTEXT, NOWHERE, PRINTERS, Context, Diagnostic, Loc, Severity, exit_code, printable, render,
    render_github, render_json, render_junit, render_sarif, render_text, sorted_diagnostics,
)
