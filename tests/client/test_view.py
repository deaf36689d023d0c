"""CapabilityView: supports, limits with defaults, per-model limits, require, fetch and afetch."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import Engine, Server, capabilities  # noqa: E402

from openengine.client import CapabilityError, CapabilityView  # noqa: E402
from openengine.v1 import common_pb2, discovery_pb2  # noqa: E402


def model(name, *profiles, **limits):
    info = discovery_pb2.ModelInfo(model=name)
    for p in profiles:
        info.capabilities.profiles.add(name=p, major=1, minor=0)
    for field_name, values in limits.items():
        sub = getattr(info.capabilities, field_name)
        sub.SetInParent()
        for key, value in values.items():
            setattr(sub, key, value)
    return info


@pytest.fixture
def view():
    caps = capabilities("openengine.load", "openengine.adapters", "com.example.batch",
                        generation={"max_logprobs": 5}, adapters={"max_loras": 8})
    caps.profiles[1].minor = 2
    return CapabilityView(caps, model_infos=[model("a", "openengine.adapters", adapters={"max_loras": 2}),
                                             model("b")])


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
    caps = capabilities(generation={"max_logprobs": 5000})
    assert [v.rule_id for v in CapabilityView(caps).violations] == ["OEV111"]


def _engine():
    return Engine(caps=capabilities("openengine.adapters", revision=4, adapters={"max_loras": 3}),
                  models={"m": model("m", "openengine.adapters", adapters={"max_loras": 1})})


def test_fetch():
    engine = _engine()
    with Server(engine) as server, grpc.insecure_channel(server.address) as channel:
        view = CapabilityView.fetch(channel)
    assert view.violations == ()
    assert (view.revision, view.instance_id) == (4, "engine-1")
    assert view.model("m").limit("openengine.adapters", "max_loras") == 1
    assert view.limit("openengine.adapters", "max_loras") == 3


def test_afetch_and_role_violation():
    engine = _engine()
    engine.caps.profiles.add(name="openengine.kv", major=1)
    engine.role = common_pb2.ROLE_AGGREGATED

    async def main(address):
        async with grpc.aio.insecure_channel(address) as channel:
            return await CapabilityView.afetch(channel)

    with Server(engine) as server:
        view = asyncio.run(main(server.address))
    assert [v.rule_id for v in view.violations] == ["OEV130"]
    assert view.supports("openengine.kv")
