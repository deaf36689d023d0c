"""The gRPC side: route every compiled RPC to its implementation, gate it on the advertised
profiles, guard Admin, serve standard health and reflection, and shut down gracefully."""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import signal
import threading
from pathlib import Path
from typing import Any, Callable

import grpc
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from google.protobuf import message_factory

from openengine.engine import alias
from openengine.engine.config import ConfigError, EngineConfig, ResolvedConfig, resolve_config
from openengine.engine.contract import HEALTH_SERVICE, RpcInfo
from openengine.engine.runtime import ADMIN, Runtime
from openengine.engine.services import Refused, instantiate
from openengine.serve.server import ConnectionPolicy
from openengine.serve.wire import WirePolicy

# The SDK's default connection policy: silent and idle connections closed, keepalive explicit.
SERVER_OPTIONS = [("grpc.so_reuseport", 0), *ConnectionPolicy().options()]

log = logging.getLogger("openengine.engine")
Code = grpc.StatusCode


class EngineServer:
    """One reference engine: its runtime and its server(s). Start and stop inside an event loop."""

    def __init__(self, config: EngineConfig | ResolvedConfig):
        self.resolved = config if isinstance(config, ResolvedConfig) else resolve_config(config)
        self.rt = Runtime(self.resolved)
        self.servers: list[grpc.aio.Server] = []
        self.address = ""
        self.admin_address = ""
        self.port = 0
        self.admin_port = 0
        self._impls = instantiate(self.rt, self.rt.catalogue.services)
        self._stopped = False
        self.wire = WirePolicy()
        if not self.rt.cfg.faults:
            self_check(self._impls["openengine.v1.Discovery"])


    # -- routing --------------------------------------------------------------------------------

    def gate(self, rpc: RpcInfo, context, *, skip: tuple[str, ...] = ()) -> Refused | None:
        """The refusal a call of `rpc` gets before it runs, if any. `skip` names checks a fault
        leaves out ("profile", "auth"); only the alias faults use it."""
        rt = self.rt
        if not rt.has(rpc.profile) and rt.hooks.at("rpc.refuse-unadvertised", True) and "profile" not in skip:
            return Refused(Code.UNIMPLEMENTED,
                           f"{rpc.name} belongs to {rpc.profile}, which this engine does not advertise")
        if rpc.service == ADMIN and rt.hooks.at("admin.check-credentials", True) and "auth" not in skip:
            return self._authenticate(context)
        return None

    def _authenticate(self, context) -> Refused | None:
        """Admin needs the bearer token, or a verified client certificate on the mTLS address
        (REQ-ADMIN-002). Nothing runs before this check passes."""
        admin = self.rt.config.admin
        token = self.resolved.admin_token
        if admin.mtls:
            peer = context.auth_context() or {}
            if not peer.get("x509_common_name") and not peer.get("x509_pem_cert"):
                return Refused(Code.UNAUTHENTICATED, "Admin needs a client certificate signed by the configured CA")
        if token:
            sent = dict(context.invocation_metadata() or ()).get("authorization", "")
            strict = self.rt.hooks.at("admin.bearer-scheme-exact", False)
            if not bearer_matches(sent, token) or (strict and not sent.startswith("Bearer ")):
                return Refused(Code.UNAUTHENTICATED,
                               "Admin needs 'authorization: Bearer <token>' metadata with the engine's admin token")
        return None

    def _interceptors(self) -> list:
        return self.rt.hooks.at("server.interceptors", [self.wire])

    async def invoke_unary(self, rpc: RpcInfo, request, context, *, skip: tuple[str, ...] = ()):
        """Run one unary v1 RPC as a call of it runs: gate, implementation, refusal as status.
        The compatibility aliases call v1 through here too."""
        impl = getattr(self._impls.get(rpc.service), rpc.method.name, None)
        refusal = self.gate(rpc, context, skip=skip) or (None if impl else _missing(rpc))
        if refusal is not None:
            await context.abort(refusal.code, refusal.message)
        try:
            return await impl(request, context)
        except Refused as refused:
            await context.abort(refused.code, refused.message)

    async def invoke_stream(self, rpc: RpcInfo, request, context, *, skip: tuple[str, ...] = ()):
        """Run one server-streaming v1 RPC as a call of it runs (see `invoke_unary`)."""
        impl = getattr(self._impls.get(rpc.service), rpc.method.name, None)
        refusal = self.gate(rpc, context, skip=skip) or (None if impl else _missing(rpc))
        if refusal is not None:
            await context.abort(refusal.code, refusal.message)
        try:
            async for message in impl(request, context):
                yield message
        except Refused as refused:
            await context.abort(refused.code, refused.message)

    def _handler(self, rpc: RpcInfo):
        req_cls = message_factory.GetMessageClass(rpc.method.input_type)
        resp_cls = message_factory.GetMessageClass(rpc.method.output_type)
        if rpc.method.server_streaming:
            # The stream itself, not a generator around it: one layer fewer on every message.
            stream = functools.partial(self.invoke_stream, rpc)
            return grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=req_cls.FromString, response_serializer=wire_form(resp_cls))

        async def unary(request, context):
            return await self.invoke_unary(rpc, request, context)
        return grpc.unary_unary_rpc_method_handler(
            unary, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString)

    def _service_handlers(self, services) -> list:
        out = []
        for service in services:
            methods = {r.method.name: self._handler(r) for r in self.rt.catalogue.rpcs if r.service == service}
            if methods:
                out.append(grpc.method_handlers_generic_handler(service, methods))
        return out

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        rt = self.rt
        cfg = rt.config
        all_services = list(rt.catalogue.services)
        main_services = [s for s in all_services if not (rt.admin_separate and s == ADMIN)]
        server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=self._interceptors())
        server.add_generic_rpc_handlers(self._service_handlers(main_services) + alias.handlers(self, rt))
        health_pb2_grpc.add_HealthServicer_to_server(rt.health.main, server)
        advertised = [s for s in rt.advertised_services() if s in main_services]
        aliases = [a.service for a in alias.served(rt)]
        reflection.enable_server_reflection(advertised + aliases + [HEALTH_SERVICE, reflection.SERVICE_NAME], server)
        self.port = server.add_insecure_port(f"{cfg.host}:{cfg.port}")
        if self.port == 0:
            raise OSError(f"cannot listen on {cfg.host}:{cfg.port}")
        self.address = f"{_host_for_url(cfg.host)}:{self.port}"
        rt.address = self.address
        self.servers.append(server)
        if rt.admin_separate:
            admin = grpc.aio.server(options=SERVER_OPTIONS, interceptors=self._interceptors())
            admin.add_generic_rpc_handlers(self._service_handlers([ADMIN]))
            health_pb2_grpc.add_HealthServicer_to_server(rt.health.admin, admin)
            names = ([ADMIN] if rt.has("openengine.admin") else []) + [HEALTH_SERVICE, reflection.SERVICE_NAME]
            reflection.enable_server_reflection(names, admin)
            host = cfg.admin.host or cfg.host
            where = f"{host}:{cfg.admin.port}"
            if cfg.admin.mtls:
                creds = grpc.ssl_server_credentials(
                    [(Path(cfg.admin.tls_key).read_bytes(), Path(cfg.admin.tls_cert).read_bytes())],
                    root_certificates=Path(cfg.admin.client_ca).read_bytes(), require_client_auth=True)
                self.admin_port = admin.add_secure_port(where, creds)
            else:
                self.admin_port = admin.add_insecure_port(where)
            if self.admin_port == 0:
                raise OSError(f"cannot listen on {where}")
            self.admin_address = f"{_host_for_url(host)}:{self.admin_port}"
            self.servers.append(admin)
        await rt.health.update()
        for s in self.servers:
            await s.start()
        self._log_started()

    def _log_started(self) -> None:
        rt = self.rt
        profiles = ", ".join(f"{p.name} {p.version_text}" for p in rt.advertised)
        log.info("serving on %s (role %s, instance %s, capability revision %d)",
                 self.address, rt.config.role, rt.instance_id, rt.revision)
        log.info("profiles: %s", profiles)
        if alias.served(rt):
            log.info("compatibility aliases: %s", ", ".join(a.service for a in alias.served(rt)))
        log.info("models: %s", ", ".join(
            f"{m.name} ({', '.join(m.profiles) or 'no model-scoped profiles'})" for m in rt.models.values()))
        if self.admin_address:
            log.info("admin on %s%s", self.admin_address, " (mTLS)" if rt.config.admin.mtls else "")
        if self.resolved.admin_token_generated:
            log.info("admin token (generated; pass --admin-token to choose one): %s", self.resolved.admin_token)
        for warning in self.resolved.warnings:
            log.warning("%s", warning)
        if rt.cfg.faults:
            log.warning("faults on purpose: %s", ", ".join(sorted(rt.cfg.faults)))

    async def stop(self, grace: float = 1.0) -> None:
        """Graceful shutdown (REQ-HEALTH-010): every health status goes NOT_SERVING first, open
        Watch streams get it, then WatchLoad and event streams end with status UNAVAILABLE, every
        accepted Generate stream (running or queued) ends with its terminal error, ABORTED and
        retryable, and status OK (REQ-SVC-002), and the server stops."""
        if self._stopped:
            return
        self._stopped = True
        rt = self.rt
        log.info("stopping: health NOT_SERVING")
        rt.apply("stop", "shutdown")
        await rt.health.shutdown()
        await asyncio.sleep(0.1)  # let open Watch streams deliver NOT_SERVING
        rt.load.end_all(Code.UNAVAILABLE, "the engine is shutting down")
        for sub in list(rt.runtime_events.subscribers) + list(rt.kv_events.subscribers):
            sub.close(Code.UNAVAILABLE, "the engine is shutting down")
        rt.scheduler.abort(lambda r: True, "the engine is shutting down", retryable=True)
        await asyncio.gather(*(s.stop(grace) for s in self.servers))
        log.info("stopped")

    async def wait(self) -> None:
        await asyncio.gather(*(s.wait_for_termination() for s in self.servers))


def bearer_matches(header: str, token: str) -> bool:
    """`authorization: Bearer <token>`: the scheme matched case-insensitively (RFC 7235), the
    token compared in constant time."""
    scheme, _, sent = header.strip().partition(" ")
    scheme_ok = scheme.lower() == "bearer"
    token_ok = hmac.compare_digest(sent.strip().encode(), token.encode())
    return scheme_ok and token_ok


def wire_form(cls) -> Callable[[Any], bytes]:
    """A stream's response serializer: a message is serialized, bytes an implementation composed
    itself (WatchLoad's shared snapshots, openengine.serve.loadwire) go out as they are."""
    serialize = cls.SerializeToString

    def to_wire(message) -> bytes:
        return message if type(message) is bytes else serialize(message)
    return to_wire


def _missing(rpc: RpcInfo) -> Refused:
    return Refused(Code.UNIMPLEMENTED, f"{rpc.name} has no implementation in the reference engine")


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def serve(config: EngineConfig | ResolvedConfig, *, stop: asyncio.Event | None = None,
                on_started: Callable[[EngineServer], Any] | None = None, grace: float = 1.0) -> EngineServer:
    """Run an engine until `stop` is set (or SIGINT/SIGTERM when `stop` is not given)."""
    engine = EngineServer(config)
    await engine.start()
    if on_started is not None:
        on_started(engine)
    loop = asyncio.get_running_loop()
    own = stop is None
    stop = stop or asyncio.Event()
    if own:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        if own:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        await engine.stop(grace)
    return engine


def settle(loop: asyncio.AbstractEventLoop, *, timeout: float) -> list[asyncio.Task]:
    """Cancel and wait out whatever is still running on `loop` once the server has stopped, then
    close its async generators; returns the tasks that ignored cancellation within `timeout`.

    A gRPC server that stops while a stream's cancellation is still in flight can leave the
    call's tasks pending. On a closed loop they are never finished: the garbage collector
    destroys them later, at a random moment in whatever code runs then, and gRPC logs each one
    as an unhandled exception. Finishing them here keeps an engine's shutdown its own."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    stubborn: list[asyncio.Task] = []
    if pending:
        _, still = loop.run_until_complete(asyncio.wait(pending, timeout=timeout))
        stubborn = list(still)
    loop.run_until_complete(loop.shutdown_asyncgens())
    return stubborn


class RunningEngine:
    """An engine served from a background thread with its own event loop (tests, tools)."""

    def __init__(self, config: EngineConfig | ResolvedConfig, *, grace: float = 0.25):
        self._config = config
        self._grace = grace
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="openengine-engine", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.engine: EngineServer | None = None
        self._stop: asyncio.Event | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main():
            self._stop = asyncio.Event()
            try:
                await serve(self._config, stop=self._stop, on_started=self._started, grace=self._grace)
            except BaseException as err:  # reported to the starting thread
                self._error = err
                self._ready.set()

        try:
            self.loop.run_until_complete(main())
        finally:
            settle(self.loop, timeout=self._grace + 5.0)
            self.loop.close()

    def _started(self, engine: EngineServer) -> None:
        self.engine = engine
        self._ready.set()

    def start(self, timeout: float = 10.0) -> "RunningEngine":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the engine did not start")
        if self._error is not None:
            raise self._error
        return self

    @property
    def address(self) -> str:
        return self.engine.address

    @property
    def runtime(self) -> Runtime:
        return self.engine.rt

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run `fn()` on the engine's loop (a coroutine function or a plain one) and return its result."""
        async def wrapper():
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result
        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def __enter__(self) -> "RunningEngine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def self_check(discovery) -> None:
    """Judge what the engine is about to advertise with the validators, as a client would: a
    second line of defence behind `resolve_config`, which refuses bad combinations first."""
    try:
        from openengine.validate import validate_capabilities
    except ImportError:
        return
    report = validate_capabilities(discovery.capabilities(), engine_info=discovery.engine_info(),
                                   model_infos=discovery.model_infos())
    if report.errors:
        raise ConfigError([f"{v.path}: {v.message} ({v.requirement})" for v in report.errors])
