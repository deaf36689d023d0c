"""Ownership follows the wire: the type graph, who reaches what, and the registry element behind a
finding on a generated file."""

from __future__ import annotations


import pytest

from oespec.breaking.match import contract_changes
from oespec.breaking.ownership import WireGraph, attribute, owners_by_type
from oespec.registry import load_registry
from tests.fixture_cases import breaking_side


@pytest.fixture(scope="module")
def registry():
    path = breaking_side("wire-transitive-message", "baseline") / "profiles.yaml"
    return load_registry(path, display_path="profiles.yaml").registry


def _graph() -> WireGraph:
    return WireGraph(edges={
        "GenerateRequest": {"KvTransferParams", "SamplingParams"},
        "SamplingParams": {"SamplingParams.Bias"},
        "SamplingParams.Bias": set(),
        "KvTransferParams": set(),
        "GenerateResponse": set(),
        "GetCapabilitiesRequest": set(),
        "Capabilities": {"GenerationCapabilities", "KvCapabilities"},
        "GenerationCapabilities": set(),
        "KvCapabilities": set(),
        "Shared": set(),
    })


def test_a_message_is_owned_by_every_profile_that_reaches_it(registry):
    owners = owners_by_type(registry, _graph())
    assert owners["KvTransferParams"] == {"openengine.core", "openengine.kv"}
    assert owners["SamplingParams.Bias"] == {"openengine.core"}   # nested, two hops from core's request
    assert "Shared" not in owners


def test_a_capability_message_belongs_to_its_profile_only(registry):
    owners = owners_by_type(registry, _graph())
    assert owners["KvCapabilities"] == {"openengine.kv"}
    assert owners["GenerationCapabilities"] == {"openengine.core"}


def test_a_finding_on_a_generated_service_names_the_registry_rpc(registry):
    found = attribute('Previously present RPC "LoadAdapter" on service "Adapters" was deleted.',
                      registry, registry, _graph(), generated=True)
    rpc = registry.profile("openengine.adapters").rpcs[0]
    assert found.owners == {"openengine.adapters"}
    assert found.origin.loc == rpc.loc and found.origin.side == "current" and "LoadAdapter" in found.origin.what


def test_a_finding_on_a_generated_enum_names_the_limit_values(registry):
    found = attribute('Previously present enum value "2" on enum "Delivery" was deleted.',
                      registry, registry, _graph(), generated=True)
    limit = registry.profile("openengine.load").limit("delivery")
    assert found.origin.loc == limit.locs["values"] and found.origin.profile == "openengine.load"


def test_an_element_no_profile_reaches_is_shared(registry):
    found = attribute('Previously present field "1" with name "x" on message "Shared" was deleted.',
                      registry, registry, _graph())
    assert found.owners == set() and found.shared


def test_changes_name_the_facet_with_old_and_new(registry):
    core = registry.profile("openengine.core")
    limit = core.limit("max_logprobs")
    changed = type(core)(**{**core.__dict__, "limits": (type(limit)(**{**limit.__dict__, "unit": "tokens"}),
                                                        *core.limits[1:])})
    assert contract_changes(core, changed) == ["limit max_logprobs.unit: candidates -> tokens"]
    reordered = type(core)(**{**core.__dict__, "limits": tuple(reversed(core.limits))})
    assert contract_changes(core, reordered) == []


def test_every_finding_on_a_generated_file_names_a_registry_element(registry):
    found = attribute('Previously present field "1" with name "profiles" on message "Capabilities" was deleted.',
                      registry, registry, _graph(), generated=True)
    assert found.origin is not None and found.origin.loc == registry.locs["registry"]
    assert attribute('Previously present field "1" with name "x" on message "Shared" was deleted.',
                     registry, registry, _graph(), generated=False).origin is None
