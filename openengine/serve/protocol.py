"""The RPCs the SDK implements for every backend: one class per contract service, named as the
service, with one coroutine per RPC, named as the RPC (as a gRPC servicer). An RPC of the
contract is implemented when one of these classes, or a service object the backend provides
(`ServiceProvider`), has a method of its name; which profiles are served follows from that
(`openengine.serve.profiles`).

A method raises `Refusal` to end its call with a status; the server turns it into one.
"""

from __future__ import annotations

import asyncio
import logging

from openengine.serve.admission import Admission
from openengine.serve.backend import AbortReason, Chunk, Failure, Final, Refusal, RefusalCode, invalid
from openengine.serve.discovery import capabilities, engine_info, model_info
from openengine.serve.load import Watcher
from openengine.serve.loadwire import Framer, Snapshot
from openengine.serve.state import InFlight, ServingState
from openengine.v1 import common_pb2, generation_pb2, lifecycle_pb2, load_pb2
from openengine.validate import effective_watch_settings

log = logging.getLogger("openengine.serve")
_END = object()     # the backend's outputs are exhausted

# What a request's stream says when the SDK ended it, and whether trying again may work.
_ABORTED = {
    AbortReason.ABORT_RPC: ("cancelled by Abort", False),
    AbortReason.CLIENT_CANCELLED: ("the client cancelled the call", False),
    AbortReason.STALLED_CONSUMER: ("the client stopped reading the stream", True),
    AbortReason.PAUSED: ("generation paused", True),
    AbortReason.DRAIN_DEADLINE: ("the drain deadline passed", True),
    AbortReason.SHUTDOWN: ("the engine is shutting down", True),
}


def _error(code: int, message: str, *, retryable: bool = False, details=None) -> generation_pb2.GenerateResponse:
    return generation_pb2.GenerateResponse(error=common_pb2.EngineError(
        code=code, message=message, retryable=retryable, details=dict(details or {})))


def chunk_message(chunk: Chunk) -> generation_pb2.GenerateResponse:
    return generation_pb2.GenerateResponse(chunk=generation_pb2.GenerateChunk(
        index=chunk.index, token_ids=chunk.token_ids, text=chunk.text, logprobs=chunk.logprobs,
        prompt_logprobs=chunk.prompt_logprobs))


def final_message(final: Final) -> generation_pb2.GenerateResponse:
    message = generation_pb2.GenerateFinal(
        index=final.index, token_ids=final.token_ids, text=final.text, logprobs=final.logprobs,
        finish_reason=int(final.finish_reason), stop_reason=final.stop_reason,
        usage=generation_pb2.Usage(prompt_tokens=final.prompt_tokens, completion_tokens=final.completion_tokens,
                                   cached_prompt_tokens=final.cached_prompt_tokens))
    if final.kv_transfer is not None:
        message.kv_transfer.CopyFrom(final.kv_transfer)
    return generation_pb2.GenerateResponse(final=message)


def failure_message(failure: Failure) -> generation_pb2.GenerateResponse:
    return _error(int(failure.code), failure.message, retryable=failure.retryable, details=failure.details)


class Discovery:
    def __init__(self, state: ServingState):
        self.state = state

    async def GetEngineInfo(self, request, context):
        return engine_info(self.state)

    async def GetCapabilities(self, request, context):
        return capabilities(self.state)

    async def GetModelInfo(self, request, context):
        return model_info(self.state, self.state.served_model(request.model))


class Inference:
    def __init__(self, state: ServingState):
        self.state = state
        self.admission = Admission(state)

    async def watch_stalls(self, limit: float) -> None:
        """The stalled-consumer policy: a request whose client has not taken a message for
        `limit` seconds is aborted in the backend and leaves the load; its stream, if the client
        ever reads again, ends with a retryable ABORTED error."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(limit / 4)
            for flight in self.state.stalled(loop.time(), limit):
                log.warning("request %s: the client took no message for %gs; aborting it",
                            flight.request.request_id, limit)
                self.state.in_flight.pop(flight.request.request_id, None)
                self.state.abort(flight, AbortReason.STALLED_CONSUMER)
                self.state.load_changed()

    async def Generate(self, request: generation_pb2.GenerateRequest, context):
        """Admit, run the backend's iterator and stream what it yields. A stream ends with one
        final per sequence, or one terminal error (REQ-SVC-002); a client that goes away has its
        request aborted in the backend at once (REQ-CORE-011)."""
        state = self.state
        admitted = self.admission.admit(request)
        flight = InFlight(admitted)
        state.in_flight[admitted.request_id] = flight
        state.load_changed()
        outputs = state.backend.generate(admitted)
        iterator = aiter(outputs)
        unfinished = admitted.sequences
        clock = asyncio.get_running_loop().time
        ended = False
        started = False
        try:
            try:
                # Abort cancels the wait for the first output; a started request stops in the backend.
                flight.first_output = asyncio.ensure_future(anext(iterator, _END))
                try:
                    output = await flight.first_output
                except asyncio.CancelledError:
                    if flight.aborted is None or asyncio.current_task().cancelling():
                        raise
                    output = _END
                finally:
                    flight.first_output = None
                while output is not _END:
                    started = True
                    if flight.aborted is not None:
                        break
                    kind = type(output)
                    if kind is Chunk:
                        message = chunk_message(output)
                    elif kind is Final:
                        unfinished -= 1
                        message = final_message(output)
                    elif kind is Failure:
                        ended = True
                        yield failure_message(output)
                        return
                    else:
                        raise TypeError(f"the backend yielded {kind.__name__}; yield Chunk, Final or Failure")
                    flight.writing_since = clock()
                    yield message
                    flight.writing_since = None
                    output = await anext(iterator, _END)
            except Refusal as refusal:
                if not started:
                    raise
                ended = True
                yield _error(common_pb2.ERROR_CODE_INVALID_ARGUMENT, refusal.message)
                return
            except Exception as err:
                # After acceptance a failure is the stream's terminal error, never a status.
                log.exception("request %s failed in the backend", admitted.request_id)
                ended = True
                yield _error(common_pb2.ERROR_CODE_INTERNAL,
                             f"the engine failed while generating ({type(err).__name__}); the failure is logged")
                return
            ended = True
            if flight.aborted is not None:
                text, retryable = _ABORTED[flight.aborted]
                yield _error(common_pb2.ERROR_CODE_ABORTED, f"aborted: {text}", retryable=retryable)
            elif unfinished > 0:
                yield _error(common_pb2.ERROR_CODE_INTERNAL,
                             f"the engine ended the stream with {unfinished} sequence(s) unfinished")
        finally:
            if state.in_flight.get(admitted.request_id) is flight:
                del state.in_flight[admitted.request_id]
            if not ended:
                state.abort(flight, AbortReason.CLIENT_CANCELLED)
            close = getattr(outputs, "aclose", None)
            if close is not None:
                await close()
            state.load_changed()


class Lifecycle:
    def __init__(self, state: ServingState):
        self.state = state

    async def Abort(self, request: lifecycle_pb2.AbortRequest, context):
        aborted = self.state.abort_all(AbortReason.ABORT_RPC, abort_targets(self.state, request))
        return lifecycle_pb2.AbortResponse(aborted=aborted)


def abort_targets(state: ServingState, request: lifecycle_pb2.AbortRequest) -> list[InFlight]:
    """The requests in flight an AbortRequest names; INVALID_ARGUMENT for a target set wrong."""
    target = request.WhichOneof("target")
    if target is None:
        raise invalid("target", "set request_ids, kv_session_id or all")
    if target == "request_ids":
        ids = set(request.request_ids.values)
        return [f for f in state.in_flight.values() if f.request.request_id in ids]
    if target == "kv_session_id":
        if not request.kv_session_id:
            raise invalid("kv_session_id", "must not be empty")
        return [f for f in state.in_flight.values() if f.kv_session == request.kv_session_id]
    if not request.all:
        raise invalid("all", "must be true when set")
    return list(state.in_flight.values())


class Observability:
    def __init__(self, state: ServingState):
        self.state = state

    async def GetLoad(self, request: load_pb2.GetLoadRequest, context):
        return self.state.build_load_info(per_rank=request.per_rank)

    async def WatchLoad(self, request: load_pb2.WatchLoadRequest, context):
        """Settings first, then the initial snapshot when asked, then snapshots (periodic, or on
        change for interval 0) and heartbeats after `heartbeat_ms` without a message. Each
        message goes out as wire bytes (`openengine.serve.loadwire`): a snapshot is built and
        serialized once and shared by every stream it goes to."""
        state = self.state
        load_profile = next(p for p in state.advertised if any(r.method.name == "WatchLoad" for r in p.rpcs))
        limits = state.selection.limits[load_profile.name]
        max_watchers = limits["max_watchers"]
        if len(state.load) >= max_watchers:
            raise Refusal(RefusalCode.RESOURCE_EXHAUSTED,
                          f"{len(state.load)} WatchLoad streams are open, "
                          f"{load_profile.name}.max_watchers = {max_watchers}; close one or retry later")
        effective = effective_watch_settings(limits, request)
        interval, heartbeat = effective["interval_ms"], effective["heartbeat_ms"]
        initial, per_rank = effective["initial_snapshot"], effective["per_rank"]
        watcher = Watcher(interval, heartbeat, per_rank, state.revision)
        framer = Framer()
        sequence = 0
        now_ns = state.clock.now_ns
        loop = asyncio.get_running_loop()
        alarm: asyncio.TimerHandle | None = None

        def stamp() -> tuple[int, int]:
            """The next message's sequence and timestamp (REQ-LOAD-014)."""
            nonlocal sequence
            sequence += 1
            return sequence - 1, now_ns()

        def build() -> Snapshot:
            return Snapshot.of(state.build_load_info(per_rank))

        def ring() -> None:
            nonlocal alarm
            alarm = None
            watcher.wake.set()

        settings = load_pb2.WatchLoadSettings(interval_ms=interval, heartbeat_ms=heartbeat, initial_snapshot=initial,
                                              per_rank=per_rank, instance_id=state.instance_id,
                                              capability_revision=state.revision)
        state.load.open(watcher)
        try:
            yield framer.settings(*stamp(), settings)
            opened_at = loop.time()
            if initial:
                first = build()
                opened_at = loop.time()
                yield framer.snapshot(*stamp(), first, 0)
            state.load.start_ticks(watcher, opened_at)
            last_sent = loop.time()
            beat_s = heartbeat / 1000.0
            while True:
                if watcher.closed_with is not None:
                    raise Refusal(*watcher.closed_with)
                taken = watcher.take(build)
                if taken is not None:
                    shared, coalesced = taken
                    yield framer.snapshot(*stamp(), shared, coalesced)
                    last_sent = loop.time()
                    continue
                if heartbeat:
                    due = last_sent + beat_s
                    if loop.time() >= due:
                        yield framer.heartbeat(*stamp())
                        last_sent = loop.time()
                        continue
                    # One alarm per stream, armed only when none is pending: `due` never moves
                    # earlier, so an alarm that rings too soon finds nothing due and re-arms.
                    if alarm is None:
                        alarm = loop.call_at(due, ring)
                watcher.wake.clear()
                await watcher.wake.wait()
        finally:
            if alarm is not None:
                alarm.cancel()
            state.load.close(watcher)
