"""Rules about the YAML document itself; they run even when the schema stage failed (whose own
findings, OE001, come from `oespec.registry.resolve`)."""

from __future__ import annotations

from oespec.check.rule import CheckContext, Finding, rule


@rule("OE002", "duplicate-yaml-key", category="yaml",
      purpose="a mapping never repeats a key (YAML parsers silently keep the last)", needs_model=False)
def duplicate_yaml_key(ctx: CheckContext):
    for key, loc, first in ctx.source.walk_duplicates():
        yield Finding(loc, f"key {key!r} repeats the one at line {first.line}",
                      "remove one of the two; only the first value is read")


RULES = [duplicate_yaml_key]
