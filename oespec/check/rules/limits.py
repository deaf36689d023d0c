"""Typed limits: defaults of the right type inside the range, sound bounds, enum values."""

from __future__ import annotations

import math
import re

from oespec.check.rule import CheckContext, Finding, rule
from oespec.check.rules._common import all_limits
from oespec.check.rules.numbering import GENERATED_MESSAGES
from openengine.contractkit.rules import Severity
from oespec.registry.model import INTEGER_BOUNDS, Limit

NUMERIC = ("uint32", "uint64", "int32", "double")
# The generator adds <ENUM>_UNSPECIFIED = 0 to every limit enum.
RESERVED_ENUM_VALUES = ("unspecified",)


def _show(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def _type_words(limit: Limit) -> str:
    if limit.type.base == "enum":
        return f"{'list of ' if limit.type.repeated else ''}value of {', '.join(limit.type.enum_values)}"
    return str(limit.type)


@rule("OE027", "limit-default-type", requirements=("REQ-ADD-004", "REQ-ADD-005"), category="limits",
      purpose="a limit's default has the limit's type (a list for repeated limits, a listed value for enums)")
def limit_default_type(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        if limit.type.base == "enum" and not limit.type.enum_values:
            continue  # OE030: there is nothing to match yet
        if limit.type.accepts(limit.default):
            continue
        if limit.type.repeated and not isinstance(limit.default, list):
            message, hint = "the default of a repeated limit must be a list", "write the default as a list, e.g. []"
        else:
            message, hint = f"default {_show(limit.default)} is not a {_type_words(limit)}", \
                "write a default of the limit's type; it is what absence means"
        yield Finding(limit.at("default"), f"{profile.name}: limit {limit.name}: {message}", hint)


@rule("OE028", "limit-default-range", requirements=("REQ-ADD-004", "REQ-ADD-005"), category="limits",
      purpose="a numeric limit's default lies within its minimum and maximum")
def limit_default_range(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        if limit.type.base not in NUMERIC or not limit.type.accepts(limit.default):
            continue
        values = limit.default if limit.type.repeated else [limit.default]
        for index, value in enumerate(values):
            if not limit.in_range(value):
                key = f"default[{index}]" if limit.type.repeated else "default"
                yield Finding(limit.at(key),
                              f"{profile.name}: limit {limit.name}: default {_show(value)} is outside "
                              f"[{_show(limit.minimum)}, {_show(limit.maximum)}]",
                              "move the default into the range, or widen the range")


def _bound_problem(limit: Limit, value) -> str | None:
    base = limit.type.base
    if base not in NUMERIC:
        return f"is set, but a {limit.type} limit has no bounds"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if base in INTEGER_BOUNDS:
        lo, hi = INTEGER_BOUNDS[base]
        if not isinstance(value, int):
            return f"{_show(value)} is not an integer, and {base} holds only integers"
        if not lo <= value <= hi:
            return f"{value} does not fit in {base} ({lo}..{hi})"
    return None


@rule("OE029", "limit-bounds", requirements=("REQ-ADD-004",), category="limits",
      purpose="minimum and maximum fit the limit's type, only numeric limits have them, and minimum <= maximum")
def limit_bounds(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        sound = True
        for key, value in (("minimum", limit.minimum), ("maximum", limit.maximum)):
            if value is None:
                continue
            problem = _bound_problem(limit, value)
            if problem:
                sound = False
                yield Finding(limit.at(key), f"{profile.name}: limit {limit.name}: {key} {problem}",
                              "write a bound the type can hold, or remove it")
        if sound and limit.minimum is not None and limit.maximum is not None and limit.minimum > limit.maximum:
            yield Finding(limit.at("maximum"),
                          f"{profile.name}: limit {limit.name}: maximum {_show(limit.maximum)} is below minimum {_show(limit.minimum)}",
                          "swap or correct the bounds")


@rule("OE030", "limit-enum-values", requirements=("REQ-ADD-004",), category="limits",
      purpose="enum limits list distinct values (never `unspecified`); other limits have no values or enum name")
def limit_enum_values(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        prefix = f"{profile.name}: limit {limit.name}"
        if limit.type.base != "enum":
            if "values" in limit.locs:
                yield Finding(limit.at("values"), f"{prefix}: a {limit.type} limit has no enum values",
                              "remove `values:`, or make the type enum")
            if "enum" in limit.locs:
                yield Finding(limit.at("enum"), f"{prefix}: a {limit.type} limit has no enum name",
                              "remove `enum:`, or make the type enum")
            continue
        if not limit.type.enum_values:
            yield Finding(limit.at("type"), f"{prefix}: an enum limit without values",
                          "add `values:` listing the lowercase enum values")
        seen = set()
        for index, value in enumerate(limit.type.enum_values):
            if value in RESERVED_ENUM_VALUES:
                yield Finding(limit.at(f"values[{index}]"), f"{prefix}: enum value {value!r} is reserved",
                              "the generated enum already has an UNSPECIFIED zero value; drop it")
            elif value in seen:
                yield Finding(limit.at(f"values[{index}]"), f"{prefix}: enum value {value!r} is listed twice",
                              "list each value once")
            seen.add(value)


@rule("OE031", "enum-name-consistent", requirements=("REQ-ADD-004",), category="limits",
      purpose="limits sharing a generated enum name share its values, and the name is no message's")
def enum_name_consistent(ctx: CheckContext):
    registry = ctx.registry
    messages = set(GENERATED_MESSAGES)
    for profile in registry.profiles:
        if profile.capability is not None:
            messages.add(profile.capability.message)
        messages.update(m.name for m in profile.messages)
    first: dict[str, tuple[str, dict[str, int]]] = {}
    for profile, limit in all_limits(registry):
        if limit.type.base != "enum":
            continue
        name = limit.type.enum_name
        where = limit.at("enum") if "enum" in limit.locs else limit.at("name")
        if name in messages:
            yield Finding(where, f"{profile.name}: limit {limit.name}: enum {name} has the name of a message",
                          "set `enum:` to a name of its own")
        elif name in first and first[name][1] != limit.type.enum_wire:
            yield Finding(where,
                          f"{profile.name}: limit {limit.name}: enum {name} is also {first[name][0]}, with other values",
                          "set `enum:` to a name of its own, or list the same values with the same numbers")
        first.setdefault(name, (f"{profile.name}.{limit.name}", limit.type.enum_wire))


@rule("OE032", "limit-unit", requirements=("REQ-ADD-004",), severity=Severity.WARNING, category="limits",
      purpose="only numeric limits carry a unit")
def limit_unit(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        if limit.unit is not None and limit.type.base not in NUMERIC:
            yield Finding(limit.at("unit"), f"{profile.name}: limit {limit.name}: a {limit.type} limit has a unit",
                          "remove `unit:`; it describes quantities only")


# Name endings that spell a unit other than the unit itself (`timeout_s`, `ttl_secs`).
_UNIT_SPELLINGS = {"s": "seconds", "sec": "seconds", "secs": "seconds", "second": "seconds",
                   "millis": "ms", "msec": "ms", "byte": "bytes", "token": "tokens", "block": "blocks"}


def _unit_named(limit: Limit) -> str | None:
    """The unit a limit's name ends in (`default_heartbeat_ms` -> ms), if it ends in one."""
    from oespec.registry.resolve import registry_schema

    units = set(registry_schema()["$defs"]["unit"]["enum"])
    last = limit.name.rsplit("_", 1)[-1]
    named = _UNIT_SPELLINGS.get(last, last)
    return named if "_" in limit.name and named in units else None


@rule("OE055", "limit-unit-matches-name", requirements=("REQ-ADD-004",), category="limits",
      purpose="a limit whose name ends in a unit (`*_ms`, `*_seconds`, `*_bytes`, ...) declares that unit")
def limit_unit_matches_name(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        named = _unit_named(limit)
        if named is not None and limit.unit is not None and limit.unit != named:
            yield Finding(limit.at("unit"),
                          f"{profile.name}: limit {limit.name} is named in {named} but declares unit "
                          f"{limit.unit!r}",
                          f"write `unit: {named}`, or rename the limit after its unit (clients read the "
                          "name and the unit alike)")


@rule("OE045", "enum-value-number-unique", category="limits", requirements=("REQ-VER-012",),
      purpose="each value of an enum limit has its own wire number (never 0, which is UNSPECIFIED)")
def enum_value_number_unique(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        if limit.type.base != "enum" or not limit.type.numbered:
            continue
        first: dict[int, str] = {}
        for value, number in limit.type.enum_wire.items():
            if number in first:
                free = max(limit.type.enum_numbers) + 1
                yield Finding(limit.at(f"values.{value}"),
                              f"{profile.name}: limit {limit.name}: enum values {first[number]} and {value} "
                              f"share wire number {number}",
                              f"give {value} a number of its own; the next free one is {free}")
            first.setdefault(number, value)


@rule("OE046", "enum-values-numbered", severity=Severity.WARNING, category="limits", requirements=("REQ-VER-012",),
      purpose="enum values are written with their wire numbers, so reordering the YAML never renumbers the wire")
def enum_values_numbered(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        if limit.type.base == "enum" and limit.type.enum_values and not limit.type.numbered:
            mapping = ", ".join(f"{v}: {n}" for v, n in limit.type.enum_wire.items())
            yield Finding(limit.at("values"),
                          f"{profile.name}: limit {limit.name}: enum values are numbered by their position "
                          "in the list, so reordering or inserting one renumbers the wire",
                          f"write the numbers out: values: {{{mapping}}}")


@rule("OE049", "limit-minimum", category="limits", requirements=("REQ-ADD-004",),
      purpose="a numeric limit declares its minimum")
def limit_minimum(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        if limit.type.base in NUMERIC and limit.minimum is None:
            lowest = 0 if limit.type.base in ("uint32", "uint64") else None
            yield Finding(limit.at("type"), f"{profile.name}: limit {limit.name}: a numeric limit without `minimum`",
                          "add `minimum:` with the smallest meaningful value"
                          + (f" (at least {lowest} for {limit.type.base}; often 1)" if lowest is not None else ""))


# A limit is a property of the engine's configuration. Words that describe a moment rather than a
# configuration suggest load or health data (REQ-ADD-009). A heuristic, hence a warning.
STATE_NAME_WORDS = frozenset({"free", "remaining", "available", "current", "used", "idle", "busy", "occupied"})
STATE_PHRASES = ("right now", "currently", "at the moment", "at present", "still", "free", "remaining",
                 "in use", "now")
_STATE_RE = re.compile(r"\b(" + "|".join(re.escape(p) for p in STATE_PHRASES) + r")\b", re.IGNORECASE)


@rule("OE050", "limit-current-state", severity=Severity.WARNING, category="limits", requirements=("REQ-ADD-009",),
      purpose="a limit describes configuration, not current state (a keyword heuristic: free, remaining, "
              "currently, right now, ...)")
def limit_current_state(ctx: CheckContext):
    for profile, limit in all_limits(ctx.registry):
        words = [w for w in limit.name.split("_") if w in STATE_NAME_WORDS]
        found = _STATE_RE.search(limit.description)
        if not words and not found:
            continue
        where = limit.at("name") if words else limit.at("description")
        said = f"its name says {words[0]!r}" if words else f"its description says {found.group(0)!r}"
        yield Finding(where, f"{profile.name}: limit {limit.name} seems to describe current state ({said})",
                      "values that change while the engine runs belong to LoadInfo (load) or health; "
                      "a limit states what the configuration allows")


RULES = [limit_default_type, limit_default_range, limit_bounds, limit_enum_values, enum_name_consistent,
         limit_unit, limit_unit_matches_name, enum_value_number_unique, enum_values_numbered, limit_minimum,
         limit_current_state]
