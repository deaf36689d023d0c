"""Rules about the YAML document itself; they run even when the schema stage failed."""

from __future__ import annotations

from oespec.check.rule import CheckContext, Finding, rule
from oespec.registry.resolve import SCHEMA_RULE


@rule(SCHEMA_RULE, "schema", requirements=("REQ-ADD-003", "REQ-ADD-004", "REQ-ADD-010", "REQ-VER-007"), category="schema",
      purpose="profiles.yaml follows the registry's JSON Schema (keys, types, required fields)",
      needs_model=False)
def schema(ctx: CheckContext):
    # Findings of this rule come from the resolve stage; it is listed so --list-rules shows it.
    return ()


@rule("OE002", "duplicate-yaml-key", category="yaml",
      purpose="a mapping never repeats a key (YAML parsers silently keep the last)", needs_model=False)
def duplicate_yaml_key(ctx: CheckContext):
    for key, loc, first in ctx.source.walk_duplicates():
        yield Finding(loc, f"key {key!r} repeats the one at line {first.line}",
                      "remove one of the two; only the first value is read")


RULES = [schema, duplicate_yaml_key]
