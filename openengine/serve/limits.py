"""Limit values as the contract types them: a declared value checked against its limit's type and
range (`coerce`), and a checked value as its capability message field takes it (`to_wire`)."""

from __future__ import annotations

from typing import Any

from openengine.contract import LimitInfo


def coerce(lim: LimitInfo, value: Any) -> Any:
    """Check a configured value against the limit's type and range; return it normalised
    (enum values as registry spellings). Raises ValueError naming the problem."""
    if lim.repeated:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{lim.reference} takes a list, got {value!r}")
        return [_coerce_one(lim, v) for v in value]
    return _coerce_one(lim, value)


def _coerce_one(lim: LimitInfo, value: Any) -> Any:
    kind = lim.kind
    if kind == "bool":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise ValueError(f"{lim.reference} takes true or false, got {value!r}")
        return value
    if kind in ("uint", "int"):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{lim.reference} takes an integer, got {value!r}")
        if kind == "uint" and value < 0:
            raise ValueError(f"{lim.reference} takes a non-negative integer, got {value}")
        _check_range(lim, value)
        return value
    if kind == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{lim.reference} takes a number, got {value!r}")
        _check_range(lim, value)
        return float(value)
    if kind == "enum":
        spellings = lim.enum_spellings()
        if value not in spellings:
            raise ValueError(f"{lim.reference}: {value!r} is not one of {', '.join(spellings)}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{lim.reference} takes a string, got {value!r}")
    return value


def _check_range(lim: LimitInfo, value) -> None:
    if lim.minimum is not None and value < lim.minimum:
        raise ValueError(f"{lim.reference} = {value} is below its minimum {lim.minimum}")
    if lim.maximum is not None and value > lim.maximum:
        raise ValueError(f"{lim.reference} = {value} is above its maximum {lim.maximum}")


def to_wire(lim: LimitInfo, value: Any) -> Any:
    """A normalised value as the capability message field takes it."""
    if lim.kind == "enum":
        spellings = lim.enum_spellings()
        return [spellings[v] for v in value] if lim.repeated else spellings[value]
    return value
