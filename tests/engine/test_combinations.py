"""Prerequisites and incompatible combinations: start-up and UpdateConfig refuse the same thing.

Every `incompatible_with` declaration of the compiled contract is driven through both paths: the
configuration that makes all its conditions hold is refused when the SDK is given it, and the
same values sent to a running engine through `UpdateConfig` are refused with the same message.
"""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from openengine.contract import Incompatibility, LimitCondition, catalogue, combination_problems
from openengine.engine import ReferenceBackend, serve_config
from openengine.serve import CannotServe, Server
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


def _refusal_at_start(role, profiles, values) -> list[str]:
    limits: dict[str, dict] = {"openengine.admin": {"updatable_limits": sorted(values)}}
    for reference, value in values.items():
        lim = CAT.limit(reference)
        limits.setdefault(lim.profile, {})[lim.name] = value
    configured = config(role=role, profiles=profiles, limits=limits)
    with pytest.raises(CannotServe) as err:
        Server(ReferenceBackend(configured), serve_config(configured))
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
    assert f"{profile.name} cannot be served" in message
    assert all(str(c) in message for c in inc.when) and "while :" not in message

    if inc.when:   # an unconditional declaration has no limits to update: no engine serves both
        admin = {"updatable_limits": sorted(values)}
        with running(role=role, profiles=profiles, limits={"openengine.admin": admin}) as (engine, stubs):
            assert message in _refusal_at_run_time(engine, stubs, values)
            assert engine.server.state.revision == 1  # nothing applied

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


def test_effective_values_fill_in_defaults_for_limits_left_out():
    """A condition on a limit the caller did not pass is judged on the contract default."""
    spec_with_pp = {"openengine.core": {"speculative_decoding": True, "pipeline_parallel_size": 2}}
    assert combination_problems(["openengine.core"], spec_with_pp)  # logit_bias etc. default false
    assert not combination_problems(["openengine.core"], {"openengine.core": {"speculative_decoding": True}})
