"""The committed validator module and schemas are what the generators produce from the registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.generate import GenerationContext, GenerationError
from codegen.generate import jsonschemas, validators
from codegen.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ctx():
    registry = load_registry(ROOT / "profiles.yaml").registry
    return GenerationContext(registry, ROOT)


def test_committed_outputs_are_fresh(ctx):
    for out in validators.generate(ctx) + jsonschemas.generate(ctx):
        assert (ROOT / out.path).read_text() == out.content, out.path
        assert "do not edit" in out.content.splitlines()[0]


def test_generated_module_is_data_only(ctx):
    text = validators.generate(ctx)[0].content
    assert "def " not in text and "import" not in text     # the interpreter is hand-written
    assert "_CANONICAL" not in text


def test_tables_read_from_the_descriptors_match_the_registry(ctx):
    """Defaults, ranges, enum spellings, versions and scopes the interpreter reads from the
    compiled descriptors agree with profiles.yaml, limit by limit."""
    from openengine.validate._tables import tables

    t = tables()
    for p in ctx.registry.profiles:
        rule = t.by_name[p.name]
        assert rule.version == (p.version.major, p.version.minor)
        assert rule.model_scoped == (p.scope.kind == "model")
        assert rule.field == (p.capability.field if p.capability else None)
        for lim in p.limits:
            got = rule.limits[lim.name]
            assert got.default == lim.default, lim.name
            if lim.type.base == "enum":
                assert list(got.enum.values()) == list(lim.type.enum_values), lim.name
            elif lim.minimum is not None or lim.maximum is not None:
                assert (got.low, got.high) == (lim.minimum if lim.minimum is not None else float("-inf"),
                                               lim.maximum if lim.maximum is not None else float("inf"))


def test_combination_rows_follow_the_registry(ctx):
    from openengine.validate import _generated as data

    expected = sum(len(p.requires) for p in ctx.registry.profiles)
    assert len(data.REQUIRES) == expected
    assert len(data.INCOMPATIBLE) == sum(len(p.incompatible_with) for p in ctx.registry.profiles)
