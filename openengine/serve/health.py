"""Standard health (grpc.health.v1) for every advertised service: Check, Watch and List.

The services that take work (`openengine.contract.WORK_SERVICES`) are SERVING only while the
engine accepts work (REQ-HEALTH-007); control services stay SERVING; the server's own entry ("")
follows the work services. On shutdown everything goes NOT_SERVING first (REQ-HEALTH-010).
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from openengine.contract import WORK_SERVICES

log = logging.getLogger("openengine.serve")

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
HEALTH_LIST_CAP = 100  # the upstream health protocol's List limit


class HealthServicer(health_aio.HealthServicer):
    """The standard aio servicer, with List."""

    async def List(self, request, context):
        """Every name `Check` answers for, with its status (REQ-HEALTH-013). Like the upstream
        health protocol, more than HEALTH_LIST_CAP names is refused rather than answered in part."""
        statuses = dict(self._server_status)
        if len(statuses) > HEALTH_LIST_CAP:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{len(statuses)} health names exceed the List cap of {HEALTH_LIST_CAP}; "
                                "use Check or Watch per service")
        return health_pb2.HealthListResponse(
            statuses={name: health_pb2.HealthCheckResponse(status=status) for name, status in statuses.items()})


def desired_statuses(services: list[str], accepting: bool) -> dict[str, int]:
    """Each advertised service's status, and the server's own ("")."""
    work = SERVING if accepting else NOT_SERVING
    out = {service: work if service in WORK_SERVICES else SERVING for service in services}
    out[""] = work
    return out


class Health:
    """Keeps one servicer in line with the engine. The aio servicer holds a per-service lock while
    it writes to a watcher, so a stalled health watcher could block `set`: updates go through one
    task at a time, and callers wait for it only briefly."""

    def __init__(self, servicer: HealthServicer):
        self.servicer = servicer
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self.shutting_down = False

    async def _apply(self, statuses: dict[str, int]) -> None:
        async with self._lock:
            if self.shutting_down:
                return
            for service, status in statuses.items():
                await self.servicer.set(service, status)

    async def update(self, statuses: dict[str, int], *, wait: float = 1.0) -> None:
        task = asyncio.ensure_future(self._apply(statuses))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            await asyncio.wait_for(asyncio.shield(task), wait)
        except asyncio.TimeoutError:
            log.warning("health update is waiting for a stalled health watcher")

    async def shutdown(self) -> None:
        self.shutting_down = True
        async with self._lock:
            await self.servicer.enter_graceful_shutdown()
