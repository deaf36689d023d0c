"""The Jinja environment every generator renders its templates with."""

from __future__ import annotations

import textwrap
from functools import lru_cache

import jinja2

from oespec.generate import header


def _comment(text: str, indent: int = 0, prefix: str = "//", width: int = 96) -> str:
    """Free text as comment lines wrapped at `width`, keeping blank-line paragraph breaks."""
    lines: list[str] = []
    for paragraph in str(text or "").strip().split("\n\n"):
        flat = " ".join(paragraph.split())
        if not flat:
            continue
        if lines:
            lines.append(prefix)
        lines += [f"{prefix} {line}" for line in textwrap.wrap(flat, width=width - len(prefix) - 1)]
    return "\n".join(" " * indent + line for line in lines)


def make_environment(**overrides) -> jinja2.Environment:
    """The settings every template of the toolkit is written for: undefined names are errors,
    block tags leave no blank lines. Compiled templates are cached on disk (in the temporary
    directory, keyed by template source), since compiling them costs more than rendering."""
    return jinja2.Environment(**{
        "loader": jinja2.PackageLoader("oespec.generate", "templates"), "undefined": jinja2.StrictUndefined,
        "keep_trailing_newline": True, "trim_blocks": True, "lstrip_blocks": True, "autoescape": False,
        "bytecode_cache": jinja2.FileSystemBytecodeCache(), **overrides})


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = make_environment()
    # dot: a DOT string, quoted, with backslashes, quotes and newlines escaped
    env.filters.update(comment=_comment, dot=lambda text: '"' + str(text).replace("\\", "\\\\").replace(
        '"', '\\"').replace("\n", "\\n") + '"')
    env.globals["header"] = header
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
