"""Fixtures: reference engines served from a background thread on 127.0.0.1:0, and stubs."""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import grpc
import pytest

from openengine.engine import EngineConfig, RunningEngine
from openengine.v1 import (
    admin_service_pb2_grpc, control_service_pb2_grpc, discovery_pb2, discovery_service_pb2_grpc,
    encoder_service_pb2_grpc, inference_service_pb2_grpc, model_pb2, observability_service_pb2_grpc,
    server_pb2, sessions_service_pb2_grpc, tasks_service_pb2_grpc,
)
from grpc_health.v1 import health_pb2_grpc

TOKEN = "test-admin-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


class Stubs:
    def __init__(self, channel):
        self.channel = channel
        self.discovery = discovery_service_pb2_grpc.DiscoveryStub(channel)
        self.inference = inference_service_pb2_grpc.InferenceStub(channel)
        self.control = control_service_pb2_grpc.ControlStub(channel)
        self.observability = observability_service_pb2_grpc.ObservabilityStub(channel)
        self.tasks = tasks_service_pb2_grpc.TasksStub(channel)
        self.encoder = encoder_service_pb2_grpc.EncoderStub(channel)
        self.sessions = sessions_service_pb2_grpc.SessionsStub(channel)
        self.admin = admin_service_pb2_grpc.AdminStub(channel)
        self.health = health_pb2_grpc.HealthStub(channel)

    def caps(self):
        return self.discovery.GetCapabilities(discovery_pb2.GetCapabilitiesRequest())

    def info(self):
        return self.control.GetServerInfo(server_pb2.GetServerInfoRequest())

    def model(self, name=""):
        return self.control.GetModelInfo(model_pb2.GetModelInfoRequest(model=name))


def config(**kw) -> EngineConfig:
    kw.setdefault("port", 0)
    kw.setdefault("token_delay_ms", 2.0)
    admin = kw.pop("admin", None)
    cfg = EngineConfig(**kw)
    admin_kw = {"token": TOKEN}
    admin_kw.update(admin or {})
    return dataclasses.replace(cfg, admin=dataclasses.replace(cfg.admin, **admin_kw))


@contextlib.contextmanager
def running(**kw):
    engine = RunningEngine(config(**kw)).start()
    channel = grpc.insecure_channel(engine.address)
    try:
        yield engine, Stubs(channel)
    finally:
        channel.close()
        engine.stop()


@pytest.fixture(scope="module")
def shared():
    """One engine with every profile of the aggregated role, shared by read-mostly tests."""
    with running() as pair:
        yield pair


@pytest.fixture
def start():
    """Start engines for one test: `engine, stubs = start(profiles=("load",))`."""
    stack = contextlib.ExitStack()

    def _start(**kw):
        return stack.enter_context(running(**kw))

    with stack:
        yield _start


class Records(logging.Handler):
    """Keeps every log record the engine writes, so a test can look for tracebacks in them."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)
