"""Admin: guarded lifecycle and configuration changes."""

from __future__ import annotations

import asyncio

from openengine.engine.contract import coerce
from openengine.serve.runstate import DRAINING, PAUSED, SLEEPING, IllegalTransition, RunState
from openengine.engine.services._base import Base, Code, Refused, invalid, refuse_bad_numbers
from openengine.v1 import admin_pb2


class Admin(Base):
    async def _transition(self, event: str, reason: str, **details) -> RunState:
        """Change the run state through the transition table; an event it does not allow in the
        current state is refused with FAILED_PRECONDITION saying what to do first."""
        try:
            return await self.rt.transition(event, reason, **details)
        except IllegalTransition as err:
            raise Refused(Code.FAILED_PRECONDITION, str(err)) from None

    async def Drain(self, request: admin_pb2.DrainRequest, context):
        rt = self.rt
        loop = asyncio.get_running_loop()
        deadline = None
        if request.HasField("deadline_ms"):
            deadline = loop.time() + min(request.deadline_ms, rt.limit("openengine.admin", "max_drain_deadline_ms")) / 1000.0
        await self._transition("drain", "Drain")
        aborted = 0
        while True:
            remaining = len(rt.scheduler.in_flight())
            done = remaining == 0
            yield admin_pb2.DrainResponse(remaining_requests=remaining, aborted_requests=aborted, done=done,
                                          timestamp=rt.clock.timestamp())
            if done:
                return
            if deadline is not None and loop.time() >= deadline:
                aborted += rt.scheduler.abort(lambda r: True, "drain deadline passed", retryable=True)
            await asyncio.sleep(0.05)

    async def PauseGeneration(self, request: admin_pb2.PauseGenerationRequest, context):
        rt = self.rt
        modes = rt.limit("openengine.admin", "pause_modes")
        spellings = rt.catalogue.limit("openengine.admin.pause_modes").enum_spellings()
        by_number = {number: name for name, number in spellings.items()}
        # An unspecified mode means abort (admin.proto).
        mode = by_number.get(request.mode or spellings.get("abort", 0))
        if mode is None or mode not in modes:
            raise invalid("mode", f"{mode or request.mode} is not in openengine.admin.pause_modes ({', '.join(modes)})")
        await self._transition("pause", f"PauseGeneration ({mode})", mode=mode)
        aborted = kept = 0
        if mode == "abort":
            aborted = rt.scheduler.abort(lambda r: True, "generation paused", retryable=True)
        elif mode == "wait":
            loop = asyncio.get_running_loop()
            until = loop.time() + request.timeout_ms / 1000.0 if request.HasField("timeout_ms") else None
            while rt.scheduler.in_flight() and (until is None or loop.time() < until):
                await asyncio.sleep(0.01)
            aborted = rt.scheduler.abort(lambda r: True, "pause timeout passed", retryable=True)
        else:   # keep: the run state holds the requests in flight (RunState.holds_requests)
            kept = len(rt.scheduler.in_flight())
        return admin_pb2.PauseGenerationResponse(aborted_requests=aborted, kept_requests=kept)

    async def ResumeGeneration(self, request, context):
        rt = self.rt
        if rt.run.phase not in (PAUSED, DRAINING):
            return admin_pb2.ResumeGenerationResponse(resumed=False)
        await self._transition("resume", "ResumeGeneration")
        return admin_pb2.ResumeGenerationResponse(resumed=True)

    async def Sleep(self, request: admin_pb2.SleepRequest, context):
        rt = self.rt
        level = request.level or 1
        deepest = rt.limit("openengine.admin", "max_sleep_level")
        if level > deepest:
            raise invalid("level", f"{level} exceeds openengine.admin.max_sleep_level = {deepest}")
        tags = set(request.tags)
        known = set(rt.limit("openengine.admin", "wake_tags"))
        if tags - known:
            raise invalid("tags", f"{', '.join(sorted(tags - known))} not in openengine.admin.wake_tags "
                          f"({', '.join(sorted(known)) or 'none'})")
        if rt.scheduler.in_flight():
            raise Refused(Code.FAILED_PRECONDITION, "requests are in flight; drain or pause first")
        await self._transition("sleep", f"Sleep (level {level})", tags=frozenset(tags or known), level=level)
        if not tags or "kv_cache" in tags:
            rt.clear_prefix_cache()
        return admin_pb2.SleepResponse(released_bytes=(1 << 30) * level)

    async def WakeUp(self, request: admin_pb2.WakeUpRequest, context):
        rt = self.rt
        tags = set(request.tags)
        known = set(rt.limit("openengine.admin", "wake_tags"))
        if tags - known:
            raise invalid("tags", f"{', '.join(sorted(tags - known))} not in openengine.admin.wake_tags")
        if rt.run.phase != SLEEPING:
            return admin_pb2.WakeUpResponse(awake=True)
        state = await self._transition("wake", "WakeUp", tags=frozenset(tags))
        return admin_pb2.WakeUpResponse(awake=state.phase != SLEEPING)

    async def ResetPrefixCache(self, request, context):
        rt = self.rt
        if rt.scheduler.running:
            return admin_pb2.ResetPrefixCacheResponse(reset=False, freed_blocks=0)
        return admin_pb2.ResetPrefixCacheResponse(reset=True, freed_blocks=rt.clear_prefix_cache())

    async def UpdateConfig(self, request: admin_pb2.UpdateConfigRequest, context):
        rt = self.rt
        refuse_bad_numbers(rt, request)
        updatable = set(rt.limit("openengine.admin", "updatable_limits"))
        new = {k: dict(v) for k, v in rt.limits.items()}
        new_models = {m: {k: dict(v) for k, v in per.items()} for m, per in rt.model_limits.items()}
        changed = []
        for i, update in enumerate(request.updates):
            where = f"updates[{i}]"
            lim = rt.catalogue.limit(update.limit)
            if lim is None or lim.profile not in new:
                raise invalid(f"{where}.limit", f"{update.limit!r} is not a limit of an advertised profile")
            if update.limit not in updatable:
                raise invalid(f"{where}.limit", f"{update.limit} is not in openengine.admin.updatable_limits")
            if update.model and update.model not in rt.models:
                raise Refused(Code.NOT_FOUND, f"{where}.model: no served model {update.model!r}")
            # A model-scoped limit named for one model changes that model's value only.
            per_model = bool(update.model) and rt.catalogue.profile(lim.profile).scope == "model"
            if per_model:
                self.model_lists(update.model, lim.profile, f"{where}.model")
            kind = update.WhichOneof("value")
            if kind is None:
                raise invalid(f"{where}.value", "set the new value")
            value = getattr(update, kind)
            if kind == "string_values":
                value = list(value.values)
            try:
                value = coerce(lim, value)
            except ValueError as err:
                raise invalid(f"{where}.{kind}", str(err)) from None
            if per_model:
                own = new_models.setdefault(update.model, {}).setdefault(lim.profile, {})
                current = own.get(lim.name, new[lim.profile][lim.name])
                own[lim.name] = value
            else:
                # An empty model means every model: no model keeps its own value of the limit.
                current = new[lim.profile][lim.name]
                new[lim.profile][lim.name] = value
                for per in new_models.values():
                    if lim.name in per.get(lim.profile, {}):
                        if per[lim.profile].pop(lim.name) != value:
                            current = None
            if current != value and update.limit not in changed:
                changed.append(update.limit)
        from openengine.engine.config import _reference_engine_problems

        problems = _reference_engine_problems(new) + rt.check_update(new, new_models)
        if problems:
            raise invalid("updates", "; ".join(problems))
        if request.validate_only or not changed:
            return admin_pb2.UpdateConfigResponse(previous_revision=rt.revision, revision=rt.revision,
                                                  changed_limits=changed)
        previous, revision = rt.apply_limits(new, changed, model_limits=new_models)
        return admin_pb2.UpdateConfigResponse(previous_revision=previous, revision=revision, changed_limits=changed)
