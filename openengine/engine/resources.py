"""What the reference engine holds between calls besides its requests: open sessions, loaded
adapters, and the event streams of its subscribers (runtime events, KV events)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from openengine.serve import ErrorCode


class EventStream:
    """Fan-out of events to subscribers, each with its own bounded queue."""

    def __init__(self, capacity: int = 4096):
        self.subscribers: set["Subscriber"] = set()
        self.capacity = capacity

    def publish(self, item) -> None:
        for sub in list(self.subscribers):
            sub.put(item)

    def close_all(self, code: ErrorCode, message: str) -> None:
        for sub in list(self.subscribers):
            sub.close(code, message)


@dataclass(eq=False)
class Subscriber:
    capacity: int
    items: collections.deque = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False
    # Why the engine ends this stream (shutdown, changed capabilities): the code and message.
    closed_with: tuple[ErrorCode, str] | None = None

    def put(self, item) -> None:
        if len(self.items) >= self.capacity:
            self.overflowed = True
        else:
            self.items.append(item)
        self.wake.set()

    def close(self, code: ErrorCode, message: str) -> None:
        self.closed_with = (code, message)
        self.wake.set()

    async def received(self):
        """Every item as it arrives, until the subscriber overflows or is closed (`overflowed`,
        `closed_with` say which)."""
        while True:
            while self.items:
                yield self.items.popleft()
            if self.overflowed or self.closed_with is not None:
                return
            self.wake.clear()
            await self.wake.wait()


@dataclass
class Session:
    session_id: str
    model: str
    capacity_tokens: int
    ttl_ms: int
    retained_tokens: int = 0
    expires_ns: int = 0


@dataclass(frozen=True)
class Adapter:
    """A loaded LoRA adapter (upstream's LoraAdapter: id, name, path)."""

    lora_id: int
    name: str
    source_path: str
