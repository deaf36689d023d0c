"""The committed schemas are what the generators produce, and the validators' tables, read from the
compiled descriptors, say what the registry says."""

from __future__ import annotations

from pathlib import Path

import pytest

from oespec.generate import GenerationContext
from oespec.generate import jsonschemas
from oespec.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ctx():
    registry = load_registry(ROOT / "profiles.yaml").registry
    return GenerationContext(registry, ROOT)


def test_committed_schemas_are_fresh(ctx):
    for out in jsonschemas.generate(ctx):
        assert (ROOT / out.path).read_text() == out.content, out.path
        assert "do not edit" in out.content.splitlines()[0]


def test_no_generated_validator_module():
    """The validators interpret tables; there is no generated Python left to go stale."""
    assert not (ROOT / "openengine" / "validate" / "_generated.py").exists()


def test_tables_read_from_the_descriptors_match_the_registry(ctx):
    """Defaults, ranges, enum spellings, versions, scopes and roles the validators read from the
    compiled descriptors agree with profiles.yaml, limit by limit."""
    from openengine.contract import catalogue
    from openengine.validate._tables import REGISTRY_REVISION

    cat = catalogue()
    assert REGISTRY_REVISION == ctx.registry.revision
    for p in ctx.registry.profiles:
        got_profile = cat.profile(p.name)
        assert got_profile.version == (p.version.major, p.version.minor)
        assert got_profile.scope == p.scope.kind
        assert got_profile.capability_field == (p.capability.field if p.capability else None)
        for lim in p.limits:
            got = got_profile.limit(lim.name)
            assert got.default == lim.default, lim.name
            if lim.type.base == "enum":
                assert list(got.enum_spellings()) == list(lim.type.enum_values), lim.name
            elif lim.minimum is not None or lim.maximum is not None:
                assert (got.minimum, got.maximum) == (lim.minimum, lim.maximum)


@pytest.mark.parametrize("bad", [0, 1025])
def test_a_range_from_the_descriptors_is_enforced(bad):
    from openengine.v1 import capabilities_pb2
    from openengine.validate import check_capabilities

    from tests.validate.conftest import caps as make_caps

    caps = make_caps()
    caps.core.max_sequences = bad
    found = [v for v in check_capabilities(caps) if v.rule_id == "OEV111"]
    assert [v.path for v in found] == ["core.max_sequences"] and found[0].expected == "1..1024"
