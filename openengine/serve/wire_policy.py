"""The server-wide policy for what goes wrong on the wire, applied to every method of every service
(OpenEngine's, health and reflection alike) by one interceptor.

- A request whose bytes do not parse as the method's request message fails with `INTERNAL`
  (gRPC's status for a message that cannot be decoded) and a message naming the expected type.
- Any other exception a handler lets escape fails with `INTERNAL` and a generic message: no
  exception class, no Python detail reaches the client.
- A stream whose client has gone (cancelled, reset, killed) ends quietly: the failed write is the
  expected end of that stream, not an error.
- The log gets one line per cause, not one traceback per request: the first occurrence of each
  cause is logged with its traceback (an unexpected exception is a bug worth seeing once), repeats
  are counted and summarised at most once per LOG_INTERVAL_S seconds.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc._cython import cygrpc

log = logging.getLogger("openengine.serve")

UNDECODABLE = "undecodable request"
UNEXPECTED = "unexpected exception"
VANISHED = "write to a vanished client"


# A cause repeated within this many seconds is counted, not logged again.
LOG_INTERVAL_S = 10.0


@dataclass
class CauseCounter:
    """How often each cause happened, and when its last log line was written."""

    counts: dict[str, int] = field(default_factory=dict)
    _logged_at: dict[str, float] = field(default_factory=dict)
    _logged_count: dict[str, int] = field(default_factory=dict)

    def record(self, cause: str, detail: str, *, level: int = logging.WARNING,
               exc_info: BaseException | None = None) -> None:
        """Count one occurrence of `cause`; log a line when the cause is new or LOG_INTERVAL_S
        seconds have passed since its last line (a traceback only the first time)."""
        count = self.counts.get(cause, 0) + 1
        self.counts[cause] = count
        now = time.monotonic()
        last = self._logged_at.get(cause)
        if last is not None and now - last < LOG_INTERVAL_S:
            return
        since = count - self._logged_count.get(cause, 0)
        self._logged_at[cause] = now
        self._logged_count[cause] = count
        if last is None:
            log.log(level, "%s: %s (logged once per %gs with a count)", cause, detail, LOG_INTERVAL_S,
                    exc_info=exc_info)
        else:
            log.log(level, "%s: %d more, %d in total; latest: %s", cause, since, count, detail)


def _is_vanished_client(err: BaseException, context) -> bool:
    """A write failed because the call is over: the client cancelled, reset or died."""
    done = getattr(context, "done", None)
    if callable(done) and done():
        return True
    cancelled = getattr(context, "cancelled", None)
    if callable(cancelled) and cancelled():
        return True
    # grpc.aio reports a send on a call whose peer is gone as cygrpc's ExecuteBatchError, before
    # it has noticed the peer close; UsageError once the call is closed.
    return isinstance(err, _WRITE_FAILURES)


_WRITE_FAILURES = (cygrpc.ExecuteBatchError, cygrpc.UsageError)
VANISHED_WAIT = 5.0   # seconds a stream waits for gRPC to notice its peer is gone


class WirePolicy(grpc.aio.ServerInterceptor):
    """Wraps every method handler with the policy above."""

    def __init__(self):
        self.counter = CauseCounter()

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self.guard(handler, handler_call_details.method)

    def guard(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        counter = self.counter
        parse = handler.request_deserializer or (lambda raw: raw)
        type_name = _message_name(handler.request_deserializer)

        async def decode(raw: bytes, context) -> Any:
            try:
                return parse(raw)
            except Exception as err:  # any parser failure: DecodeError, invalid UTF-8, ...
                counter.record(UNDECODABLE, f"{method}: {type(err).__name__}: {err}", level=logging.INFO)
                await context.abort(grpc.StatusCode.INTERNAL,
                                    f"{method}: the request does not parse as {type_name}: {_plain(err)}")

        async def fail(err: BaseException, context) -> None:
            if _is_vanished_client(err, context):
                counter.record(VANISHED, method, level=logging.DEBUG)
                # Wait for gRPC's own notice that the peer is gone: it cancels this task, which
                # ends the call quietly. Returning at once would make gRPC send the final status
                # on the dead call and log that failure with a traceback (the race this avoids).
                await asyncio.sleep(VANISHED_WAIT)
                return
            counter.record(UNEXPECTED, f"{method}: {type(err).__name__}", level=logging.ERROR, exc_info=err)
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"the engine failed while handling {method}; the failure is logged")

        if handler.request_streaming:
            inner = handler.stream_stream or handler.stream_unary

            async def requests(iterator, context):
                async for raw in iterator:
                    yield await decode(raw, context)
        else:
            inner = handler.unary_unary or handler.unary_stream

        async def request_of(raw, context):
            if handler.request_streaming:
                return requests(raw, context)
            return await decode(raw, context)

        if handler.response_streaming and inspect.isasyncgenfunction(inner):
            # The policy writes each message itself (instead of handing gRPC a generator), so a
            # write to a vanished client fails here, where it can end the stream quietly.
            async def behaviour(raw, context):
                request = await request_of(raw, context)
                stream = inner(request, context)
                try:
                    async for message in stream:
                        try:
                            await context.write(message)
                        except _PASS_THROUGH:
                            raise
                        except Exception as err:
                            if not _is_vanished_client(err, context):
                                raise
                            await stream.aclose()
                            await fail(err, context)   # quietly: the client is gone
                            return
                except _PASS_THROUGH:
                    raise
                except Exception as err:
                    await fail(err, context)
                finally:
                    await stream.aclose()
        else:
            # Unary answers, and streams written with `context.write` (the health servicer's Watch).
            async def behaviour(raw, context):
                request = await request_of(raw, context)
                try:
                    result = inner(request, context)
                    if inspect.isawaitable(result):
                        result = await result
                    return result
                except _PASS_THROUGH:
                    raise
                except Exception as err:
                    await fail(err, context)

        kind = {(False, False): grpc.unary_unary_rpc_method_handler,
                (False, True): grpc.unary_stream_rpc_method_handler,
                (True, False): grpc.stream_unary_rpc_method_handler,
                (True, True): grpc.stream_stream_rpc_method_handler}[
            (handler.request_streaming, handler.response_streaming)]
        return kind(behaviour, request_deserializer=None, response_serializer=handler.response_serializer)


# context.abort raises AbortError to end the call with the status it set; cancellation ends the
# task. Both are how a call is meant to end, not failures.
_PASS_THROUGH = (grpc.aio.AbortError, asyncio.CancelledError)


def _message_name(deserializer) -> str:
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", None) or "the method's request message"


def _plain(err: BaseException) -> str:
    """The parser's own words, without Python class names; generic when it has none."""
    text = str(err).strip()
    if not text or "<class" in text or "Traceback" in text:
        return "malformed protobuf encoding"
    return text[:200]
