"""Admin for a backend that implements `AdminOperations`: the SDK owns the run state (the
transition table of `openengine.serve.runstate`), health following it, the refusals and the
capability revision; the backend does the engine's part of each operation. The server guards
every call (token or mutual TLS) before it reaches this class."""

from __future__ import annotations

import asyncio
import dataclasses

from openengine.contract import catalogue
from openengine.serve.backend import AbortReason, AdminOperations, Refusal, RefusalCode, invalid
from openengine.serve.limits import coerce
from openengine.serve.profiles import combination_refusals
from openengine.serve.runstate import DRAINING, PAUSED, SLEEPING, IllegalTransition, RunState
from openengine.serve.state import ServingState
from openengine.v1 import admin_pb2
from openengine.validate import Severity, number_violations

ADMIN_PROFILE = "openengine.admin"
ADMIN_SERVICE = catalogue().profile(ADMIN_PROFILE).services[0]


class Admin:
    # What the backend must implement for the SDK to serve this service's RPCs.
    needs = AdminOperations

    def __init__(self, state: ServingState):
        self.state = state

    @property
    def operations(self) -> AdminOperations:
        return self.state.backend

    def _limit(self, name: str):
        return self.state.limit(ADMIN_PROFILE, name)

    async def _transition(self, event: str, reason: str, **details) -> RunState:
        """Change the run state through the transition table; an event it does not allow now is
        refused with FAILED_PRECONDITION saying what to do first."""
        try:
            return await self.state.transition(event, reason, **details)
        except IllegalTransition as err:
            raise Refusal(RefusalCode.FAILED_PRECONDITION, str(err)) from None

    async def Drain(self, request: admin_pb2.DrainRequest, context):
        state = self.state
        loop = asyncio.get_running_loop()
        deadline = None
        if request.HasField("deadline_ms"):
            deadline = loop.time() + min(request.deadline_ms, self._limit("max_drain_deadline_ms")) / 1000.0
        await self._transition("drain", "Drain")
        aborted = 0
        while True:
            remaining = len(state.in_flight)
            yield admin_pb2.DrainResponse(remaining_requests=remaining, aborted_requests=aborted, done=remaining == 0,
                                          timestamp=state.clock.timestamp())
            if remaining == 0:
                return
            if deadline is not None and loop.time() >= deadline:
                aborted += state.abort_all(AbortReason.DRAIN_DEADLINE)
            await asyncio.sleep(0.05)

    async def PauseGeneration(self, request: admin_pb2.PauseGenerationRequest, context):
        state = self.state
        spellings = state.catalogue.limit(f"{ADMIN_PROFILE}.pause_modes").enum_spellings()
        by_number = {number: name for name, number in spellings.items()}
        mode = by_number.get(request.mode or spellings.get("abort", 0))   # unspecified means abort
        modes = self._limit("pause_modes")
        if mode is None or mode not in modes:
            raise invalid("mode", f"{mode or request.mode} is not in {ADMIN_PROFILE}.pause_modes ({', '.join(modes)})")
        await self._transition("pause", f"PauseGeneration ({mode})", mode=mode)
        await self.operations.pause(mode)
        aborted = kept = 0
        if mode == "abort":
            aborted = state.abort_all(AbortReason.PAUSED)
        elif mode == "wait":
            loop = asyncio.get_running_loop()
            until = loop.time() + request.timeout_ms / 1000.0 if request.HasField("timeout_ms") else None
            while state.in_flight and (until is None or loop.time() < until):
                await asyncio.sleep(0.01)
            aborted = state.abort_all(AbortReason.PAUSED)
        else:
            kept = len(state.in_flight)
        return admin_pb2.PauseGenerationResponse(aborted_requests=aborted, kept_requests=kept)

    async def ResumeGeneration(self, request, context):
        if self.state.run.phase not in (PAUSED, DRAINING):
            return admin_pb2.ResumeGenerationResponse(resumed=False)
        await self._transition("resume", "ResumeGeneration")
        await self.operations.resume()
        return admin_pb2.ResumeGenerationResponse(resumed=True)

    def _tags(self, request) -> set[str]:
        tags = set(request.tags)
        known = set(self._limit("wake_tags"))
        if tags - known:
            raise invalid("tags", f"{', '.join(sorted(tags - known))} not in {ADMIN_PROFILE}.wake_tags "
                                  f"({', '.join(sorted(known)) or 'none'})")
        return tags

    async def Sleep(self, request: admin_pb2.SleepRequest, context):
        level = request.level or 1
        deepest = self._limit("max_sleep_level")
        if level > deepest:
            raise invalid("level", f"{level} exceeds {ADMIN_PROFILE}.max_sleep_level = {deepest}")
        tags = self._tags(request)
        if self.state.in_flight:
            raise Refusal(RefusalCode.FAILED_PRECONDITION, "requests are in flight; drain or pause first")
        await self._transition("sleep", f"Sleep (level {level})", tags=frozenset(tags or self._limit("wake_tags")),
                               level=level)
        released = await self.operations.sleep(level, frozenset(tags))
        return admin_pb2.SleepResponse(released_bytes=released)

    async def WakeUp(self, request: admin_pb2.WakeUpRequest, context):
        tags = self._tags(request)
        if self.state.run.phase != SLEEPING:
            return admin_pb2.WakeUpResponse(awake=True)
        await self.operations.wake(frozenset(tags))
        run = await self._transition("wake", "WakeUp", tags=frozenset(tags))
        return admin_pb2.WakeUpResponse(awake=run.phase != SLEEPING)

    async def ResetPrefixCache(self, request, context):
        freed = await self.operations.reset_prefix_cache()
        if freed is None:
            return admin_pb2.ResetPrefixCacheResponse(reset=False, freed_blocks=0)
        self.state.load_changed()
        return admin_pb2.ResetPrefixCacheResponse(reset=True, freed_blocks=freed)

    async def UpdateConfig(self, request: admin_pb2.UpdateConfigRequest, context):
        """Check every update against the contract, the advertised profiles and
        `updatable_limits`, then (unless `validate_only`) start a new capability revision."""
        state = self.state
        errors = [f"{v.message} ({v.requirement})" for v in number_violations(request) if v.severity is Severity.ERROR]
        if errors:
            raise invalid("updates", "; ".join(errors))
        updatable = set(self._limit("updatable_limits"))
        limits = {k: dict(v) for k, v in state.selection.limits.items()}
        model_limits = {m: {k: dict(v) for k, v in per.items()} for m, per in state.selection.model_limits.items()}
        changed: list[str] = []
        for i, update in enumerate(request.updates):
            where = f"updates[{i}]"
            lim = state.catalogue.limit(update.limit)
            if lim is None or lim.profile not in limits:
                raise invalid(f"{where}.limit", f"{update.limit!r} is not a limit of an advertised profile")
            if update.limit not in updatable:
                raise invalid(f"{where}.limit", f"{update.limit} is not in {ADMIN_PROFILE}.updatable_limits")
            if update.model and update.model not in state.models:
                raise Refusal(RefusalCode.NOT_FOUND, f"{where}.model: no served model {update.model!r}")
            # A model-scoped limit named for one model changes that model's value only.
            per_model = bool(update.model) and state.catalogue.profile(lim.profile).scope == "model"
            if per_model and not state.lists(update.model, lim.profile):
                raise invalid(f"{where}.model", f"model {update.model!r} does not list {lim.profile} "
                                                "(see its ModelInfo.capabilities.profiles)")
            kind = update.WhichOneof("value")
            if kind is None:
                raise invalid(f"{where}.value", "set the new value")
            value = getattr(update, kind)
            try:
                value = coerce(lim, list(value.values) if kind == "string_values" else value)
            except ValueError as err:
                raise invalid(f"{where}.{kind}", str(err)) from None
            if per_model:
                own = model_limits.setdefault(update.model, {}).setdefault(lim.profile, {})
                current = own.get(lim.name, limits[lim.profile][lim.name])
                own[lim.name] = value
            else:
                current = limits[lim.profile][lim.name]
                limits[lim.profile][lim.name] = value
                for per in model_limits.values():   # an update for every model replaces their own values
                    if per.get(lim.profile, {}).pop(lim.name, value) != value:
                        current = None
            if current != value and update.limit not in changed:
                changed.append(update.limit)
        problems = combination_refusals(state.advertised, limits,
                                        {m: [p.name for p in state.model_profiles(m)] for m in state.models},
                                        model_limits, cat=state.catalogue)
        if problems:
            raise invalid("updates", "; ".join(problems))
        if request.validate_only or not changed:
            return admin_pb2.UpdateConfigResponse(previous_revision=state.revision, revision=state.revision,
                                                  changed_limits=changed)
        self.operations.update_limits(limits)
        previous = state.revise(dataclasses.replace(state.selection, limits=limits, model_limits=model_limits),
                                changed)
        return admin_pb2.UpdateConfigResponse(previous_revision=previous, revision=state.revision,
                                              changed_limits=changed)
