"""The reference engine served by the SDK: its configuration turned into the SDK's, and the
stand-in backend."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from openengine.engine.reference_backend import ReferenceBackend
from openengine.engine.config import EngineConfig, check, requested_profiles
from openengine.serve import RunningServer, ServeConfig, Server
from openengine.serve import serve as serve_backend

log = logging.getLogger("openengine.engine")


def serve_config(config: EngineConfig) -> ServeConfig:
    """What the SDK serves for a configuration: its address, profiles and admin guard."""
    return ServeConfig(host=config.host, port=config.port, profiles=requested_profiles(config),
                       instance_id=config.instance_id, admin=config.admin, connections=config.connections)


async def serve(config: EngineConfig, *, stop: asyncio.Event | None = None,
                on_started: Callable[[Server], Any] | None = None, grace: float = 1.0) -> Server:
    """Run an engine until `stop` is set (or SIGINT/SIGTERM when `stop` is not given). Raises
    ConfigError or `openengine.serve.CannotServe` for a configuration that cannot be served."""
    check(config)

    def started(server: Server) -> None:
        # The line scripts wait for (`make conformance` reads the address from it).
        log.info("serving on %s (role %s)", server.address, server.description.role)
        if on_started is not None:
            on_started(server)
    return await serve_backend(ReferenceBackend(config), serve_config(config), stop=stop, on_started=started,
                               grace=grace)


class RunningEngine(RunningServer):
    """An engine served from a background thread with its own event loop (tests, tools)."""

    def __init__(self, config: EngineConfig, *, grace: float = 0.25):
        self.config = check(config)
        super().__init__(lambda: ReferenceBackend(config), serve_config(config), grace=grace)

    @property
    def backend(self) -> ReferenceBackend:
        return self.server.backend
