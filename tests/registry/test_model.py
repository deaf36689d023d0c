"""The typed model: versions, ranges, limit types and conditions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openengine.contractkit.conditions import condition_holds

from oespec.registry import Condition, LimitType, Version, VersionRange, load_registry_text


def test_versions_order_numerically():
    assert Version.parse("1.10") > Version.parse("1.9") > Version.parse("1.0")
    assert str(Version.parse(" 2.3 ")) == "2.3"


@pytest.mark.parametrize("text", ["1", "1.0.0", "01.0", "1.01", "v1.0", "", "1.-1"])
def test_bad_versions(text):
    with pytest.raises(ValueError):
        Version.parse(text)


def test_ranges():
    r = VersionRange.parse(">= 1.2, < 2.0")
    assert r.contains(Version(1, 2)) and r.contains(Version(1, 99))
    assert not r.contains(Version(2, 0)) and not r.contains(Version(1, 1))
    assert VersionRange.parse("== 1.0").contains(Version(1, 0))
    assert not VersionRange.parse("> 1.0").contains(Version(1, 0))
    assert str(r) == ">= 1.2, < 2.0"


@pytest.mark.parametrize("text", ["1.0", ">= 1.0,", "~1.0", ">= 1", ""])
def test_bad_ranges(text):
    with pytest.raises(ValueError):
        VersionRange.parse(text)


def test_limit_types():
    assert LimitType.parse("uint32").accepts(4294967295)
    assert not LimitType.parse("uint32").accepts(4294967296)
    assert not LimitType.parse("uint32").accepts(True)
    assert not LimitType.parse("int32").accepts(1.0)
    assert LimitType.parse("double").accepts(1) and not LimitType.parse("double").accepts(False)
    assert LimitType.parse("repeated string").accepts(["a"]) and not LimitType.parse("repeated string").accepts("a")
    mode = LimitType.parse("repeated enum", "Mode", ["a", "b"])
    assert mode.accepts(["a"]) and not mode.accepts(["c"]) and mode.enum_name == "Mode"
    with pytest.raises(ValueError):
        LimitType.parse("optional uint32")


@pytest.mark.parametrize("operator, value, actual, holds", [
    ("equals", True, True, True), ("not_equals", True, True, False),
    ("at_least", 2, 2, True), ("at_most", 2, 3, False), ("at_least", 2, True, False),
    ("contains", "regex", ["regex"], True), ("contains", "regex", "regex", False),
])
def test_conditions(operator, value, actual, holds):
    assert condition_holds(operator, value, actual) is holds


def test_condition_reference_without_profile():
    assert Condition("", "speculative_decoding", "equals", True).reference == "speculative_decoding"


MINIMAL = (Path(__file__).resolve().parents[1] / "data" / "registry" / "valid" / "minimal" / "profiles.yaml"
           ).read_text(encoding="utf-8")


def _load_profile(extra: str, *, version: str | None = None):
    text = MINIMAL.replace("  - name: openengine.load\n", "  - name: openengine.load\n" + extra, 1)
    if version:
        at = text.index("  - name: openengine.load\n")
        text = text[:at] + re.sub(r'(?m)^    version: "[0-9.]+"$', f'    version: "{version}"', text[at:], count=1)
    resolved = load_registry_text(text, "profiles.yaml")
    return resolved, (resolved.registry.profile("openengine.load") if resolved.registry else None)


@pytest.mark.parametrize("extra, version, stability", [
    ("", None, "stable"),
    ("", "0.3", "experimental"),
    ("    deprecated: Use openengine.load2.\n", None, "deprecated"),
    ("    stability: experimental\n", None, "experimental"),
    ("    stability: stable\n", "0.3", "stable"),
])
def test_stability_is_as_written_or_implied_by_version_and_deprecation(extra, version, stability):
    resolved, profile = _load_profile(extra, version=version)
    assert profile is not None, resolved.diagnostics
    assert profile.stability == stability


def test_an_unknown_stability_is_refused_where_it_is_written():
    resolved, _ = _load_profile("    stability: beta\n")
    found = [d for d in resolved.diagnostics if "stability" in d.message]
    assert found and found[0].rule_id == "OE001" and "'beta' is not one of" in found[0].message
    assert found[0].line > 1
