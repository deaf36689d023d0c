"""The conformance test cases. Importing this package registers every case in `CASES`, in the
order cases run and are published in: the package imports its case modules here, in that order,
before any case module a test or a tool imports first can register."""

from openengine.conformance.cases.base import CASES, Case, Failed, Skipped, Unchecked, case, expect
from openengine.conformance.cases import (  # noqa: E402,F401  (imported for registration, in order)
    core, saturation, capabilities, health, load, overload, optional, admin_events, hostile,
)


def all_cases() -> list[Case]:
    """Every registered case, in registration order (the order they run in)."""
    return CASES.payloads()


__all__ = ["CASES", "Case", "Failed", "Skipped", "Unchecked", "all_cases", "case", "expect"]
