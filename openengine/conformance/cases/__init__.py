"""The conformance test cases. Importing this package registers every case in `CASES`."""

from openengine.conformance.cases.base import CASES, Case, Failed, Skipped, Unchecked, case, expect


def all_cases() -> list[Case]:
    """Every registered case, in registration order (the order they run in)."""
    from openengine.conformance.cases import (  # noqa: F401  (imported for registration)
        core, capabilities, health, load, optional, control, wire, alias,
    )
    return CASES.payloads()


__all__ = ["CASES", "Case", "Failed", "Skipped", "Unchecked", "all_cases", "case", "expect"]
