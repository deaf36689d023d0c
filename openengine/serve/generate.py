"""Inference/Generate: admit a call, run the backend's iterator, and stream upstream's
GenerateResponse events made from what it yields.

`Events` turns the backend's outputs into events and holds the rules of the stream: the request
id on every message; PromptOutput at most once and first; TokenOutput with its `output_index`
and one TokenInfo per token; exactly one GenerationFinished per output (PrefillReady instead,
as the terminal event, for a KV producer); usage only on the last message; after a terminal
event, nothing. A backend output that breaks these rules, or a usage that does not match the
tokens sent, ends the stream with an INTERNAL EngineError naming the backend's mistake.
"""

from __future__ import annotations

import asyncio
import logging

from openengine.serve.admission import Admission
from openengine.serve.backend import (
    AbortReason, Chunk, ErrorCode, Failure, Final, FinishReason, GenerateRequest, Prompt, Refusal, RefusalCode,
    Tokenizer,
)
from openengine.serve.state import InFlight
from openengine.serve.status import BackendErrors
from openengine.v1 import error_pb2, generation_pb2

log = logging.getLogger("openengine.serve")
_END = object()     # the backend's outputs are exhausted

# What a cancelled output's GenerationFinished says, by why the SDK ended the request.
CANCELLED_BECAUSE = {
    AbortReason.ABORT_RPC: "cancelled by Control/Abort",
    AbortReason.CLIENT_CANCELLED: "the client cancelled the call",
    AbortReason.STALLED_CONSUMER: "the client stopped reading the stream",
    AbortReason.PAUSED: "generation was paused",
    AbortReason.DRAIN_DEADLINE: "the drain deadline passed",
    AbortReason.SHUTDOWN: "the engine is shutting down",
}
# The EngineError of a backend's refusal that comes after its first output.
LATE_REFUSAL = {RefusalCode.INVALID_ARGUMENT: ErrorCode.INVALID_ARGUMENT,
                RefusalCode.UNIMPLEMENTED: ErrorCode.UNSUPPORTED_FEATURE,
                RefusalCode.RESOURCE_EXHAUSTED: ErrorCode.OVERLOADED,
                RefusalCode.UNAVAILABLE: ErrorCode.OVERLOADED,
                RefusalCode.NOT_FOUND: ErrorCode.REQUEST_NOT_FOUND}


class BackendMistake(Exception):
    """An output that breaks the stream's rules: (where, what)."""

    def __init__(self, where: str, what: str):
        super().__init__(f"{where} {what}")
        self.where, self.what = where, what


class Events:
    """One request's GenerateResponse events, made from its backend outputs (no I/O)."""

    def __init__(self, request: GenerateRequest, tokenizer: Tokenizer):
        self.request_id = request.request_id
        self.skip_text = request.message.skip_detokenize
        self.keep_stop = request.message.stopping.include_stop_in_output
        response = request.message.response
        self.wants_logprobs = response.return_output_logprobs
        self.wants_prompt = response.return_prompt_logprobs
        self.token_text = None if self.skip_text else tokenizer.token_text
        self.open = set(range(request.sequences))
        self.counted = [0] * request.sequences   # tokens per output, as usage counts them
        message = request.message
        self.prompt_tokens = len(message.token_ids.ids) if message.WhichOneof("input") == "token_ids" else 0
        self.cached_tokens: int | None = None
        self.kv_session = None
        self.started = False    # a token or prompt event went out
        self.done = False       # the terminal event went out

    def _event(self, **event) -> generation_pb2.GenerateResponse:
        return generation_pb2.GenerateResponse(request_id=self.request_id, **event)

    def _usage(self) -> generation_pb2.Usage:
        completion = sum(self.counted)
        usage = generation_pb2.Usage(prompt_tokens=self.prompt_tokens, completion_tokens=completion,
                                     total_tokens=self.prompt_tokens + completion)
        if self.cached_tokens is not None:
            usage.cached_prompt_tokens = self.cached_tokens
        return usage

    def _token_info(self, token_id: int, given: generation_pb2.TokenInfo | None) -> generation_pb2.TokenInfo:
        info = generation_pb2.TokenInfo()
        if given is not None:
            info.CopyFrom(given)
        info.token_id = token_id
        self._fill_text(info)
        return info

    def _fill_text(self, info: generation_pb2.TokenInfo) -> None:
        if self.skip_text:
            info.token = ""
            for candidate in info.candidates:
                candidate.token = ""
        elif self.token_text is not None:
            if not info.token:
                info.token = self.token_text(info.token_id)
            for candidate in info.candidates:
                if not candidate.token:
                    candidate.token = self.token_text(candidate.token_id)

    def _tokens(self, kind: str, index: int, token_ids, text: str, logprobs) -> list:
        if index not in range(len(self.counted)):
            raise BackendMistake(f"{kind}.index", f"is {index}; the request has outputs 0 to {len(self.counted) - 1}")
        if index not in self.open:
            raise BackendMistake(f"{kind}.index", f"{index}: that output already ended with its Final")
        if (logprobs or self.wants_logprobs) and len(logprobs) != len(token_ids):
            asked = "; the request asked for output log-probabilities" if self.wants_logprobs else ""
            raise BackendMistake(f"{kind}.logprobs", f"has {len(logprobs)} entries for {len(token_ids)} tokens{asked}")
        if self.wants_prompt and not self.started:
            raise BackendMistake("Prompt", "is missing; the request asked for prompt log-probabilities: yield a "
                                           "Prompt before the first Chunk")
        if not token_ids and not text:
            return []
        self.counted[index] += len(token_ids)
        self.started = True
        tokens = [self._token_info(t, logprobs[i] if logprobs else None) for i, t in enumerate(token_ids)]
        return [self._event(token=generation_pb2.TokenOutput(
            output_index=index, tokens=tokens, text="" if self.skip_text else text))]

    def output(self, output) -> list[generation_pb2.GenerateResponse]:
        """The events for one backend output; BackendMistake when it breaks the rules."""
        kind = type(output)
        if kind is Chunk:
            return self._tokens("Chunk", output.index, output.token_ids, output.text, output.logprobs)
        if kind is Final:
            return self._final(output)
        if kind is Prompt:
            if self.started:
                raise BackendMistake("Prompt", "came after other outputs; yield it once, first")
            self.started = True
            self.prompt_tokens = max(self.prompt_tokens, len(output.tokens))
            tokens = []
            for given in output.tokens:
                info = generation_pb2.TokenInfo()
                info.CopyFrom(given)
                self._fill_text(info)
                tokens.append(info)
            return [self._event(prompt=generation_pb2.PromptOutput(tokens=tokens))]
        if kind is Failure:
            return [self.error(output.code, output.message, output.retryable)]
        raise BackendMistake("output", f"is a {kind.__name__}; yield Prompt, Chunk, Final or Failure")

    def _final(self, final: Final) -> list[generation_pb2.GenerateResponse]:
        index = final.index
        token_ids, logprobs = final.token_ids, final.logprobs
        # A stop token ends the output without being part of it unless the request keeps it: the
        # SDK withholds it (when the backend sent it in this Final) and it still counts as generated.
        withheld = 0
        stop = final.stop_match
        if final.finish_reason == FinishReason.STOP and stop is not None and not self.keep_stop \
                and stop.WhichOneof("match") == "stop_token_id":
            withheld = 1
            if token_ids and token_ids[-1] == stop.stop_token_id:
                token_ids, logprobs = token_ids[:-1], logprobs[:-1]
        events = self._tokens("Final", index, token_ids, final.text, logprobs)
        for name in ("prompt_tokens", "completion_tokens", "cached_prompt_tokens"):
            value = getattr(final, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
                raise BackendMistake(f"Final.{name}", f"is {value!r}; token counts are whole numbers from 0")
        sent = self.counted[index]
        if final.completion_tokens not in (sent, sent + withheld):
            counted = f"{sent} tokens were sent" + (" and a stop token withheld" if withheld else "")
            raise BackendMistake("Final.completion_tokens",
                                 f"is {final.completion_tokens}, but {counted} for output {index}; count every "
                                 "token of the output's Chunks and Final")
        self.counted[index] = final.completion_tokens
        if final.cached_prompt_tokens > final.prompt_tokens:
            raise BackendMistake("Final.cached_prompt_tokens",
                                 f"is {final.cached_prompt_tokens}, more than prompt_tokens {final.prompt_tokens}")
        self.open.discard(index)
        self.prompt_tokens = max(self.prompt_tokens, final.prompt_tokens)
        if final.cached_prompt_tokens or self.cached_tokens is not None:
            self.cached_tokens = max(self.cached_tokens or 0, final.cached_prompt_tokens)
        if final.kv_session is not None:
            self.kv_session = final.kv_session
        last = not self.open
        if final.kv_session is None:
            finished = generation_pb2.GenerationFinished(output_index=index, reason=int(final.finish_reason))
            if final.finish_reason == FinishReason.STOP and final.stop_match is not None:
                finished.stop_match.CopyFrom(final.stop_match)
            events.append(self._event(finished=finished))
        if last:
            self.done = True
            if self.kv_session is not None:
                events.append(self._event(prefill_ready=generation_pb2.PrefillReady(kv_session=self.kv_session)))
            events[-1].usage.CopyFrom(self._usage())
        return events

    def cancelled(self, why: str) -> list[generation_pb2.GenerateResponse]:
        """GenerationFinished(CANCELLED) for every output still open, usage on the last."""
        events = [self._event(finished=generation_pb2.GenerationFinished(
            output_index=index, reason=generation_pb2.FINISH_REASON_CANCELLED, message=why))
            for index in sorted(self.open)]
        self.open.clear()
        self.done = True
        if events:
            events[-1].usage.CopyFrom(self._usage())
        return events

    def error(self, code: ErrorCode, message: str, retryable: bool = False) -> generation_pb2.GenerateResponse:
        """The terminal EngineError, with the usage so far."""
        self.done = True
        self.open.clear()
        return self._event(error=error_pb2.EngineError(code=int(code), message=message, retryable=retryable),
                           usage=self._usage())

    def unfinished(self, errors: BackendErrors) -> generation_pb2.GenerateResponse:
        indexes = ", ".join(str(i) for i in sorted(self.open))
        return self.error(ErrorCode.INTERNAL, errors.report(
            "generate()", "iterator", f"ended with output(s) {indexes} unfinished; end each output with a Final"))


class Inference:
    """openengine.v1.Inference."""

    def __init__(self, state):
        self.state = state
        self.admission = Admission(state)

    async def watch_stalls(self, limit: float) -> None:
        """The stalled-consumer policy: a request whose client has not taken a message for
        `limit` seconds is aborted in the backend and leaves the load."""
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
        """Admit (a refusal is the call's status), then stream the events of the backend's
        outputs. After acceptance every ending is in the stream: the outputs' own, CANCELLED for
        each open output when the SDK ended the request, or one EngineError; the status is OK. A
        client that goes away has its request aborted in the backend at once."""
        state = self.state
        admitted = self.admission.admit(request, context.invocation_metadata())
        flight = InFlight(admitted)
        state.in_flight[admitted.request_id] = flight
        state.load_changed()
        events = Events(admitted, state.models[admitted.model].tokenizer)
        outputs = state.backend.generate(admitted)
        iterator = aiter(outputs)
        clock = asyncio.get_running_loop().time
        try:
            try:
                # Abort cancels the wait for the first output: a request the backend holds in its
                # queue ends at once, without waiting for a slot.
                flight.first_output = asyncio.ensure_future(anext(iterator, _END))
                try:
                    output = await flight.first_output
                except asyncio.CancelledError:
                    if flight.aborted is None or asyncio.current_task().cancelling():
                        raise
                    output = _END
                finally:
                    flight.first_output = None
                while output is not _END and flight.aborted is None:
                    for message in events.output(output):
                        flight.writing_since = clock()
                        yield message
                        flight.writing_since = None
                    if events.done:
                        return
                    output = await anext(iterator, _END)
            except Refusal as refusal:
                if not events.started:
                    raise
                yield events.error(LATE_REFUSAL.get(refusal.code, ErrorCode.INTERNAL), refusal.message,
                                   refusal.retryable)
                return
            except BackendMistake as mistake:
                yield events.error(ErrorCode.INTERNAL,
                                   state.backend_errors.report("generate()", mistake.where, mistake.what))
                return
            except Exception as err:
                # After acceptance a failure is the stream's terminal error, never a status.
                log.exception("request %s failed in the backend", admitted.request_id)
                yield events.error(ErrorCode.INTERNAL,
                                   f"the engine failed while generating ({type(err).__name__}); the failure is logged")
                return
            if flight.aborted is not None:
                for message in events.cancelled(CANCELLED_BECAUSE[flight.aborted]):
                    yield message
            else:
                yield events.unfinished(state.backend_errors)
        finally:
            if not events.done and flight.aborted is None:
                state.abort(flight, AbortReason.CLIENT_CANCELLED)
            state.ended(flight)
            close = getattr(outputs, "aclose", None)
            if close is not None:
                await close()
