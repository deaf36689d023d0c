"""Small in-process engines for the client tests: Control, Discovery and Observability servicers
whose answers, WatchLoad behaviour and runtime events each test scripts. With `upstream_only` the
engine serves upstream's Control alone, as an engine of upstream's layout does."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from openengine.v1 import (
    capabilities_pb2, control_service_pb2_grpc, discovery_service_pb2_grpc, load_pb2,
    observability_service_pb2_grpc, server_pb2,
)


def capabilities(*names, revision=1, **limits):
    caps = capabilities_pb2.Capabilities(revision=revision)
    for name in ("openengine.core",) + names:
        caps.profiles.add(name=name, major=1, minor=0)
    for field_name, values in limits.items():
        sub = getattr(caps, field_name)
        sub.SetInParent()
        for key, value in values.items():
            if isinstance(value, list):
                getattr(sub, key).extend(value)
            else:
                setattr(sub, key, value)
    return caps


@dataclass
class Engine:
    """What the test engine answers. `watch` is called per WatchLoad stream with (request, stream
    number) and yields messages; `watch_error` ends streams with that status instead."""

    caps: capabilities_pb2.Capabilities = field(default_factory=capabilities)
    instance_id: str = "engine-1"
    role: int = server_pb2.ENGINE_ROLE_AGGREGATED
    models: dict = field(default_factory=dict)           # name -> ModelInfo
    upstream_only: bool = False                          # no Discovery, no Observability
    watch: object = None
    watch_error: grpc.StatusCode | None = None
    getload_error: grpc.StatusCode | None = None
    streams: int = 0
    polls: int = 0
    discoveries: int = 0                                  # discovery reads (GetServerInfo calls)
    subscriptions: int = 0                                # SubscribeRuntimeEvents calls
    events: "queue.Queue" = field(default_factory=lambda: queue.Queue())   # RuntimeEvents to send

    def info(self):
        info = server_pb2.ServerInfo(instance_id=self.instance_id, engine_name="test", engine_role=self.role,
                                     supported_models=list(self.models), schema_revision=1 if self.upstream_only else 2,
                                     minimum_client_revision=1, schema_release="test-release")
        if not self.upstream_only:
            info.capability_revision = self.caps.revision
        return info


class Control(control_service_pb2_grpc.ControlServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    def GetServerInfo(self, request, context):
        if not self.engine.upstream_only:
            self.engine.discoveries += 1
        return self.engine.info()

    def GetModelInfo(self, request, context):
        return self.engine.models.get(request.model) or context.abort(grpc.StatusCode.NOT_FOUND, "no model")

    def GetLoad(self, request, context):
        self.engine.polls += 1
        if self.engine.getload_error is not None:
            context.abort(self.engine.getload_error, "scripted")
        return server_pb2.LoadInfo(instance_id=self.engine.instance_id, running_requests=self.engine.polls,
                                   timestamp_unix_nanos=time.time_ns())


class Discovery(discovery_service_pb2_grpc.DiscoveryServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    def GetCapabilities(self, request, context):
        return self.engine.caps


def now_ts(msg):
    msg.timestamp_unix_nanos = time.time_ns()
    return msg


class Observability(observability_service_pb2_grpc.ObservabilityServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    def WatchLoad(self, request, context):
        engine = self.engine
        engine.streams += 1
        if engine.watch_error is not None:
            context.abort(engine.watch_error, "scripted")
        for msg in engine.watch(request, engine.streams):
            if not context.is_active():
                return
            if isinstance(msg, grpc.StatusCode):
                context.abort(msg, "scripted")
            if isinstance(msg, float):
                time.sleep(msg)
                continue
            yield msg


    def SubscribeRuntimeEvents(self, request, context):
        from openengine.v1 import events_pb2

        engine = self.engine
        engine.subscriptions += 1
        sequence = 1
        while context.is_active():
            try:
                event = engine.events.get(timeout=0.05)
            except queue.Empty:
                continue
            msg = events_pb2.SubscribeRuntimeEventsResponse(sequence=sequence, event=event)
            msg.timestamp.GetCurrentTime()
            sequence += 1
            yield msg


def good_stream(instance_id="engine-1", revision=1, interval=None, heartbeat=None, count=1000):
    """A conforming stream: settings, then a snapshot every `interval` ms (default: what the
    request asks for, else the registry defaults)."""
    def watch(request, stream_number):
        nonlocal interval, heartbeat
        if interval is None:
            interval = request.interval_ms if request.HasField("interval_ms") else 100
        if heartbeat is None:
            heartbeat = request.heartbeat_ms if request.HasField("heartbeat_ms") else 1000
        settings = load_pb2.WatchLoadResponse(sequence=0)
        now_ts(settings)
        s = settings.settings
        s.interval_ms, s.heartbeat_ms, s.initial_snapshot = interval, heartbeat, True
        s.instance_id, s.capability_revision = instance_id, revision
        yield settings
        for seq in range(1, count + 1):
            msg = now_ts(load_pb2.WatchLoadResponse(sequence=seq))
            msg.snapshot.load.instance_id = instance_id
            msg.snapshot.load.timestamp_unix_nanos = msg.timestamp_unix_nanos
            msg.snapshot.load.running_requests = seq
            msg.snapshot.load.total_kv_blocks = stream_number
            yield msg
            yield interval / 1000.0
    return watch


class Server:
    """A grpc.server on 127.0.0.1:`port` (0: any free port) serving `engine`; usable as a context
    manager."""

    def __init__(self, engine: Engine, port: int = 0):
        self.engine = engine
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        control_service_pb2_grpc.add_ControlServicer_to_server(Control(engine), self.server)
        if not engine.upstream_only:
            discovery_service_pb2_grpc.add_DiscoveryServicer_to_server(Discovery(engine), self.server)
            observability_service_pb2_grpc.add_ObservabilityServicer_to_server(Observability(engine), self.server)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(grace=None).wait()


@contextlib.contextmanager
def foreign_server(port: int = 0):
    """A gRPC server that is no OpenEngine engine: standard health only."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield f"127.0.0.1:{bound}"
    finally:
        server.stop(None)
