"""What one served engine holds between calls: what it advertises (profiles, limits, models, the
capability revision), the requests in flight, the load watchers and whether it takes work."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from openengine.contract import Catalogue, ProfileInfo
from openengine.serve.backend import (
    AbortReason, Backend, EngineDescription, GenerateRequest, Model, Refusal, RefusalCode, StateListener,
)
from openengine.serve.discovery import advertised_report
from openengine.serve.load import Clock, LoadPublisher, load_info
from openengine.serve.profiles import Selection
from openengine.serve.runstate import RunState, transition
from openengine.serve.status import BackendErrors, refuse_errors
from openengine.validate import number_violations, preflight

log = logging.getLogger("openengine.serve")
# How many ended request ids Abort tells from unknown ones.
FINISHED_REMEMBERED = 4096


@dataclass(eq=False)
class InFlight:
    """One accepted Generate call, from admission to its stream's end."""

    request: GenerateRequest
    aborted: AbortReason | None = None
    writing_since: float | None = None   # loop time a message was handed to gRPC, until it is taken
    # The wait for the backend's first output: an aborted request the backend has not started
    # (still queued in it) ends at once, without waiting for a slot to free up.
    first_output: asyncio.Future | None = None

    @property
    def kv_session(self) -> str:
        """The KV session the request continues from (decode), "" when none."""
        return self.request.message.kv.session.session_id


@dataclass(eq=False)
class ServingState:
    catalogue: Catalogue
    backend: Backend
    description: EngineDescription
    selection: Selection
    instance_id: str = field(default_factory=lambda: f"engine-{uuid.uuid4().hex[:12]}")
    revision: int = 1
    address: str = ""
    run: RunState = field(default_factory=RunState)   # changed only through `transition`
    starting: bool = True   # until the server has started (Control/Health answers STARTING)
    # Brings health in line with the run state; set by the server.
    health_changed: Callable[[], Awaitable[None]] | None = None
    clock: Clock = field(default_factory=Clock)
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    # Ids of requests that ended lately, newest last: Abort answers ALREADY_FINISHED for them.
    finished: OrderedDict = field(default_factory=OrderedDict)
    rejected_requests: int = 0   # Generate calls refused because the queue was full (LoadInfo)
    backend_errors: BackendErrors = field(default_factory=BackendErrors)
    _tasks: set = field(default_factory=set)
    _report: tuple[int, Any] | None = None

    def __post_init__(self) -> None:
        self.models: dict[str, Model] = {m.name: m for m in self.description.models}
        self.load = LoadPublisher(lambda per_rank: load_info(self, per_rank))

    # -- run state and revision -------------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """New work is taken only while SERVING (REQ-HEALTH-007)."""
        return self.run.accepting

    async def transition(self, event: str, reason: str, **details) -> RunState:
        """Move to the state the transition table gives for `event` (IllegalTransition when it
        gives none), then bring health in line with it."""
        previous = self.run
        self.run = transition(previous, event, **details)
        if isinstance(self.backend, StateListener) and self.run != previous:
            self.backend.state_changed(previous, self.run, reason)
        if self.run.phase != previous.phase:
            log.info("state %s -> %s (%s)", previous.name, self.run.name, reason)
            if self.health_changed is not None:
                await self.health_changed()
        return self.run

    def revise(self, selection: Selection, changed: list[str]) -> int:
        """Start a new configuration epoch (REQ-REV-003, REQ-REV-006): the new limits, the next
        capability revision, and every WatchLoad stream of the old one ended with ABORTED.
        Returns the previous revision."""
        previous = self.revision
        self.selection = selection
        self.revision += 1
        self.load.end_all(Refusal(RefusalCode.ABORTED, f"capability revision changed from {previous} to "
                                  f"{self.revision}; re-read the capabilities and watch again"),
                          older_than=self.revision)
        log.info("capability revision %d -> %d (%s)", previous, self.revision, ", ".join(changed))
        if isinstance(self.backend, StateListener):
            self.backend.revision_changed(previous, self.revision, tuple(changed))
        return previous

    # -- what is advertised ----------------------------------------------------------------------

    @property
    def advertised(self) -> tuple[ProfileInfo, ...]:
        return self.selection.advertised

    def has(self, profile: str) -> bool:
        return profile in self.selection.limits

    def limit(self, profile: str, name: str) -> Any:
        return self.selection.limits[profile][name]

    def advertised_services(self) -> list[str]:
        return self.catalogue.services_of(p.name for p in self.advertised)

    def has_service(self, service: str) -> bool:
        return service in self.advertised_services()

    @property
    def default_model(self) -> str:
        return self.description.models[0].name

    def served_model(self, name: str, field: str = "model") -> str:
        """The served model a request names (empty: the default model); NOT_FOUND for another name."""
        if not name:
            return self.default_model
        if name not in self.models:
            raise Refusal(RefusalCode.NOT_FOUND, f"{field}: no served model {name!r}; served: {', '.join(self.models)}")
        return name

    def model_profiles(self, model: str) -> list[ProfileInfo]:
        """The advertised model-scoped profiles `model` lists."""
        listed = {self.catalogue.lookup(p).name for p in self.models[model].profiles}
        return [p for p in self.advertised if p.scope == "model" and p.name in listed]

    def model_limit_values(self, model: str, profile: str) -> dict[str, Any]:
        return {**self.selection.limits[profile], **self.selection.model_limits.get(model, {}).get(profile, {})}

    def lists(self, model: str, profile: str) -> bool:
        """Whether a served model lists an advertised model-scoped profile (REQ-CAP-012)."""
        return model in self.models and any(p.name == profile for p in self.model_profiles(model))

    # -- admission -------------------------------------------------------------------------------

    def advertised_report(self):
        """What the engine advertises now, read as a client reads it (one per revision)."""
        if self._report is None or self._report[0] != self.revision:
            self._report = (self.revision, advertised_report(self))
        return self._report[1]

    def preflight(self, message, model: str) -> None:
        """Refuse `message` (any request the shared preflight knows: Generate, tasks, Encode)
        with INVALID_ARGUMENT for every error `openengine.validate.preflight` finds against what
        the engine advertises, and every number outside its domain; `model` is the served model
        it is routed to."""
        if getattr(message, "model", None) == "" and len(self.models) > 1:
            routed = type(message)()
            routed.CopyFrom(message)
            routed.model = model
            message = routed
        refuse_errors(preflight(message, self.advertised_report())
                      + number_violations(message, vocab_size=self.models[model].tokenizer.vocab_size))

    # -- load and requests ---------------------------------------------------------------------

    def load_changed(self) -> None:
        self.load.changed()

    def ended(self, flight: InFlight) -> None:
        """A Generate call's stream is over: it leaves the table, and Abort remembers it a while."""
        request_id = flight.request.request_id
        if self.in_flight.get(request_id) is flight:
            del self.in_flight[request_id]
        self.finished[request_id] = None
        self.finished.move_to_end(request_id)
        while len(self.finished) > FINISHED_REMEMBERED:
            self.finished.popitem(last=False)
        self.load_changed()

    # -- background work ---------------------------------------------------------------------------

    def keep(self, task: asyncio.Task) -> None:
        """Hold a reference to a background task until it ends."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stalled(self, now: float, limit: float) -> list[InFlight]:
        """Requests whose client has not taken a message for `limit` seconds."""
        return [f for f in self.in_flight.values()
                if f.aborted is None and f.writing_since is not None and now - f.writing_since >= limit]

    def abort_all(self, reason: AbortReason, flights=None) -> int:
        """Abort `flights` (by default every request in flight) not aborted yet; how many that was."""
        hits = [f for f in (self.in_flight.values() if flights is None else flights) if f.aborted is None]
        for flight in hits:
            self.abort(flight, reason)
        return len(hits)

    def abort(self, flight: InFlight, reason: AbortReason) -> None:
        """Mark a request aborted and tell the backend to stop it (the call ends it on the stream)."""
        if flight.aborted is not None:
            return
        flight.aborted = reason
        if flight.first_output is not None:
            flight.first_output.cancel()
        self.keep(asyncio.ensure_future(self.backend.abort(flight.request.request_id, reason)))
