"""What a limit condition of an incompatible combination means, and how it is written.

A condition is `<profile>.<limit> <operator> <value>` over the effective value of a limit (the
advertised value, or the default when absent). The registry checks, the generated contract and the
runtime's `combination_problems` all evaluate and print conditions with these two functions.
"""

from __future__ import annotations

from typing import Any

CONDITION_OPERATORS = ("equals", "not_equals", "at_least", "at_most", "contains")
_SYMBOLS = {"equals": "==", "not_equals": "!=", "at_least": ">=", "at_most": "<=", "contains": "contains"}


def condition_holds(operator: str, expected: Any, actual: Any) -> bool:
    """Does the effective value `actual` satisfy `<operator> expected`?"""
    if operator == "equals":
        return actual == expected
    if operator == "not_equals":
        return actual != expected
    if operator == "contains":
        return isinstance(actual, (list, tuple)) and expected in actual
    if isinstance(actual, bool) or not isinstance(actual, (int, float)):
        return False
    if operator == "at_least":
        return actual >= expected
    if operator == "at_most":
        return actual <= expected
    return False


def condition_text(reference: str, operator: str, expected: Any) -> str:
    """`openengine.core.speculative_decoding == true`."""
    value = str(expected).lower() if isinstance(expected, bool) else expected
    return f"{reference} {_SYMBOLS[operator]} {value}"
