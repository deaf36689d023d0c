"""The conformance test cases. Importing this package registers every case in `CASES`."""

from openengine.conformance.cases.base import CASES, Case, Failed, Skipped, Unchecked, case, expect


# The case modules in the order their cases run. A case registers when its module is first
# imported, and something else (a test, a tool) may import one module before the others, so the
# order is this list's, not the registry's.
MODULES = ("core", "capabilities", "health", "load", "optional", "control", "wire", "alias")


def all_cases() -> list[Case]:
    """Every registered case: module by module in MODULES order, each module's cases in the
    order it defines them (the order they run in)."""
    import importlib

    rank = {importlib.import_module(f"{__name__}.{name}").__name__: i for i, name in enumerate(MODULES)}
    return sorted(CASES.payloads(), key=lambda c: rank.get(c.fn.__module__, len(rank)))


__all__ = ["CASES", "Case", "Failed", "Skipped", "Unchecked", "all_cases", "case", "expect"]
