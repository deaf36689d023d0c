"""Serve a backend: route every RPC of the compiled contract to the SDK's implementation or the
backend's (per RPC: Control mixes the SDK's core RPCs with the backend's optional ones), refuse an
RPC whose profile is not advertised, guard Admin, serve standard health and reflection, apply the
wire policy and any interceptors the configuration adds, shut down gracefully."""

from __future__ import annotations

import asyncio
import functools
import hmac
import inspect
import logging
import secrets
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import grpc
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from openengine.contract import HEALTH_SERVICE, RpcInfo, catalogue
from openengine.serve.admin import ADMIN_SERVICE, Admin
from openengine.serve.backend import AbortReason, Backend, Refusal, RefusalCode, ServiceProvider
from openengine.serve.control import Control
from openengine.serve.discovery import Discovery
from openengine.serve.generate import Inference
from openengine.serve.health import SERVING, Health, HealthServicer, desired_statuses
from openengine.serve.load import Observability
from openengine.serve.profiles import CannotServe, select
from openengine.serve.state import ServingState
from openengine.serve.status import refuse
from openengine.serve.wire_policy import WirePolicy

log = logging.getLogger("openengine.serve")

# The protocol's own services, implemented by the SDK for every backend, each class named as its
# service; a class with `needs` is served only for a backend implementing that protocol.
PROTOCOL_CLASSES = (Admin, Control, Discovery, Inference, Observability)


@dataclass(frozen=True)
class AdminAccess:
    """How Admin is reached and guarded (REQ-ADMIN-002): a bearer token, and optionally its own
    address (`port`, `host`), behind mutual TLS when `client_ca` is given with a certificate and key.
    With neither a token nor mutual TLS, a token is generated and logged."""

    token: str | None = None
    port: int | None = None
    host: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    client_ca: str | None = None

    @property
    def mtls(self) -> bool:
        return bool(self.client_ca)


@dataclass(frozen=True)
class ConnectionPolicy:
    """How long the engine keeps a connection, and how many calls gRPC holds for it, as gRPC core
    server arguments. Times are in seconds; the defaults suit schedulers and clients on a local
    network.

    - `handshake_timeout_s` (`grpc.server_handshake_timeout_ms`): a connection that has not
      finished its handshake and sent its HTTP/2 settings by then is closed, so a client that
      connects and sends nothing, or only the HTTP/2 preface, holds nothing for long.
    - `idle_timeout_s` (`grpc.max_connection_idle_ms`): a connection with no call open for this long
      gets GOAWAY and is closed; a client's channel reconnects on its next call. None: never.
    - `keepalive_time_s`, `keepalive_timeout_s` (`grpc.keepalive_time_ms`,
      `grpc.keepalive_timeout_ms` and `grpc.http2.ping_timeout_ms`): the engine pings a connection
      that was quiet for `keepalive_time_s` and closes it when the ping is not answered within
      `keepalive_timeout_s`, so a peer that vanished without a FIN (a crashed host, a dropped
      route) releases its calls; pings continue however long a call stays quiet
      (`grpc.http2.max_pings_without_data` 0).
    - `min_client_ping_interval_s` (`grpc.http2.min_ping_interval_without_data_ms`): the shortest
      keepalive interval a client may use; a client pinging more often, twice, gets GOAWAY
      (`too_many_pings`). Clients may ping with no call open (`grpc.keepalive_permit_without_calls`).
    - `max_pending_calls` (`grpc.server.max_pending_requests`, twice it
      `grpc.server.max_pending_requests_hard_limit`): calls gRPC received that the event loop has
      not started yet. Beyond it gRPC cancels arriving calls at random, all of them beyond twice
      it, and their clients see CANCELLED with nothing saying to retry (gRPC's own defaults, 1,000
      and 3,000, are what a burst of 2,000 calls runs into). Set above any burst the engine should
      answer itself: a call the SDK starts is refused, when the engine is full, with the
      retryable RESOURCE_EXHAUSTED of `max_queued_requests`.
    - `unrequested_call_timeout_s` (`grpc.server_max_unrequested_time_in_server`): a call the
      server received but could not start within this time (its event loop too busy to take it)
      is cancelled, and its client sees CANCELLED; a bounded queue (`max_queued_requests`) keeps
      the loop from falling that far behind.
    """

    handshake_timeout_s: float = 10.0
    idle_timeout_s: float | None = 300.0
    keepalive_time_s: float = 60.0
    keepalive_timeout_s: float = 20.0
    min_client_ping_interval_s: float = 10.0
    max_pending_calls: int = 10_000
    unrequested_call_timeout_s: float = 30.0

    def problems(self) -> list[str]:
        """Values gRPC cannot take, each naming the setting."""
        found = []
        for name in ("handshake_timeout_s", "idle_timeout_s", "keepalive_time_s", "keepalive_timeout_s",
                     "min_client_ping_interval_s", "unrequested_call_timeout_s"):
            value = getattr(self, name)
            if value is not None and not 0.001 <= value <= MAX_POLICY_SECONDS:
                found.append(f"{name} {value}: must be between 0.001 and {MAX_POLICY_SECONDS} seconds")
        if not 1 <= self.max_pending_calls <= MAX_PENDING_CALLS:
            found.append(f"max_pending_calls {self.max_pending_calls}: must be between 1 and {MAX_PENDING_CALLS}")
        if self.unrequested_call_timeout_s < 1:
            found.append(f"unrequested_call_timeout_s {self.unrequested_call_timeout_s}: gRPC counts it in "
                         "whole seconds, so it must be at least 1")
        return found

    def options(self) -> list[tuple[str, int]]:
        """The gRPC server arguments."""
        ms = lambda seconds: max(1, round(seconds * 1000))  # noqa: E731
        out = [("grpc.server_handshake_timeout_ms", ms(self.handshake_timeout_s)),
               ("grpc.keepalive_time_ms", ms(self.keepalive_time_s)),
               ("grpc.keepalive_timeout_ms", ms(self.keepalive_timeout_s)),
               # Current gRPC core waits for any ping's answer this long, keepalive pings included.
               ("grpc.http2.ping_timeout_ms", ms(self.keepalive_timeout_s)),
               ("grpc.http2.max_pings_without_data", 0),
               ("grpc.http2.min_ping_interval_without_data_ms", ms(self.min_client_ping_interval_s)),
               ("grpc.keepalive_permit_without_calls", 1),
               ("grpc.server.max_pending_requests", self.max_pending_calls),
               ("grpc.server.max_pending_requests_hard_limit", 2 * self.max_pending_calls),
               ("grpc.server_max_unrequested_time_in_server", int(self.unrequested_call_timeout_s))]
        if self.idle_timeout_s is not None:
            out.append(("grpc.max_connection_idle_ms", ms(self.idle_timeout_s)))
        return out


# gRPC core takes these in milliseconds as a C int.
MAX_POLICY_SECONDS = 2_000_000.0
# Twice it is still a C int.
MAX_PENDING_CALLS = 1_000_000_000


@dataclass(frozen=True)
class ServeConfig:
    """Where and what to serve. `profiles` names the profiles to advertise (short or full names;
    the mandatory ones always); None serves every profile the backend can. `interceptors` are
    standard `grpc.aio.ServerInterceptor`s, run before the SDK's wire policy on every call
    (logging, metrics, tracing)."""

    host: str = "127.0.0.1"
    port: int = 50051
    profiles: tuple[str, ...] | None = None
    instance_id: str | None = None
    admin: AdminAccess = field(default_factory=AdminAccess)
    # The stalled-consumer policy: abort a request whose client takes no message for this many
    # seconds (None: wait as long as the client keeps the call open).
    stall_timeout_s: float | None = None
    # Handshake and idle timeouts, keepalive: how long a connection is kept (ConnectionPolicy).
    connections: ConnectionPolicy = field(default_factory=ConnectionPolicy)
    interceptors: tuple[grpc.aio.ServerInterceptor, ...] = ()


class Server:
    """One served backend. Build it anywhere; start and stop it inside an event loop."""

    def __init__(self, backend: Backend, config: ServeConfig = ServeConfig()):
        if not isinstance(backend, Backend):
            missing = [name for name in ("describe", "attach", "generate", "abort", "load")
                       if not callable(getattr(backend, name, None))]
            raise CannotServe([f"the backend does not implement {', '.join(missing)} (see openengine.serve.Backend)"])
        problems = config.connections.problems()
        if problems:
            raise CannotServe([f"connections: {p}" for p in problems])
        self.config = config
        self.backend = backend
        self.catalogue = catalogue()
        self.description = backend.describe()
        self._provided = dict(backend.services()) if isinstance(backend, ServiceProvider) else {}
        # The SDK serves a service only with the backend part it needs.
        protocol = {f"openengine.v1.{cls.__name__}": cls for cls in PROTOCOL_CLASSES
                    if isinstance(backend, getattr(cls, "needs", object))}
        selection = select(self.catalogue, self.description, config.profiles,
                           lambda rpc: self._method(rpc, protocol) is not None)
        self.state = ServingState(self.catalogue, backend, self.description, selection)
        if config.instance_id:
            self.state.instance_id = config.instance_id
        report = self.state.advertised_report()
        if report.errors:
            raise CannotServe([f"{v.path}: {v.message} ({v.requirement})" for v in report.errors])
        self.services = {name: cls(self.state) for name, cls in protocol.items()}
        # What each RPC's calls run (None: nothing serves it), resolved once.
        self.implementations = {rpc.name: self._method(rpc, self.services) for rpc in self.catalogue.rpcs}
        admin = config.admin
        self.admin_token = admin.token or (None if admin.mtls else secrets.token_urlsafe(24))
        self.admin_token_generated = admin.token is None and not admin.mtls
        self._health_servicer = HealthServicer()
        self.health = Health(self._health_servicer)
        self.admin_health = Health(HealthServicer()) if admin.port is not None else None
        self.interceptors = [*config.interceptors, WirePolicy()]
        self.servers: list[grpc.aio.Server] = []
        self.address = ""
        self.admin_address = ""
        self._stopped = False
        self._stall_watch: asyncio.Task | None = None

    # -- what is implemented ---------------------------------------------------------------------

    def _method(self, rpc: RpcInfo, owners: dict) -> Callable | None:
        """What serves `rpc`: the SDK's own method when it has one, else the backend's; None
        when neither does. `owners` holds the SDK's service classes or instances."""
        for owner in (owners.get(rpc.service), self._provided.get(rpc.service)):
            found = getattr(owner, rpc.method.name, None) if owner is not None else None
            if found is not None and (inspect.iscoroutinefunction(found) or inspect.isasyncgenfunction(found)):
                return found
        return None

    # -- routing ---------------------------------------------------------------------------------

    def refusal(self, rpc: RpcInfo, context) -> Refusal | None:
        """Why a call of `rpc` is not run: its profile is not advertised (UNIMPLEMENTED), or an
        Admin call lacks the credentials (UNAUTHENTICATED). Nothing runs before this check."""
        if not self.state.has(rpc.profile):
            return Refusal(RefusalCode.UNIMPLEMENTED,
                           f"{rpc.name} belongs to {rpc.profile}, which this engine does not advertise")
        if rpc.service != ADMIN_SERVICE:
            return None
        admin = self.config.admin
        if admin.mtls:
            peer = context.auth_context() or {}
            if not peer.get("x509_common_name") and not peer.get("x509_pem_cert"):
                return Refusal(RefusalCode.UNAUTHENTICATED,
                               "Admin needs a client certificate signed by the configured CA")
        if self.admin_token and not bearer_matches(authorization(context), self.admin_token):
            return Refusal(RefusalCode.UNAUTHENTICATED,
                           "Admin needs 'authorization: Bearer <token>' metadata with the engine's admin token")
        return None

    async def _implementation(self, rpc: RpcInfo, context) -> Callable:
        """What runs a call of `rpc`, once the checks pass; else the call ends refused."""
        impl = self.implementations[rpc.name]
        refusal = self.refusal(rpc, context) or (None if impl else _missing(rpc))
        if refusal is not None:
            await refuse(refusal, context)
        return impl

    async def invoke_unary(self, rpc: RpcInfo, request, context):
        """Run one unary call: the checks, the implementation, a refusal as the call's status."""
        impl = await self._implementation(rpc, context)
        try:
            return await impl(request, context)
        except Refusal as refused:
            await refuse(refused, context)

    async def invoke_stream(self, rpc: RpcInfo, request, context):
        """Run one server-streaming call (see `invoke_unary`)."""
        impl = await self._implementation(rpc, context)
        try:
            async for message in impl(request, context):
                yield message
        except Refusal as refused:
            await refuse(refused, context)

    def _handler(self, rpc: RpcInfo):
        request_class, response_class = rpc.request, rpc.response
        # gRPC tells a stream from a coroutine through the partial.
        if rpc.method.server_streaming:
            return grpc.unary_stream_rpc_method_handler(
                functools.partial(self.invoke_stream, rpc), request_deserializer=request_class.FromString,
                response_serializer=wire_form(response_class))
        return grpc.unary_unary_rpc_method_handler(
            functools.partial(self.invoke_unary, rpc), request_deserializer=request_class.FromString,
            response_serializer=response_class.SerializeToString)

    def _service_handlers(self, services) -> list:
        out = []
        for service in services:
            methods = {r.method.name: self._handler(r) for r in self.catalogue.rpcs if r.service == service}
            if methods:
                out.append(grpc.method_handlers_generic_handler(service, methods))
        return out

    # -- lifecycle -------------------------------------------------------------------------------

    def desired_health(self) -> dict[str, int]:
        """The main address's health: each advertised service (Admin there only when it shares
        the address) and the server's own entry."""
        separate = self.admin_health is not None
        services = [s for s in self.state.advertised_services() if not (separate and s == ADMIN_SERVICE)]
        return desired_statuses(services, self.state.accepting)

    async def start(self) -> None:
        config, state = self.config, self.state
        separate = config.admin.port is not None
        compiled = [s for s in self.catalogue.services if s != HEALTH_SERVICE]
        main_services = [s for s in compiled if not (separate and s == ADMIN_SERVICE)]
        advertised = [s for s in state.advertised_services() if s in main_services]
        server, self.address = self._grpc_server(
            self._service_handlers(main_services), self._health_servicer, advertised, config.host, config.port)
        state.address = self.address
        self.servers.append(server)
        if separate:
            self.servers.append(self._admin_server())
        self.backend.attach(state)
        state.health_changed = lambda: self.health.update(self.desired_health())
        if config.stall_timeout_s:
            inference = next(s for s in self.services.values() if isinstance(s, Inference))
            self._stall_watch = asyncio.ensure_future(inference.watch_stalls(config.stall_timeout_s))
        await self.health.update(self.desired_health())
        if self.admin_health is not None:
            await self.admin_health.update({ADMIN_SERVICE: SERVING, "": SERVING} if state.has_service(ADMIN_SERVICE)
                                           else {"": SERVING})
        for s in self.servers:
            await s.start()
        state.starting = False
        self._log_started()

    def _admin_server(self) -> grpc.aio.Server:
        admin = self.config.admin
        credentials = None
        if admin.mtls:
            credentials = grpc.ssl_server_credentials(
                [(Path(admin.tls_key).read_bytes(), Path(admin.tls_cert).read_bytes())],
                root_certificates=Path(admin.client_ca).read_bytes(), require_client_auth=True)
        server, self.admin_address = self._grpc_server(
            self._service_handlers([ADMIN_SERVICE]), self.admin_health.servicer,
            [ADMIN_SERVICE] if self.state.has_service(ADMIN_SERVICE) else [], admin.host or self.config.host,
            admin.port, credentials)
        return server

    def _grpc_server(self, handlers: list, health, reflected: list[str], host: str, port: int,
                     credentials: grpc.ServerCredentials | None = None) -> tuple[grpc.aio.Server, str]:
        """A gRPC server with the interceptors, `handlers`, standard health answered by `health`
        and reflection of `reflected`, listening on host:port (with TLS when given `credentials`);
        returns it and its address."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *self.config.connections.options()],
                                 interceptors=list(self.interceptors))
        server.add_generic_rpc_handlers(handlers)
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        reflection.enable_server_reflection(reflected + [HEALTH_SERVICE, reflection.SERVICE_NAME], server)
        where = f"{host}:{port}"
        bound = server.add_secure_port(where, credentials) if credentials else server.add_insecure_port(where)
        if bound == 0:
            raise OSError(f"cannot listen on {where}")
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host   # an IPv6 literal
        return server, f"{shown}:{bound}"

    def _log_started(self) -> None:
        state = self.state
        log.info("serving %s on %s (instance %s, capability revision %d)", self.description.engine_name,
                 self.address, state.instance_id, state.revision)
        log.info("profiles: %s", ", ".join(f"{p.name} {p.version_text}" for p in state.advertised))
        for reason in state.selection.left_out:
            log.info("not served: %s", reason)
        if self.admin_address:
            log.info("admin on %s%s", self.admin_address, " (mTLS)" if self.config.admin.mtls else "")
        if self.admin_token_generated and state.has_service(ADMIN_SERVICE):
            log.info("admin token (generated): %s", self.admin_token)

    async def stop(self, grace: float = 1.0) -> None:
        """Graceful shutdown: every health status goes NOT_SERVING first, open Watch streams get
        it, then WatchLoad streams end with status UNAVAILABLE, every accepted Generate stream
        (running or queued) ends with a retryable EngineError DRAINING and status OK, and the
        server stops; a call that arrives meanwhile is refused UNAVAILABLE."""
        if self._stopped:
            return
        self._stopped = True
        state = self.state
        log.info("stopping: health NOT_SERVING")
        await state.transition("stop", "shutdown")
        if self._stall_watch is not None:
            self._stall_watch.cancel()
        await self.health.shutdown()
        if self.admin_health is not None:
            await self.admin_health.shutdown()
        await asyncio.sleep(0.1)  # let open Watch streams deliver NOT_SERVING
        state.load.end_all(Refusal(RefusalCode.UNAVAILABLE, "the engine is shutting down"))
        state.abort_all(AbortReason.SHUTDOWN)
        await asyncio.gather(*(s.stop(grace) for s in self.servers))
        log.info("stopped")

    async def wait(self) -> None:
        await asyncio.gather(*(s.wait_for_termination() for s in self.servers))


def authorization(context) -> str:
    """The call's `authorization` metadata, "" when it sent none."""
    return dict(context.invocation_metadata() or ()).get("authorization", "")


def bearer_matches(header: str, token: str) -> bool:
    """`authorization: Bearer <token>`: the scheme matched case-insensitively (RFC 7235), the
    token compared in constant time."""
    scheme, _, sent = header.strip().partition(" ")
    scheme_ok = scheme.lower() == "bearer"
    token_ok = hmac.compare_digest(sent.strip().encode(), token.encode())
    return scheme_ok and token_ok


def wire_form(cls) -> Callable[[Any], bytes]:
    """A stream's response serializer: a message is serialized, bytes a method composed itself
    (WatchLoad's shared snapshots, openengine.serve.load) go out as they are."""
    serialize = cls.SerializeToString

    def to_wire(message) -> bytes:
        return message if type(message) is bytes else serialize(message)
    return to_wire


def _missing(rpc: RpcInfo) -> Refusal:
    return Refusal(RefusalCode.UNIMPLEMENTED, f"{rpc.name} is not implemented by this engine")


async def serve(backend: Backend, config: ServeConfig = ServeConfig(), *, stop: asyncio.Event | None = None,
                on_started: Callable[[Server], Any] | None = None, grace: float = 1.0) -> Server:
    """Serve `backend` until `stop` is set (or SIGINT/SIGTERM when `stop` is not given)."""
    server = Server(backend, config)
    await server.start()
    if on_started is not None:
        on_started(server)
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
        await server.stop(grace)
    return server


def finish_leftover_tasks(loop: asyncio.AbstractEventLoop, *, timeout: float) -> list[asyncio.Task]:
    """Cancel and wait out whatever is still running on `loop` once the server has stopped, then
    close its async generators; returns the tasks that ignored cancellation within `timeout`.

    A gRPC server that stops while a stream's cancellation is still in flight can leave the
    call's tasks pending. On a closed loop they are never finished: the garbage collector
    destroys them later, at a random moment in whatever code runs then, and gRPC logs each one
    as an unhandled exception. Finishing them here keeps a server's shutdown its own."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    stubborn: list[asyncio.Task] = []
    if pending:
        _, still = loop.run_until_complete(asyncio.wait(pending, timeout=timeout))
        stubborn = list(still)
    loop.run_until_complete(loop.shutdown_asyncgens())
    return stubborn


class RunningServer:
    """A backend served from a background thread with its own event loop (tests, tools).
    `backend` is a factory, called on that loop, so a backend may create loop-bound objects."""

    def __init__(self, backend: Callable[[], Backend], config: ServeConfig = ServeConfig(port=0), *,
                 grace: float = 0.25):
        self._backend = backend
        self._config = config
        self._grace = grace
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="openengine-serve", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.server: Server | None = None
        self._stop: asyncio.Event | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main():
            self._stop = asyncio.Event()
            try:
                await serve(self._backend(), self._config, stop=self._stop, on_started=self._started,
                            grace=self._grace)
            except BaseException as err:  # reported to the starting thread
                self._error = err
                self._ready.set()

        try:
            self.loop.run_until_complete(main())
        finally:
            finish_leftover_tasks(self.loop, timeout=self._grace + 5.0)
            self.loop.close()

    def _started(self, server: Server) -> None:
        self.server = server
        self._ready.set()

    def start(self, timeout: float = 10.0) -> "RunningServer":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the server did not start")
        if self._error is not None:
            raise self._error
        return self

    @property
    def address(self) -> str:
        return self.server.address

    def stop(self, timeout: float = 10.0) -> None:
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def __enter__(self) -> "RunningServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
