"""Cases that judge a saturated engine: every slot it advertises (`max_running_requests`) busy
with a long request and one more queued. No clock judges "at once": the running requests hold
every slot until they end, so a queued request ended only when one of them ends was ended when a
slot freed, not when it was asked to be."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc

from openengine.conformance.cases.base import Failed, Unchecked, case, expect
from openengine.conformance.context import Context, cancel_or_reap, profile_versions, status_name, together
from openengine.conformance.stream import ending
from openengine.contract import CORE
from openengine.v1 import generation_pb2, lifecycle_pb2

# The most slots the cases fill (the registry's default max_running_requests); an engine with
# more is left unchecked rather than flooded.
MAX_SLOTS = 256


class Stream:
    """A Generate stream read to its end in the background: its messages, and how it ended."""

    def __init__(self, ctx: Context, request):
        self.request = request
        self.call = ctx.inference.Generate(request, timeout=ctx.options.case_timeout + 5)
        self.messages: list = []
        self.status: grpc.StatusCode | None = None
        self.details = ""
        self.started = asyncio.Event()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for msg in self.call:
                self.messages.append(msg)
                self.started.set()
            self.status = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as err:
            self.status, self.details = err.code(), err.details() or ""
        except asyncio.CancelledError:
            self.status = grpc.StatusCode.CANCELLED
        finally:
            self.started.set()

    @property
    def ended(self) -> bool:
        return self.task.done()

    @property
    def tokens(self) -> int:
        return sum(len(m.token.tokens) for m in self.messages if m.HasField("token"))

    def shown(self) -> str:
        if not self.ended:
            return f"still open after {self.tokens} tokens"
        if self.status != grpc.StatusCode.OK:
            return f"failed with {status_name(self.status)}" + (f": {self.details}" if self.details else "")
        return ending(self.messages[-1] if self.messages else None, self.tokens)

    def aborted_problem(self, what: str) -> str | None:
        """Why this stream did not end as an aborted one must (a CANCELLED finished event with
        the usage, then OK), or None."""
        last = self.messages[-1] if self.messages else None
        if self.status == grpc.StatusCode.OK and last is not None and last.HasField("finished") \
                and last.finished.reason == generation_pb2.FINISH_REASON_CANCELLED:
            return None if last.HasField("usage") else \
                f"{what} ended with a FINISH_REASON_CANCELLED finished event that carries no usage"
        return (f"{what} {self.shown()}, not with a FINISH_REASON_CANCELLED finished event "
                "carrying the usage and then OK")

    def cancel(self) -> None:
        self.call.cancel()
        cancel_or_reap(self.task)


@dataclass
class Saturated:
    running: list[Stream]
    queued: Stream

    @property
    def streams(self) -> list[Stream]:
        return [*self.running, self.queued]

    def slots_freed(self) -> bool:
        return any(s.ended for s in self.running)

    @property
    def progress(self) -> int:
        """Tokens of the running request furthest along."""
        return max(s.tokens for s in self.running)

    async def until_slots_free_or(self, stream: Stream, total: int) -> bool:
        """Wait until `stream` ends or a running request does; whether `stream` ended while
        every running request was still far from its `total` tokens. Far, not merely unended:
        streams are read side by side, so the end of one and the last messages of another that
        the engine sent just before it may be read in either order."""
        while not stream.ended and not self.slots_freed():
            await asyncio.wait([stream.task, *(s.task for s in self.running)],
                               return_when=asyncio.FIRST_COMPLETED)
        return stream.ended and not self.slots_freed() and self.progress < total - total // 16

    def cancel(self) -> None:
        for s in self.streams:
            s.cancel()


async def saturate(ctx: Context) -> Saturated:
    """Fill every slot with a long request, see each one stream, then queue one more and see it
    counted as queued (GetLoad), or, without load, see it wait while the others stream."""
    ctx.require_decoding(observable=True)
    slots = int(ctx.limit(CORE, "max_running_requests"))
    if slots > MAX_SLOTS:
        raise Unchecked(f"max_running_requests is {slots}; the case fills at most {MAX_SLOTS} slots")
    running = [Stream(ctx, ctx.long_request(prompt=f"conformance fills slot {k}")) for k in range(slots)]
    queued = None
    try:
        waits = [asyncio.wait_for(s.started.wait(), ctx.options.rpc_timeout) for s in running]
        try:
            await together(*waits)
        except asyncio.TimeoutError:
            silent = sum(1 for s in running if not s.messages)
            raise Failed(f"{silent} of {slots} requests started together (max_running_requests "
                         f"is {slots}) did not answer within {ctx.options.rpc_timeout:g} s: the "
                         "engine did not run as many requests at once as it advertises") from None
        _ended_early(running)
        queued = Stream(ctx, ctx.long_request(prompt="conformance waits in the queue"))
        # A case judges a queued request only after GetLoad counts every slot busy and one queued.
        end = asyncio.get_running_loop().time() + ctx.options.rpc_timeout
        counts = await ctx.busy()
        if counts is None:
            raise Unchecked(f"{ctx.load_unreadable}, so no request could be seen queued")
        while counts[1] < 1 or counts[0] + counts[1] < slots + 1:
            _ended_early(running)
            late = asyncio.get_running_loop().time() >= end
            if late and counts[0] + counts[1] < slots:
                raise Failed(f"{slots} requests had each streamed, but GetLoad counted {counts[0]} running "
                             f"and {counts[1]} queued {ctx.options.rpc_timeout:g} s later (REQ-LOAD-001.2)")
            if late:
                raise Unchecked(f"with {slots} requests running (max_running_requests) and one more "
                                f"sent, GetLoad counted {counts[0]} running and {counts[1]} queued, so "
                                "no request was seen queued")
            await asyncio.sleep(0.01)
            counts = await ctx.busy() or (0, 0)
        if queued.messages:
            raise Unchecked(f"with {slots} requests running (max_running_requests) one more started "
                            "at once, so no request was queued")
        return Saturated(running, queued)
    except BaseException:
        for s in running + ([queued] if queued else []):
            s.cancel()
        raise


def _ended_early(running: list[Stream]) -> None:
    """A running request that ended while the engine was being filled: how it ended."""
    done = [s for s in running if s.ended]
    failed = [s for s in done if s.messages and s.messages[-1].HasField("error")]
    if failed:
        raise Failed(f"a long request within every limit {failed[0].shown()} while the engine "
                     "was being filled")
    if done:
        raise Unchecked(f"a request of the model's max_output_tokens {done[0].shown()} before the "
                        "engine was saturated")


@case("core.abort.queued", profile=CORE, requires=("REQ-CORE-010.1", "REQ-CORE-010.7", "REQ-CORE-010.5"),
      title="Abort by request id ends a queued request at once, with an aborted terminal error "
            "and no chunk, and counts it")
async def abort_queued(ctx: Context):
    sat = await saturate(ctx)
    request = lifecycle_pb2.AbortRequest(request_id=sat.queued.request.request_id)
    total = ctx.long_generation_tokens()
    try:
        answer = await ctx.control.Abort(request)
        if sat.slots_freed() or sat.progress >= total // 2:
            raise Unchecked(f"the running requests had streamed {sat.progress} of their {total} "
                            "tokens when Abort answered, too far along to tell whether the queued "
                            "request was ended before a slot freed")
        freed_first = not await sat.until_slots_free_or(sat.queued, total)
        if not freed_first:
            # The client may read a running stream's last messages late; the engine's own count
            # is not late: a running request it no longer counts ended before the queued one.
            counts = await ctx.busy()
            freed_first = counts is not None and counts[0] < len(sat.running)
        if freed_first:
            await asyncio.wait([sat.queued.task], timeout=ctx.options.rpc_timeout)
            problem = sat.queued.aborted_problem("the aborted queued request")
            raise Failed(problem + ", and a running request reached its end first" if problem else
                         f"Abort named the queued request, but it ended only as a running request "
                         f"reached its end ({sat.progress} of {total} tokens) and freed a slot: "
                         "Abort waited for a free slot instead of ending it at once")
        problem = sat.queued.aborted_problem("the aborted queued request")
        expect(problem is None, problem or "")
        expect(not sat.queued.tokens, f"the aborted queued request streamed {sat.queued.tokens} "
                                      "tokens: it was run, not ended in the queue")
        expect(answer.status == lifecycle_pb2.ABORT_STATUS_ABORTED,
               f"Abort of a queued request answered {lifecycle_pb2.AbortStatus.Name(answer.status)}, "
               "not ABORT_STATUS_ABORTED")
    finally:
        sat.cancel()
    return f"{len(sat.running)} slots busy"


@case("core.abort.all-queued", profile=CORE, requires=("REQ-CORE-010.3", "REQ-CORE-010.4", "REQ-CORE-010.5"),
      title="Abort(all) ends every running and every queued request, and counts them all")
async def abort_all_queued(ctx: Context):
    sat = await saturate(ctx)
    try:
        answer = await ctx.control.Abort(lifecycle_pb2.AbortRequest(
            all_requests=lifecycle_pb2.AllRequests()))
        await asyncio.wait([s.task for s in sat.streams], timeout=ctx.options.case_timeout / 2)
        problems = [p for p in (s.aborted_problem(what) for s, what in
                                [(s, f"running request {k + 1}") for k, s in enumerate(sat.running)]
                                + [(sat.queued, "the queued request")]) if p]
        expect(not problems, "after Abort(all): " + "; ".join(problems[:3]) +
               (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""))
        expect(answer.status == lifecycle_pb2.ABORT_STATUS_ABORTED,
               f"Abort(all_requests) ended {len(sat.running)} running and 1 queued request but "
               f"answered {lifecycle_pb2.AbortStatus.Name(answer.status)}, not ABORT_STATUS_ABORTED")
    finally:
        sat.cancel()
    return f"{len(sat.streams)} requests aborted"


@case("core.generate.cancel-queued", profile=CORE, requires=("REQ-CORE-011.2",),
      title="a queued request the client cancels is freed at once: no longer counted while the "
            "requests ahead of it still run")
async def cancel_queued(ctx: Context):
    sat = await saturate(ctx)
    shown = "it was still there"
    # The deadline is half of the running requests, in their own tokens: a request freed only
    # when a slot frees is seen at the end of one, however late the runner reads.
    half = ctx.long_generation_tokens() // 2
    try:
        sat.queued.cancel()
        while not sat.slots_freed() and max(s.tokens for s in sat.running) < half:
            counts = await ctx.busy()
            freed = counts is not None and counts[1] == 0
            shown = f"GetLoad still counted {counts[1]} queued" if counts else "GetLoad failed"
            if freed:
                return f"freed while {len(sat.running)} requests ran"
            await asyncio.sleep(0.01)
        raise Failed(f"the client cancelled a queued request, but {shown} while the "
                     f"{len(sat.running)} requests ahead of it streamed half their "
                     f"{2 * half} tokens: the cancelled request was not freed from the queue")
    finally:
        sat.cancel()


@case("core.capabilities.saturated", profile=CORE, requires=("REQ-CORE-005",),
      title="with every slot busy and a request queued, discovery lists the same profiles")
async def capabilities_saturated(ctx: Context):
    ctx.require_capabilities()
    sat = await saturate(ctx)
    try:
        caps = await ctx.discovery_rpc.GetCapabilities()
        freed = sat.slots_freed()
    finally:
        sat.cancel()
    if freed:
        raise Unchecked("a running request ended before discovery was read, so it was not read "
                        "while the engine was saturated")
    before = profile_versions(ctx.capabilities)
    expect(profile_versions(caps) == before, f"with every slot busy and a request queued GetCapabilities lists "
                                f"{profile_versions(caps)}, at start {before}")
    for now in caps.models:
        was = [profile_versions(m) for m in ctx.capabilities.models if m.model == now.model]
        expect(was == [profile_versions(now)], f"with the engine saturated Capabilities.models lists "
                                  f"{profile_versions(now)} for {now.model!r}, at start {was}")
    return f"{len(sat.running)} running, 1 queued"
