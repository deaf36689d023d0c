"""Small in-process engines for the client tests: Discovery and Observability servicers whose
answers, WatchLoad behaviour and runtime events each test scripts."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from openengine.v1 import (
    capabilities_pb2, common_pb2, discovery_pb2, discovery_service_pb2_grpc, load_pb2,
    observability_service_pb2_grpc,
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
    role: int = common_pb2.ROLE_AGGREGATED
    models: dict = field(default_factory=dict)           # name -> ModelInfo
    watch: object = None
    watch_error: grpc.StatusCode | None = None
    getload_error: grpc.StatusCode | None = None
    streams: int = 0
    polls: int = 0
    discoveries: int = 0                                  # GetCapabilities calls
    subscriptions: int = 0                                # SubscribeRuntimeEvents calls
    events: "queue.Queue" = field(default_factory=lambda: queue.Queue())   # RuntimeEvents to send

    def info(self):
        return discovery_pb2.EngineInfo(instance_id=self.instance_id, engine_name="test", role=self.role,
                                        capability_revision=self.caps.revision, served_models=list(self.models))


class Discovery(discovery_service_pb2_grpc.DiscoveryServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    def GetCapabilities(self, request, context):
        self.engine.discoveries += 1
        return self.engine.caps

    def GetEngineInfo(self, request, context):
        return self.engine.info()

    def GetModelInfo(self, request, context):
        return self.engine.models.get(request.model) or context.abort(grpc.StatusCode.NOT_FOUND, "no model")


def now_ts(msg):
    msg.timestamp.GetCurrentTime()
    return msg


class Observability(observability_service_pb2_grpc.ObservabilityServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    def GetLoad(self, request, context):
        self.engine.polls += 1
        if self.engine.getload_error is not None:
            context.abort(self.engine.getload_error, "scripted")
        load = load_pb2.LoadInfo(instance_id=self.engine.instance_id, running_requests=self.engine.polls)
        load.timestamp.GetCurrentTime()
        return load

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
            msg = now_ts(events_pb2.SubscribeRuntimeEventsResponse(sequence=sequence, event=event))
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
            msg.snapshot.load.timestamp.CopyFrom(msg.timestamp)
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
def earlier_server(*, health_for: tuple[str, ...] = (), control_health: bool = False, port: int = 0):
    """A server of an earlier layout: no v1 services; optionally standard health reporting
    `health_for`, and optionally revision 3's Control/Health method."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from openengine.legacy.rev3.v1 import control_pb2

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    if health_for:
        servicer = health.HealthServicer()
        for name in health_for:
            servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    if control_health:
        handler = grpc.unary_unary_rpc_method_handler(
            lambda request, context: control_pb2.HealthResponse(state=control_pb2.HEALTH_STATE_READY),
            request_deserializer=control_pb2.HealthRequest.FromString,
            response_serializer=control_pb2.HealthResponse.SerializeToString)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "openengine.v1.Control", {"Health": handler})])
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield f"127.0.0.1:{bound}"
    finally:
        server.stop(None)
