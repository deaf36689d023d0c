"""The two public seams a fault is built from, and helpers for each.

- On the wire: a standard `grpc.aio.ServerInterceptor` (`OnRpc`) that wraps one method's
  handler. The wrapped behaviour sees what the client sent and what the engine answered (a
  message, each message of a stream, or the status it ended with) and may change any of them.
- In the engine: a wrapper around the backend (`BackendWrapper`), whose methods replace the
  backend's own; everything it does not replace is the backend's.

The SDK is given the interceptors through `ServeConfig.interceptors` and the wrapped backend as
any backend; neither it nor the reference engine knows a fault exists.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Callable

import grpc
from grpc_health.v1 import health_pb2

from openengine.contract import catalogue

# -- on the wire ------------------------------------------------------------------------------------


class Call:
    """The server side of one call as a fault sees it: the context, with its aborts passing
    `recode(code, details, trailing) -> (code, details, trailing)` first (which may raise instead,
    so the call is not ended), and its writes going to `sink` when one is given."""

    def __init__(self, context, recode: Callable | None = None, sink: Callable | None = None):
        self._context = context
        self._recode = recode
        self._sink = sink

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def abort(self, code, details="", trailing_metadata=()):
        if self._recode is not None:
            code, details, trailing_metadata = self._recode(code, details, trailing_metadata)
        await self._context.abort(code, details, trailing_metadata)

    async def write(self, message) -> None:
        if self._sink is None:
            await self._context.write(message)
        else:
            await self._sink(message)


# Standard health is not among the contract's RPC descriptors: its messages are gRPC's.
HEALTH = "grpc.health.v1.Health"
_HEALTH_MESSAGES = {"Check": (health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse),
                    "Watch": (health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse),
                    "List": (health_pb2.HealthListRequest, health_pb2.HealthListResponse)}


def _message_classes(method: str) -> tuple[type, type] | None:
    service, _, name = method.lstrip("/").partition("/")
    if service == HEALTH:
        return _HEALTH_MESSAGES.get(name)
    rpc = catalogue().rpc(service, name)
    return (rpc.request, rpc.response) if rpc is not None else None


def _response_class(method: str) -> type | None:
    classes = _message_classes(method)
    return classes[1] if classes else None


def as_message(message, response_class):
    """What the engine sends, as a message (the SDK may send a composed wire form)."""
    return response_class.FromString(message) if isinstance(message, bytes) and response_class else message


class _Undecodable(Exception):
    pass


async def _written(behaviour, request, call: Call):
    """The messages a stream's behaviour sends, whether it yields them or writes them with
    `context.write`; each write returns once the message is taken, so backpressure still holds."""
    result = behaviour(request, call)
    if hasattr(result, "__aiter__"):
        async with contextlib.aclosing(result) as sent:
            async for message in sent:
                yield message
        return
    queue: asyncio.Queue = asyncio.Queue(maxsize=1)

    async def sink(message):
        taken = asyncio.get_running_loop().create_future()
        await queue.put((message, taken))
        await taken
    call._sink = sink
    task = asyncio.ensure_future(result)
    task.add_done_callback(lambda _: queue.put_nowait(None) if queue.empty() else None)
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                break
            item = getter.result()
            if item is None:
                break
            message, taken = item
            yield message
            taken.set_result(None)
        await task    # its abort or failure ends the call as it would have
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


class OnRpc(grpc.aio.ServerInterceptor):
    """The method `rpc` (`package.Service/Method`) served by `make(inner)`: `inner(request, call)`
    is the engine's behaviour (a coroutine for a unary method, an async iterator of response
    messages for a streaming one), and what `make` returns replaces it. Requests and responses
    are messages, whatever form the engine's handler takes them in. `make` runs once per call:
    what a fault keeps across calls lives outside it."""

    def __init__(self, rpc: str, make: Callable[[Callable], Callable], *, recode: Callable | None = None):
        self.method = f"/{rpc}"
        self.make = make
        self.recode = recode

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None or details.method != self.method:
            return handler
        request_class, response_class = _message_classes(self.method)
        raw_requests = handler.request_deserializer is None

        def to_engine(request):
            return request.SerializeToString() if raw_requests else request

        def from_client(raw):
            if not raw_requests:
                return raw
            try:
                return request_class.FromString(raw)
            except Exception:
                raise _Undecodable() from None

        if handler.unary_stream is not None:
            engine = handler.unary_stream

            async def inner_stream(request, call):
                async for message in _written(engine, to_engine(request), call):
                    yield as_message(message, response_class)
            changed = self.make(inner_stream)

            async def stream(raw, context):
                call = Call(context, self.recode)
                try:
                    request = from_client(raw)
                except _Undecodable:   # the engine's own policy answers it
                    async for message in _written(engine, raw, call):
                        yield message
                    return
                async with contextlib.aclosing(changed(request, call)) as sent:
                    async for message in sent:
                        yield message
            return grpc.unary_stream_rpc_method_handler(stream, response_serializer=_serializer)
        engine = handler.unary_unary

        async def inner_unary(request, call):
            return as_message(await engine(to_engine(request), call), response_class)
        changed = self.make(inner_unary)

        async def unary(raw, context):
            call = Call(context, self.recode)
            try:
                request = from_client(raw)
            except _Undecodable:
                return await engine(raw, call)
            return await changed(request, call)
        return grpc.unary_unary_rpc_method_handler(unary, response_serializer=_serializer)


def _serializer(message) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


class _WithMetadata(Call):
    def __init__(self, context, metadata):
        super().__init__(context)
        self._metadata = metadata

    def invocation_metadata(self):
        return self._metadata


class OnMetadata(grpc.aio.ServerInterceptor):
    """Calls of the methods `matches(method)` picks reach the engine with the metadata
    `change(method, metadata)` returns; `refuse(method, metadata)` may instead end the call with
    a (code, message) status before the engine sees it."""

    def __init__(self, matches: Callable[[str], bool], change: Callable | None = None,
                 refuse: Callable | None = None):
        self.matches, self.change, self.refuse = matches, change, refuse

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        method = details.method.lstrip("/")
        if handler is None or not self.matches(method):
            return handler

        async def seen(context):
            metadata = tuple(context.invocation_metadata() or ())
            refused = self.refuse(method, metadata) if self.refuse is not None else None
            if refused is not None:
                await context.abort(*refused)
            return _WithMetadata(context, self.change(method, metadata)) if self.change is not None else context

        if handler.unary_stream is not None:
            behaviour = handler.unary_stream

            async def stream(raw, context):
                async for message in _written(behaviour, raw, Call(await seen(context))):
                    yield message
            return grpc.unary_stream_rpc_method_handler(stream, request_deserializer=handler.request_deserializer,
                                                        response_serializer=handler.response_serializer)
        behaviour = handler.unary_unary

        async def unary(raw, context):
            return await behaviour(raw, await seen(context))
        return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


class Instead(Exception):
    """The engine ended the call with a status a fault answers differently."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code = code


def answer_instead(rpc: str, code: grpc.StatusCode, answer: Callable[[Any, Any], Any]) -> OnRpc:
    """Where the engine would end a call of `rpc` with status `code`, the call gets what
    `answer(request, response_class)` returns instead (for a stream: the messages it yields, then OK)."""
    def intercept(status, details, trailing):
        if status == code:
            raise Instead(status, details)
        return status, details, trailing

    def make(inner):
        if _streams(rpc):
            async def stream(request, call):
                try:
                    async with contextlib.aclosing(inner(request, Call(call, intercept))) as sent:
                        async for message in sent:
                            yield message
                except Instead:
                    for message in answer(request, _response_class(f"/{rpc}")) or ():
                        yield message
            return stream

        async def unary(request, call):
            try:
                return await inner(request, Call(call, intercept))
            except Instead:
                return answer(request, _response_class(f"/{rpc}"))
        return unary
    return OnRpc(rpc, make)


def change_answer(rpc: str, change: Callable[[Any, Any], None]) -> OnRpc:
    """A unary RPC whose answer `change(answer, request)` alters in place."""
    def make(inner):
        async def answer(request, call):
            message = await inner(request, call)
            change(message, request)
            return message
        return answer
    return OnRpc(rpc, make)


def when_cancelled(action: Callable[[], None]) -> Callable:
    """Wraps a streaming handler so that `action()` runs when its client cancels the stream."""
    def make(inner):
        async def stream(request, call):
            try:
                async with contextlib.aclosing(inner(request, call)) as sent:
                    async for message in sent:
                        yield message
            except (asyncio.CancelledError, GeneratorExit):
                action()
                raise
        return stream
    return make


def change_stream(rpc: str, transform: Callable[[AsyncIterator, Any], AsyncIterator]) -> OnRpc:
    """A streaming RPC whose messages pass `transform(messages, request)`, an async generator."""
    def make(inner):
        async def stream(request, call):
            async with contextlib.aclosing(inner(request, call)) as sent:
                async with contextlib.aclosing(transform(sent, request)) as changed:
                    async for message in changed:
                        yield message
        return stream
    return OnRpc(rpc, make)


def change_messages(rpc: str, change: Callable[[Any, Any], None]) -> OnRpc:
    """A streaming RPC each of whose messages `change(message, request)` alters in place."""
    async def transform(messages, request):
        async for message in messages:
            change(message, request)
            yield message
    return change_stream(rpc, transform)


def drop_messages(rpc: str, drop: Callable[[Any, int], bool], *, renumber: bool = True) -> OnRpc:
    """A stream without the messages `drop(message, dropped so far)` picks, the rest renumbered
    so their `sequence` stays gapless."""
    async def transform(messages, request):
        dropped = 0
        async for message in messages:
            if drop(message, dropped):
                dropped += 1
                continue
            if renumber:
                message.sequence -= dropped
            yield message
    return change_stream(rpc, transform)


def change_request(rpc: str, change: Callable[[Any], Any]) -> OnRpc:
    """The engine runs the request `change(request)` returns instead of the one sent."""
    def make(inner):
        if _streams(rpc):
            async def stream(request, call):
                async with contextlib.aclosing(inner(change(request), call)) as sent:
                    async for message in sent:
                        yield message
            return stream

        async def answer(request, call):
            return await inner(change(request), call)
        return answer
    return OnRpc(rpc, make)


def refuse(rpc: str, code: grpc.StatusCode, message: str) -> OnRpc:
    """Every call of `rpc` ends with this status, whatever the engine would do."""
    def make(inner):
        if _streams(rpc):
            async def stream(request, call):
                await call.abort(code, message)
                yield  # unreachable: makes this a stream
            return stream

        async def answer(request, call):
            await call.abort(code, message)
        return answer
    return OnRpc(rpc, make)


def recode(rpc: str, code: grpc.StatusCode, new_code: grpc.StatusCode, *, keep_details: bool = True) -> OnRpc:
    """The calls of `rpc` the engine ends with `code` end with `new_code` instead (and, unless
    `keep_details`, without the status details that say the request may be retried)."""
    def change(status, details, trailing):
        if status != code:
            return status, details, trailing
        return new_code, details, trailing if keep_details else ()
    return OnRpc(rpc, lambda inner: inner, recode=change)


def _streams(rpc: str) -> bool:
    service, _, name = rpc.partition("/")
    if service == HEALTH:
        return name == "Watch"
    return catalogue().rpc(service, name).method.server_streaming


def with_field(path: str, value_of: Callable[[Any], Any]) -> Callable[[Any, Any], None]:
    """A change to a message giving the field at the dotted `path` the value `value_of(its value)`."""
    *outer, name = path.split(".")

    def change(message, request):
        for field in outer:
            message = getattr(message, field)
        setattr(message, name, value_of(getattr(message, name)))
    return change


async def read_ahead(items: AsyncIterator, keep: set | None = None):
    """What `items` yields, read by a task of its own as soon as it comes. Given `keep`, the
    task outlives the reader (held in `keep`); otherwise it stops when the reader does."""
    queue: asyncio.Queue = asyncio.Queue()

    async def read():
        try:
            async for item in items:
                queue.put_nowait(item)
        except Exception as error:   # a refusal or failure reaches the reader as raised
            queue.put_nowait(error)
        queue.put_nowait(None)

    task = asyncio.ensure_future(read())
    if keep is not None:
        keep.add(task)
        task.add_done_callback(keep.discard)
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        if keep is None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# -- in the engine -----------------------------------------------------------------------------------


class BackendWrapper:
    """A backend with some methods replaced; everything else is the inner backend's (so it is
    the same Backend, AdminOperations, StateListener and ServiceProvider the inner one is)."""

    def __init__(self, inner: object, **methods: Callable):
        self.inner = inner
        self.__dict__.update(methods)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
