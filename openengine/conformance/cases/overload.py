"""Overload: the bounded queue. An engine that advertises `max_queued_requests` takes every
request up to its running slots plus its queue and refuses the next one, retryable, counting it
in load (REQ-CORE-014)."""

from __future__ import annotations

import asyncio

import grpc
from grpc_status import rpc_status

from openengine.conformance.cases.base import Failed, Skipped, Unchecked, case, expect
from openengine.conformance.context import Context, poll, read_rest, status_name
from openengine.contract import CORE
from openengine.v1 import error_pb2, lifecycle_pb2

# The most requests the case holds open at once; a larger bound is left unchecked.
MOST_HELD = 512


def engine_error(err: grpc.RpcError):
    """The `EngineError` a refused call carries in its status details (REQ-CORE-014), or None."""
    try:
        status = rpc_status.from_call(err)
    except ValueError:   # details that disagree with the status itself
        return None
    for detail in status.details if status is not None else ():
        if detail.Is(error_pb2.EngineError.DESCRIPTOR):
            error = error_pb2.EngineError()
            detail.Unpack(error)
            return error
    return None


@case("core.overload.refused", profile=CORE, requires=("REQ-CORE-014",), timeout=90.0,
      title="every running slot and queue place filled, one more request is refused "
            "RESOURCE_EXHAUSTED (retryable, counted); the accepted ones end normally")
async def overload_refused(ctx: Context):
    ctx.require_decoding(observable=True)
    queue = ctx.limit(CORE, "max_queued_requests")
    if not queue:
        raise Skipped("max_queued_requests is 0: the engine advertises no bound on its queue")
    running = ctx.limit(CORE, "max_running_requests")
    bound = running + queue
    if bound > MOST_HELD:
        raise Unchecked(f"filling max_running_requests {running} + max_queued_requests {queue} would hold "
                        f"{bound} requests open, more than the runner's {MOST_HELD}; run the suite against "
                        "an engine started with smaller limits")
    before = await ctx.control.GetLoad()
    if before.running_requests or before.queued_requests:
        raise Unchecked(f"GetLoad counted {before.running_requests} running and {before.queued_requests} "
                        "queued requests before the case, with no request of the runner open, so when the "
                        "queue is full cannot be read from it (a count that stays up fails "
                        "core.load.back-to-idle; another client's requests would show the same)")
    wait = ctx.options.case_timeout
    held = [ctx.request_id("overload") for _ in range(bound)]
    calls = [ctx.inference.Generate(ctx.long_request(request_id=rid), timeout=3 * wait + 30) for rid in held]
    # Each accepted stream is read as it comes, as a client would, so no unread stream holds
    # the engine back.
    readers = [asyncio.ensure_future(read_rest(call)) for call in calls]
    try:
        load, full = await poll(ctx.control.GetLoad, lambda ld: any(r.done() for r in readers)
                                or ld.running_requests + ld.queued_requests >= bound, wait)
        ended = [(rid, c) for rid, c in zip(held, calls) if c.done()]
        for rid, call in ended:
            code = await call.code()
            if code != grpc.StatusCode.OK:
                raise Failed(f"request {rid}, within max_running_requests {running} + max_queued_requests "
                             f"{queue}, was refused {status_name(code)}: {await call.details()}")
        for rid, call in ended:
            messages = readers[held.index(rid)].result()
            if messages and messages[-1].HasField("error"):
                raise Failed(f"request {rid}, within max_running_requests {running} + max_queued_requests "
                             f"{queue}, ended with an EngineError ({messages[-1].error.message!r}) after "
                             f"{len(messages) - 1} messages, before the queue was full")
        if ended:
            raise Unchecked(f"{len(ended)} of the longest requests the model allows finished before the "
                            "queue was full, so it could not be filled")
        if not full:
            raise Unchecked(f"GetLoad showed {load.running_requests} running and {load.queued_requests} queued "
                            f"after {wait:g}s, not the {bound} requests sent")
        extra = ctx.inference.Generate(ctx.generate_request(max_tokens=1), timeout=wait)
        _, settled = await poll(ctx.control.GetLoad,
                                lambda ld: extra.done() or ld.running_requests + ld.queued_requests > bound, wait)
        if not extra.done():
            extra.cancel()
            raise Failed(f"with max_running_requests {running} + max_queued_requests {queue} taken, one more "
                         "request was accepted" + ("" if settled else f" (or left unanswered for {wait:g}s)"))
        try:
            first = await extra.read()
            raise Failed("with every running slot and queue place taken, one more request was accepted: it "
                         f"answered {first.WhichOneof('event') if first is not grpc.aio.EOF else 'nothing, then OK'}")
        except grpc.aio.AioRpcError as err:
            expect(err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
                   f"the request beyond the bound was refused {status_name(err.code())}, not RESOURCE_EXHAUSTED")
            error = engine_error(err)
        expect(error is not None, "the RESOURCE_EXHAUSTED refusal carries no EngineError in its status details")
        expect(error.code == error_pb2.ERROR_CODE_OVERLOADED and error.retryable,
               f"the refusal's EngineError has code {error_pb2.ErrorCode.Name(error.code)} and retryable "
               f"{error.retryable}; expected ERROR_CODE_OVERLOADED, retryable")
        after = await ctx.control.GetLoad()
        expect(after.instance_id == before.instance_id, "the engine restarted during the case")
        expect(after.rejected_requests > before.rejected_requests,
               f"LoadInfo.rejected_requests stayed {after.rejected_requests} after the refusal")
        for rid in held:
            aborted = await ctx.control.Abort(lifecycle_pb2.AbortRequest(request_id=rid))
            expect(aborted.status in (lifecycle_pb2.ABORT_STATUS_ABORTED,
                                      lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED),
                   f"Abort of accepted request {rid} answered "
                   f"{lifecycle_pb2.AbortStatus.Name(aborted.status)}")
        await asyncio.wait(readers, timeout=wait)
        for rid, reader in zip(held, readers):
            if not reader.done():
                raise Failed(f"accepted request {rid} did not end within {wait:g}s of Abort")
            if isinstance(reader.exception(), grpc.aio.AioRpcError):
                err = reader.exception()
                raise Failed(f"accepted request {rid} ended {status_name(err.code())} instead of with its "
                             f"terminal message: {err.details()}")
            messages = reader.result()
            last = messages[-1].WhichOneof("event") if messages else None
            expect(last in ("finished", "error"), f"accepted request {rid} ended without a terminal event")
        _, idle = await poll(ctx.control.GetLoad, lambda ld: not (ld.running_requests or ld.queued_requests), wait)
        expect(idle, f"the engine did not become idle within {wait:g}s of the accepted requests ending")
        return (f"{bound} accepted (max_running_requests {running} + max_queued_requests {queue}), one more "
                "refused retryable and counted, all ended, idle again")
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
