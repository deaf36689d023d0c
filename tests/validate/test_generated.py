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


def test_constants_are_inlined_from_the_registry(ctx):
    text = validators.generate(ctx)[0].content
    core = ctx.registry.profile("openengine.core")
    assert "if v < 1 or v > 1024:" in text       # max_sequences range, inlined
    assert "DEFAULTS" in text and repr(core.limit("max_logprobs").default) in text
    assert "from codegen" not in text and "import codegen" not in text   # nothing read at run time


def test_missing_enum_in_the_contract_is_a_generation_error(ctx):
    fds = validators.descriptor_set(ctx)
    stripped = type(fds)()
    stripped.CopyFrom(fds)
    for f in stripped.file:
        for i in reversed(range(len(f.enum_type))):
            if f.enum_type[i].name == "PauseMode":
                del f.enum_type[i]
    with pytest.raises(GenerationError):
        validators._enums(ctx.registry, stripped)
