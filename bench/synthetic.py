"""Synthetic load changes for a reference engine, without running generation.

The engine's load numbers come from its scheduler. `SyntheticLoad` puts one long-running request
into that scheduler (through `Scheduler.submit`, as a Generate call does) and, for each change,
lets it produce one more token and announces the change through the backend's `load_changed`, the
same call the engine makes when a request starts or ends. A snapshot's `running_tokens` is then
`prompt_tokens + k` after the k-th change, so whoever reads a snapshot (GetLoad or WatchLoad) can
tell which change it reflects. Nothing in the engine is replaced or patched."""

from __future__ import annotations

import asyncio
import random
import time

from openengine.engine.reference_backend import ReferenceBackend, Request
from openengine.v1 import load_pb2

PROMPT_TOKENS = 1


class SyntheticLoad:
    """One engine's change counter, driven through the engine's own scheduler."""

    def __init__(self, backend: ReferenceBackend):
        self.backend = backend
        self.request = Request(request_id="bench-synthetic-load", prompt_tokens=PROMPT_TOKENS)
        backend.scheduler.submit(self.request)
        if not self.request.running:
            raise RuntimeError("the engine has no free running slot for the synthetic request")
        self.changes = 0

    def change(self) -> int:
        """Apply the next change; returns its counter k (1, 2, ...)."""
        self.changes += 1
        self.request.generated = self.changes
        self.backend.load_changed()
        return self.changes


def change_counter(load: load_pb2.LoadInfo) -> int:
    """Which change a snapshot reflects (the k of the last change applied before it was built)."""
    return load.running_tokens - PROMPT_TOKENS


class PoissonDriver:
    """Applies changes to several engines, each a Poisson process of `rate` changes a second, and
    logs each change as (engine index, k, CLOCK_MONOTONIC ns) just before it is announced."""

    def __init__(self, loads: list[SyntheticLoad], rate: float, *, seed: int = 1):
        self.loads = loads
        self.rate = rate
        self.random = random.Random(seed)
        self.log: list[tuple[int, int, int]] = []
        self._handles: list[asyncio.TimerHandle | None] = [None] * len(loads)
        self.running = False

    def start(self) -> None:
        self.running = True
        for i in range(len(self.loads)):
            self._schedule(i)

    def _schedule(self, i: int) -> None:
        loop = asyncio.get_running_loop()
        self._handles[i] = loop.call_later(self.random.expovariate(self.rate), self._fire, i)

    def _fire(self, i: int) -> None:
        if not self.running:
            return
        now = time.monotonic_ns()
        k = self.loads[i].change()
        self.log.append((i, k, now))
        self._schedule(i)

    def stop(self) -> None:
        self.running = False
        for h in self._handles:
            if h is not None:
                h.cancel()
