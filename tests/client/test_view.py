"""CapabilityView: supports, limits with defaults, per-model limits, require, fetch and afetch."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import Engine, Server, capabilities  # noqa: E402

from openengine.client import (  # noqa: E402
    CapabilityError, CapabilityView, IncompatibleServerError, NotOpenEngineError,
)
from openengine.v1 import capabilities_pb2, model_pb2, server_pb2  # noqa: E402
from servers import foreign_server  # noqa: E402


def model(name, *profiles, **limits):
    entry = capabilities_pb2.ModelCapabilities(model=name)
    for p in profiles:
        entry.profiles.add(name=p, major=1, minor=0)
    for field_name, values in limits.items():
        sub = getattr(entry, field_name)
        sub.SetInParent()
        for key, value in values.items():
            setattr(sub, key, value)
    return entry


@pytest.fixture
def view():
    caps = capabilities("openengine.load", "openengine.adapters", "com.example.batch",
                        core={"max_logprobs": 5}, adapters={"max_loras": 8})
    caps.profiles[1].minor = 2
    caps.models.extend([model("a", "openengine.adapters", adapters={"max_loras": 2}), model("b")])
    return CapabilityView(caps)


def test_supports_by_version(view):
    assert view.supports("openengine.load")
    assert view.supports("openengine.load", at_least="1.2")
    assert not view.supports("openengine.load", at_least="1.3")
    assert not view.supports("openengine.load", at_least="2.0")     # another major is another profile
    assert view.supports("com.example.batch")
    assert not view.supports("openengine.kv")


def test_limits_with_defaults(view):
    assert view.limit("openengine.core", "max_logprobs") == 5
    assert view.limit("openengine.core", "max_sequences") == 1                 # default
    assert view.limit("openengine.load", "default_heartbeat_ms") == 1000       # message absent: defaults
    assert view.limit("openengine.kv", "kv_block_size") is None                # not advertised
    with pytest.raises(KeyError):
        view.limit("openengine.core", "max_logprob")
    with pytest.raises(KeyError):
        view.limit("openengine.kvv", "kv_block_size")


def test_per_model_view(view):
    assert view.model("a").limit("openengine.adapters", "max_loras") == 2
    assert view.model("b").limit("openengine.adapters", "max_loras") == 8      # engine-wide value
    assert view.model("a").supports("openengine.adapters")
    assert not view.model("b").supports("openengine.adapters")
    assert view.model("b").supports("openengine.load")


def test_require_names_everything_missing(view):
    view.require("openengine.load", ("openengine.load", "1.1"), limits={"openengine.core.max_logprobs": 5})
    with pytest.raises(CapabilityError) as err:
        view.require("openengine.kv", ("openengine.load", "1.5"),
                     limits={"openengine.core.max_logprobs": 10, "openengine.core.min_p": True,
                             "openengine.sessions.max_sessions": 1})
    assert len(err.value.missing) == 5
    assert any("max_logprobs" in m for m in err.value.missing)
    with pytest.raises(CapabilityError) as err:
        view.model("b").require("openengine.adapters")
    assert err.value.missing == ["openengine.adapters"]


def test_violations_are_exposed_not_raised():
    caps = capabilities(core={"max_logprobs": 5000})
    assert [v.rule_id for v in CapabilityView(caps).violations] == ["OEV111"]


def _engine():
    caps = capabilities("openengine.adapters", revision=4, adapters={"max_loras": 3})
    caps.models.append(model("m", "openengine.adapters", adapters={"max_loras": 1}))
    return Engine(caps=caps, models={"m": model_pb2.ModelInfo(model_id="m", max_output_tokens=64)})


def test_fetch():
    engine = _engine()
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        view = CapabilityView.fetch(channel)
    assert view.violations == () and not view.upstream_only
    assert (view.revision, view.instance_id) == (4, "engine-1")
    assert view.model("m").limit("openengine.adapters", "max_loras") == 1
    assert view.limit("openengine.adapters", "max_loras") == 3
    assert view.report.models["m"].max_output_tokens == 64


def test_an_upstream_only_engine_is_known_by_its_server_and_model_info():
    """GetCapabilities answers UNIMPLEMENTED: no profile is advertised, a core limit is what
    upstream's answers report, and one they leave out is not guessed."""
    info = model_pb2.ModelInfo(model_id="m", max_output_tokens=64)
    info.generation.output_logprobs.supported = True
    info.generation.output_logprobs.max_top_n = 4
    engine = Engine(upstream_only=True, models={"m": info})
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        view = CapabilityView.fetch(channel)
    assert view.upstream_only and view.violations == () and view.profiles == {}
    assert not view.supports("openengine.core") and not view.supports("openengine.load")
    assert view.model("m").limit("openengine.core", "max_logprobs") == 4
    assert view.model("m").limit("openengine.core", "max_sequences") is None
    view.model("m").require(limits={"openengine.core.max_logprobs": 4})
    with pytest.raises(CapabilityError) as err:
        view.model("m").require("openengine.load", limits={"openengine.core.max_sequences": 2})
    assert len(err.value.missing) == 2


def test_a_server_that_is_not_openengine_or_too_new_is_refused():
    with foreign_server() as address, grpc.insecure_channel(address) as channel:
        with pytest.raises(NotOpenEngineError):
            CapabilityView.fetch(channel, timeout=5)
    engine = _engine()
    engine.info = lambda: server_pb2.ServerInfo(instance_id="x", schema_revision=9, minimum_client_revision=9)
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        with pytest.raises(IncompatibleServerError) as err:
            CapabilityView.fetch(channel, timeout=5)
    assert "revision 9" in str(err.value)


def test_afetch_and_role_violation():
    engine = _engine()
    engine.caps.profiles.add(name="openengine.kv", major=1)
    engine.role = server_pb2.ENGINE_ROLE_AGGREGATED

    async def main(address):
        async with grpc.aio.insecure_channel(address) as channel:
            return await CapabilityView.afetch(channel)

    with Server(engine) as server:
        view = asyncio.run(main(server.address))
    assert [v.rule_id for v in view.violations] == ["OEV130"]
    assert view.supports("openengine.kv")
