"""Which profiles `--profiles all` serves, and why an explicit list is refused: combinations
(REQ-CAP-010) and implementations (REQ-CORE-002)."""

from __future__ import annotations

import logging

import grpc
import pytest

from openengine.engine import ConfigError, EngineConfig, RunningEngine, catalogue, resolve_config
from openengine.engine import services as services_module
from openengine.engine.config import _select_profiles, implemented
from openengine.engine.services import Base, service_classes
from openengine.v1 import discovery_pb2, discovery_service_pb2_grpc, sessions_pb2, sessions_service_pb2_grpc

CAT = catalogue()
SPECULATIVE = {"speculative_decoding": True, "logit_bias": False, "min_p": False}


def names(resolved):
    return [p.name for p in resolved.advertised]


def test_every_rpc_of_the_catalogue_is_implemented_by_the_sdk_or_the_backend():
    assert [rpc.name for rpc in CAT.rpcs if not implemented(rpc)] == []
    assert service_classes()["Sessions"].__module__ == "openengine.engine.services.sessions"
    assert "Inference" not in service_classes()     # the SDK's


def test_all_leaves_out_a_profile_incompatible_with_the_configuration_and_says_why():
    resolved = resolve_config(EngineConfig(limits={"core": SPECULATIVE}))
    assert "openengine.tasks" not in names(resolved)
    # Every other profile the role allows is still served: the set is maximal.
    assert names(resolved) == [p.name for p in CAT.profiles
                               if p.allows_role("aggregated") and p.name != "openengine.tasks"]
    why = resolved.left_out["openengine.tasks"]
    assert "openengine.core.speculative_decoding" in why and "pooling" in why
    assert any(w.startswith("--profiles all leaves out openengine.tasks:") for w in resolved.warnings)


def test_all_is_deterministic_and_keeps_what_is_named_explicitly():
    first = resolve_config(EngineConfig(role="prefill", limits={"core": {"logits_post_processor": True}}))
    again = resolve_config(EngineConfig(role="prefill", limits={"core": {"logits_post_processor": True}}))
    assert names(first) == names(again)
    assert "openengine.kv" not in names(first) and "logits post-processor" in first.left_out["openengine.kv"]


def test_an_explicit_incompatible_list_is_refused_naming_the_condition():
    with pytest.raises(ConfigError) as err:
        resolve_config(EngineConfig(profiles=("tasks", "load"), limits={"core": SPECULATIVE}))
    text = "; ".join(err.value.problems)
    assert "openengine.tasks cannot be served with openengine.core while " \
           "openengine.core.speculative_decoding == true" in text
    # The same list next to `all` is still refused: what is named must be served.
    with pytest.raises(ConfigError, match="openengine.tasks cannot be served"):
        resolve_config(EngineConfig(profiles=("all", "tasks"), limits={"core": SPECULATIVE}))


def test_selection_is_maximal_and_follows_the_catalogue_order():
    a, b, c, d = (CAT.profile(n) for n in ("openengine.load", "openengine.sessions",
                                          "openengine.admin", "openengine.runtime-events"))

    def problems(profiles):
        names_ = {p.name for p in profiles}
        out = []
        if {a.name, b.name} <= names_:
            out.append("load and sessions cannot be served together")
        if c.name in names_ and d.name not in names_:
            out.append("admin requires runtime-events")
        return out

    chosen, left_out = _select_profiles([], [a, b, c, d], problems)
    # a wins over b (earlier); c needs d, which comes later: a second pass adds it.
    assert [p.name for p in chosen] == [a.name, d.name, c.name]
    assert left_out == {b.name: "load and sessions cannot be served together"}


def test_a_profile_seeded_with_its_problem_keeps_the_problem_for_the_final_check():
    a = CAT.profile("openengine.load")
    chosen, left_out = _select_profiles([a], [], lambda ps: ["always"])
    assert chosen == [a] and left_out == {}


@pytest.fixture
def sessions_unimplemented(monkeypatch):
    """The engine as it would be without code for one RPC of openengine.sessions."""
    classes = dict(service_classes())
    partial = type("Sessions", (Base,), {"OpenSession": classes["Sessions"].OpenSession,
                                         "CloseSession": classes["Sessions"].CloseSession})
    classes["Sessions"] = partial
    monkeypatch.setattr(services_module, "service_classes", lambda: classes)


def test_an_explicit_profile_without_implementation_is_refused_naming_the_rpcs(sessions_unimplemented):
    with pytest.raises(ConfigError) as err:
        resolve_config(EngineConfig(profiles=("sessions",)))
    assert err.value.problems == [
        "openengine.sessions cannot be advertised: this engine has no implementation of "
        "openengine.v1.Sessions/ListSessions (REQ-CORE-002); drop the profile"]


def test_all_leaves_out_a_profile_without_implementation_and_never_advertises_it(sessions_unimplemented, caplog):
    caplog.set_level(logging.INFO, logger="openengine.engine")
    resolved = resolve_config(EngineConfig(port=0, token_delay_ms=0))
    assert "openengine.sessions" not in names(resolved)
    assert resolved.left_out["openengine.sessions"] == \
        "this engine has no implementation of openengine.v1.Sessions/ListSessions"
    with RunningEngine(resolved) as engine, grpc.insecure_channel(engine.address) as channel:
        caps = discovery_service_pb2_grpc.DiscoveryStub(channel).GetCapabilities(
            discovery_pb2.GetCapabilitiesRequest(), timeout=5)
        assert "openengine.sessions" not in [p.name for p in caps.profiles]
        stub = sessions_service_pb2_grpc.SessionsStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.OpenSession(sessions_pb2.OpenSessionRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # The start-up log says what was left out and why.
    assert any(r.levelno == logging.WARNING and r.getMessage() ==
               "--profiles all leaves out openengine.sessions: this engine has no implementation of "
               "openengine.v1.Sessions/ListSessions" for r in caplog.records), [r.getMessage() for r in caplog.records]
