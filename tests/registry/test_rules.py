"""Rule-runner behaviour that the fixtures alone do not show."""

from __future__ import annotations

from pathlib import Path

import pytest

from oespec.check import RULES, run_rules
from oespec.registry import load_registry_text

MINIMAL = (Path(__file__).resolve().parents[1] / "data" / "registry" / "valid" / "minimal" / "profiles.yaml").read_text()


def _profile(name: str, requires: str) -> str:
    return (f"  - name: {name}\n    version: \"1.0\"\n    scope: engine\n    summary: x.\n    description: x.\n"
            f"    history:\n      - version: \"1.0\"\n        changes: x.\n"
            f"    requires:\n      - profile: {requires}\n        version: \">= 1.0\"\n")


def test_yaml_rules_run_even_when_the_schema_fails():
    text = MINIMAL.replace("    scope: engine\n    summary: Load signals.",
                           "    scope: engine\n    scope: engine\n    colour: red\n    summary: Load signals.")
    resolved = load_registry_text(text)
    assert resolved.registry is None
    assert sorted(d.rule_id for d in run_rules(resolved)) == ["OE001", "OE002"]


@pytest.mark.slow
def test_a_long_chain_of_prerequisites_is_checked_without_recursion():
    count = 1100  # deeper than Python's default recursion limit
    chain = "".join(_profile(f"openengine.p{i}", f"openengine.p{i + 1}" if i + 1 < count else "openengine.p0")
                    for i in range(count))
    findings = run_rules(load_registry_text(MINIMAL + chain))
    assert [d.rule_id for d in findings] == ["OE038"]


def test_a_subset_of_rules_can_be_run():
    text = MINIMAL.replace('    summary: Load signals.', '    summary: " "').replace("      number: 11", "      number: 10")
    resolved = load_registry_text(text)
    only = [r for r in RULES if r.id == "OE022"]
    assert [d.rule_id for d in run_rules(resolved, rules=only)] == ["OE022"]
    assert sorted(d.rule_id for d in run_rules(resolved)) == ["OE005", "OE022"]


class _CountedProfiles(tuple):
    """The registry's profiles, counting every profile any rule visits."""

    visited = 0

    def __iter__(self):
        for profile in tuple.__iter__(self):
            type(self).visited += 1
            yield profile


def _profiles_visited(extra: int) -> int:
    from dataclasses import replace

    from oespec.registry import Resolved

    chain = "".join(_profile(f"openengine.p{i}", "openengine.core") for i in range(extra))
    resolved = load_registry_text(MINIMAL + chain)
    assert resolved.registry is not None
    _CountedProfiles.visited = 0
    counted = replace(resolved.registry, profiles=_CountedProfiles(resolved.registry.profiles))
    run_rules(Resolved(resolved.source, counted, []))
    return _CountedProfiles.visited


def test_the_rules_visit_each_profile_a_bounded_number_of_times():
    """Linear in the number of profiles: doubling them at most doubles the profiles visited (a
    rule that looks every profile up again for each profile visits four times as many)."""
    small, large = _profiles_visited(40), _profiles_visited(80)
    assert large <= 2.2 * small, (small, large)
