"""Prerequisites and incompatible combinations: start-up and UpdateConfig refuse the same thing.

Every `incompatible_with` declaration of the compiled contract is driven through both paths: the
configuration that makes all its conditions hold is refused by `resolve_config`, and the same
values sent to a running engine through `UpdateConfig` are refused with the same message. The
rules the current catalogue cannot exercise through limits alone (a prerequisite's version range,
an incompatibility without conditions) run on a catalogue derived from the compiled one.
"""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from openengine.contract import (
    Catalogue, Incompatibility, LimitCondition, Prerequisite, catalogue, combination_problems,
)
from openengine.contractkit.versions import VersionRange
from openengine.engine import ConfigError, resolve_config
from openengine.v1 import admin_pb2, capabilities_pb2, common_pb2
from openengine.validate import check_capabilities
from tests.engine.conftest import AUTH, config, running

CAT = catalogue()
DECLARED = [(profile, inc) for profile in CAT.profiles for inc in profile.incompatible_with]


def _satisfying(condition: LimitCondition):
    """A value of the condition's limit for which the condition holds."""
    lim = CAT.limit(condition.reference)
    if condition.operator == "contains":
        return [condition.value]
    if condition.operator == "not_equals":
        return (not condition.value) if lim.kind == "bool" else condition.value + 1
    return condition.value


def _limit_update(reference: str, value) -> admin_pb2.LimitUpdate:
    lim = CAT.limit(reference)
    if lim.repeated:
        return admin_pb2.LimitUpdate(limit=reference, string_values=common_pb2.StringList(values=value))
    field = {"bool": "bool_value", "uint": "uint_value", "int": "int_value", "double": "double_value",
             "enum": "string_value", "string": "string_value"}[lim.kind]
    return admin_pb2.LimitUpdate(limit=reference, **{field: value})


def _setting(profile, inc: Incompatibility) -> tuple[str, tuple[str, ...]]:
    """The role and profiles that let the declaration apply (the owner, the other profile, the
    profiles the conditions read, and admin to update them)."""
    names = {profile.name, *(c.profile for c in inc.when), "openengine.admin"}
    if inc.profile:
        names.add(inc.profile)
    pending = list(names)
    while pending:             # and every prerequisite of those, so the declaration alone is refused
        for req in CAT.profile(pending.pop()).requires:
            if req.profile not in names:
                names.add(req.profile)
                pending.append(req.profile)
    roles = [CAT.profile(n).roles for n in names if CAT.profile(n).scope == "role"]
    role = roles[0][0] if roles else "aggregated"
    return role, tuple(sorted(names))


def _refusal_at_start(role, profiles, values, *, cat=None) -> list[str]:
    limits: dict[str, dict] = {"openengine.admin": {"updatable_limits": sorted(values)}}
    for reference, value in values.items():
        lim = CAT.limit(reference)
        limits.setdefault(lim.profile, {})[lim.name] = value
    with pytest.raises(ConfigError) as err:
        resolve_config(config(role=role, profiles=profiles, limits=limits), cat=cat)
    return err.value.problems


def _refusal_at_run_time(engine, stubs, values) -> str:
    request = admin_pb2.UpdateConfigRequest(
        updates=[_limit_update(ref, value) for ref, value in values.items()], validate_only=True)
    with pytest.raises(grpc.RpcError) as err:
        stubs.admin.UpdateConfig(request, metadata=AUTH)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return err.value.details()


@pytest.mark.parametrize(("profile", "inc"), DECLARED,
                         ids=[f"{p.short_name}-{i}" for i, (p, _) in enumerate(DECLARED)])
def test_every_declared_incompatibility_is_refused_at_start_and_by_update_config(profile, inc):
    role, profiles = _setting(profile, inc)
    values = {c.reference: _satisfying(c) for c in inc.when}
    at_start = [p for p in _refusal_at_start(role, profiles, values) if inc.reason in p]
    assert len(at_start) == 1, at_start
    message = at_start[0]
    # The message names the combination and every condition (never an empty `while :`).
    assert message.startswith(f"{profile.name} cannot be served")
    assert all(str(c) in message for c in inc.when) and "while :" not in message

    if inc.when:   # an unconditional declaration has no limits to update: no engine serves both
        admin = {"updatable_limits": sorted(values)}
        with running(role=role, profiles=profiles, limits={"openengine.admin": admin}) as (engine, stubs):
            assert message in _refusal_at_run_time(engine, stubs, values)
            assert engine.state.revision == 1  # nothing applied

    # A client's validators judge the same combination in a Capabilities message the same way.
    assert message in [v.message for v in check_capabilities(_capabilities(profiles, values)) if v.rule_id == "OEV121"]


def _capabilities(profiles, values) -> capabilities_pb2.Capabilities:
    caps = capabilities_pb2.Capabilities(revision=1, profiles=[
        common_pb2.ServiceProfile(name=n, major=CAT.profile(n).version[0], minor=CAT.profile(n).version[1])
        for n in profiles])
    for reference, value in values.items():
        lim = CAT.limit(reference)
        message = getattr(caps, CAT.profile(lim.profile).capability_field)
        wire = [lim.enum_spellings()[v] for v in value] if lim.kind == "enum" and lim.repeated else value
        if lim.repeated:
            getattr(message, lim.name).extend(wire)
        else:
            setattr(message, lim.name, wire)
    return caps


def _derived(**changes) -> Catalogue:
    """The compiled catalogue with some profiles' declarations replaced."""
    profiles = tuple(dataclasses.replace(p, **changes[p.name]) if p.name in changes else p
                     for p in CAT.profiles)
    return dataclasses.replace(CAT, profiles=profiles)


def _refused_the_same_on_both_paths(cat: Catalogue, profiles: tuple[str, ...]) -> str:
    problems = _refusal_at_start("aggregated", profiles, {}, cat=cat)
    assert len(problems) == 1, problems
    with running(profiles=profiles) as (engine, stubs):
        # The running engine was started under the compiled contract; judged under `cat`, any
        # update (even a no-op one) re-judges the whole combination with the same function.
        engine.state.catalogue = cat
        harmless = {"openengine.core.max_logprobs": engine.state.limit("openengine.core", "max_logprobs")}
        assert problems[0] in _refusal_at_run_time(engine, stubs, harmless)
    return problems[0]


def test_a_prerequisite_outside_its_version_range_is_refused_at_start_and_by_update_config():
    major, minor = CAT.profile("openengine.core").version      # one minor beyond what is advertised
    wanted = f">= {major}.{minor + 1}, < {major + 1}.0"
    cat = _derived(**{"openengine.load": {"requires": (Prerequisite("openengine.core", VersionRange.parse(wanted)),)}})
    message = _refused_the_same_on_both_paths(cat, ("load", "admin"))
    assert message == (f"openengine.load requires openengine.core {wanted}, "
                       f"but openengine.core {major}.{minor} is advertised")


def test_a_missing_prerequisite_names_what_to_add_and_the_validators_say_the_same():
    problems = combination_problems({"openengine.load": (1, 0)})
    assert [p.rule for p in problems] == ["requires"]
    assert str(problems[0]) == ("openengine.load requires openengine.core (>= 1.0), which is not advertised; "
                                "add openengine.core or drop openengine.load")
    # The validators say the same where the prerequisite is advertised at the wrong version ...
    too_old = combination_problems({"openengine.core": (0, 9), "openengine.load": (1, 0)})
    caps = capabilities_pb2.Capabilities(revision=1, profiles=[
        common_pb2.ServiceProfile(name="openengine.core", major=0, minor=9),
        common_pb2.ServiceProfile(name="openengine.load", major=1)])
    assert str(too_old[0]) in [v.message for v in check_capabilities(caps) if v.rule_id == "OEV120"]
    # ... and an absent core is their one root finding (OEV101), not one OEV120 per dependant.
    caps = capabilities_pb2.Capabilities(revision=1, profiles=[common_pb2.ServiceProfile(name="openengine.load", major=1)])
    assert [v.rule_id for v in check_capabilities(caps)] == ["OEV101"]


def test_a_prerequisite_holds_when_any_advertised_major_satisfies_it():
    assert not combination_problems({"openengine.core": [(1, 0), (2, 0)], "openengine.load": (1, 0)})
    assert combination_problems({"openengine.core": [(0, 9)], "openengine.load": (1, 0)})[0].values == ((0, 9),)


def test_an_incompatibility_without_conditions_names_the_combination_not_an_empty_condition():
    never_with_load = Incompatibility("openengine.load", (), "the fixture says so")
    cat = _derived(**{"openengine.admin": {"incompatible_with": (never_with_load,)}})
    message = _refused_the_same_on_both_paths(cat, ("load", "admin"))
    assert message == "openengine.admin cannot be served with openengine.load: the fixture says so"


def test_effective_values_fill_in_defaults_for_limits_left_out():
    """A condition on a limit the caller did not pass is judged on the contract default."""
    spec_with_pp = {"openengine.core": {"speculative_decoding": True, "pipeline_parallel_size": 2}}
    assert combination_problems(["openengine.core"], spec_with_pp)  # logit_bias etc. default false
    assert not combination_problems(["openengine.core"], {"openengine.core": {"speculative_decoding": True}})


def test_a_per_model_combination_is_refused_at_start_and_by_update_config_for_that_model():
    """A model's own value of a model-scoped limit is judged with the model's profiles, on both paths."""
    from openengine.engine import ModelConfig

    at_most_two = Incompatibility(None, (LimitCondition("openengine.adapters", "max_loras", "at_least", 3),),
                                  "the fixture allows two adapters per model")
    cat = _derived(**{"openengine.adapters": {"incompatible_with": (at_most_two,)}})
    narrow, wide = ModelConfig(name="narrow"), ModelConfig(name="wide", limits={"adapters": {"max_loras": 3}})
    with pytest.raises(ConfigError) as err:
        resolve_config(config(profiles=("adapters", "admin"), models=(narrow, wide)), cat=cat)
    message = ("models: wide: openengine.adapters cannot be served while openengine.adapters.max_loras >= 3: "
               "the fixture allows two adapters per model")
    assert err.value.problems == [message]

    with running(profiles=("adapters", "admin"), models=(narrow, ModelConfig(name="wide"))) as (engine, stubs):
        engine.state.catalogue = cat
        update = admin_pb2.LimitUpdate(limit="openengine.adapters.max_loras", model="wide", uint_value=3)
        with pytest.raises(grpc.RpcError) as refused:
            stubs.admin.UpdateConfig(admin_pb2.UpdateConfigRequest(updates=[update]), metadata=AUTH)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in refused.value.details()
        assert engine.state.revision == 1
