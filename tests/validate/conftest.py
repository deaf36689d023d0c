"""Shared helpers: small builders for discovery messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from openengine.v1 import capabilities_pb2, common_pb2, server_pb2

DATA = Path(__file__).resolve().parents[1] / "data" / "validate"


def profile(name: str, major: int = 1, minor: int = 0):
    return common_pb2.ServiceProfile(name=name, major=major, minor=minor)


def caps(*names, **fields):
    """Capabilities advertising openengine.core plus `names` (a name or (name, major, minor))."""
    entries = [profile("openengine.core")]
    for n in names:
        entries.append(profile(*n) if isinstance(n, tuple) else profile(n))
    return capabilities_pb2.Capabilities(profiles=entries, revision=fields.pop("revision", 1), **fields)


def rules(violations) -> set[str]:
    return {v.rule_id for v in violations}


@pytest.fixture
def server_info():
    return server_pb2.ServerInfo(instance_id="engine-1", engine_name="test",
                                 engine_role=server_pb2.ENGINE_ROLE_AGGREGATED, schema_revision=2,
                                 minimum_client_revision=1, schema_release="openengine-profiles/registry-6",
                                 capability_revision=1, supported_models=["m"])
