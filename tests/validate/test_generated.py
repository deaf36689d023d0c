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
    """Defaults, ranges, enum spellings, versions, scopes and roles the interpreter reads from the
    compiled descriptors agree with profiles.yaml, limit by limit."""
    from openengine.validate._tables import REGISTRY_REVISION, tables

    t = tables()
    assert REGISTRY_REVISION == ctx.registry.revision
    for p in ctx.registry.profiles:
        rule = t.by_name[p.name]
        assert rule.version == (p.version.major, p.version.minor)
        assert rule.model_scoped == (p.scope.kind == "model")
        assert rule.field == (p.capability.field if p.capability else None)
        assert bool(rule.roles) == (p.scope.kind == "role")
        for lim in p.limits:
            got = rule.limits[lim.name]
            assert got.default == lim.default, lim.name
            if lim.type.base == "enum":
                assert list(got.enum.values()) == list(lim.type.enum_values), lim.name
            elif lim.minimum is not None or lim.maximum is not None:
                assert (got.low, got.high) == (lim.minimum if lim.minimum is not None else float("-inf"),
                                               lim.maximum if lim.maximum is not None else float("inf"))


@pytest.mark.parametrize("bad", [0, 1025])
def test_a_range_from_the_descriptors_is_enforced(bad):
    from openengine.v1 import capabilities_pb2
    from openengine.validate import check_capabilities

    from tests.validate.conftest import caps as make_caps

    caps = make_caps()
    caps.core.max_sequences = bad
    found = [v for v in check_capabilities(caps) if v.rule_id == "OEV111"]
    assert [v.path for v in found] == ["core.max_sequences"] and found[0].expected == "1..1024"
