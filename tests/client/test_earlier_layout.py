"""REQ-ALIAS-004: `CapabilityView.fetch` on a server without `Discovery/GetCapabilities` names the
earlier layout it speaks (alias and schema revision) instead of failing with a raw gRPC error."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import earlier_server  # noqa: E402

from openengine.client import CapabilityView, EarlierLayoutError  # noqa: E402
from openengine.engine import EngineConfig, RunningEngine  # noqa: E402


def fetch_error(address) -> EarlierLayoutError:
    with grpc.insecure_channel(address) as channel, pytest.raises(EarlierLayoutError) as err:
        CapabilityView.fetch(channel, timeout=5)
    return err.value


def test_an_alias_in_standard_health_names_the_layout_and_revision():
    with earlier_server(health_for=("", "openengine.v1.OpenEngine")) as address:
        err = fetch_error(address)
    assert (err.service, err.revision) == ("openengine.v1.OpenEngine", 2)
    assert "schema revision 2" in str(err) and "openengine.v1.OpenEngine" in str(err)


def test_without_standard_health_the_alias_health_method_is_called():
    with earlier_server(control_health=True) as address:
        err = fetch_error(address)
    assert (err.service, err.revision) == ("openengine.v1.Control", 3)


def test_a_server_of_no_known_layout_is_said_to_be_one():
    with earlier_server(health_for=("",)) as address:
        err = fetch_error(address)
    assert (err.service, err.revision) == (None, None)
    assert "not an OpenEngine server" in str(err)


def test_async_fetch_reports_the_same():
    async def main(address):
        async with grpc.aio.insecure_channel(address) as channel:
            with pytest.raises(EarlierLayoutError) as err:
                await CapabilityView.afetch(channel, timeout=5)
            return err.value

    with earlier_server(control_health=True) as address:
        err = asyncio.run(main(address))
    assert (err.service, err.revision) == ("openengine.v1.Control", 3)


def test_a_v1_server_serving_an_alias_is_read_through_v1():
    """REQ-ALIAS-004: discovery goes through v1 first; the alias is only a fallback."""
    with RunningEngine(EngineConfig(port=0, profiles=("load",), aliases=("openengine", "control"))) as engine:
        with grpc.insecure_channel(engine.address) as channel:
            view = CapabilityView.fetch(channel, timeout=5)
    assert view.supports("openengine.load")
