"""The reference engine served by the SDK: its configuration turned into the SDK's, the
stand-in backend, and the layers of the faults it was asked to commit."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Callable

from openengine.engine.backend import ReferenceBackend
from openengine.engine.config import ConfigError, EngineConfig, ResolvedConfig, resolve_config
from openengine.engine.faults import layers
from openengine.serve import CannotServe, RunningServer, ServeConfig, Server
from openengine.serve import serve as serve_backend

log = logging.getLogger("openengine.engine")


def serve_config(resolved: ResolvedConfig) -> ServeConfig:
    """What the SDK serves for a checked configuration: exactly its profiles and limits."""
    config = resolved.config
    return ServeConfig(
        host=config.host, port=config.port, profiles=tuple(p.name for p in resolved.advertised),
        instance_id=resolved.instance_id, aliases=config.aliases,
        admin=dataclasses.replace(config.admin, token=resolved.admin_token))


def resolved(config: EngineConfig | ResolvedConfig) -> ResolvedConfig:
    return config if isinstance(config, ResolvedConfig) else resolve_config(config)


def log_configuration(resolved: ResolvedConfig) -> None:
    log.info("role %s; models: %s", resolved.role, ", ".join(
        f"{m.name} ({', '.join(m.profiles) or 'no model-scoped profiles'})" for m in resolved.models))
    if resolved.admin_token_generated:
        log.info("admin token (generated; pass --admin-token to choose one): %s", resolved.admin_token)
    for warning in resolved.warnings:
        log.warning("%s", warning)
    if resolved.faults:
        log.warning("faults on purpose: %s", ", ".join(sorted(resolved.faults)))


class EngineServer(Server):
    """One reference engine, not started: start and stop it inside an event loop."""

    def __init__(self, config: EngineConfig | ResolvedConfig):
        self.resolved = resolved(config)
        try:
            super().__init__(ReferenceBackend(self.resolved), serve_config(self.resolved),
                             layers=layers(self.resolved.faults))
        except CannotServe as err:
            raise ConfigError(err.problems) from None


def log_address(server: Server) -> None:
    """The line scripts wait for (`make conformance` reads the address from it)."""
    log.info("serving on %s (role %s, instance %s, capability revision %d)", server.address,
             server.description.role, server.state.instance_id, server.state.revision)


async def serve(config: EngineConfig | ResolvedConfig, *, stop: asyncio.Event | None = None,
                on_started: Callable[[Server], Any] | None = None, grace: float = 1.0) -> Server:
    """Run an engine until `stop` is set (or SIGINT/SIGTERM when `stop` is not given)."""
    checked = resolved(config)
    log_configuration(checked)

    def started(server: Server) -> None:
        log_address(server)
        if on_started is not None:
            on_started(server)
    try:
        return await serve_backend(ReferenceBackend(checked), serve_config(checked), stop=stop,
                                   on_started=started, grace=grace, layers=layers(checked.faults))
    except CannotServe as err:
        raise ConfigError(err.problems) from None


class RunningEngine(RunningServer):
    """An engine served from a background thread with its own event loop (tests, tools)."""

    def __init__(self, config: EngineConfig | ResolvedConfig, *, grace: float = 0.25):
        self.resolved = resolved(config)
        checked = self.resolved
        super().__init__(lambda: ReferenceBackend(checked), serve_config(checked), grace=grace,
                         layers=layers(checked.faults))

    def start(self, timeout: float = 10.0) -> "RunningEngine":
        log_configuration(self.resolved)
        try:
            return super().start(timeout)
        except CannotServe as err:
            raise ConfigError(err.problems) from None

    @property
    def engine(self) -> Server:
        return self.server

    @property
    def state(self):
        """The SDK's serving state (what is advertised, requests in flight, load watchers)."""
        return self.server.state

    @property
    def backend(self) -> ReferenceBackend:
        return self.server.backend
