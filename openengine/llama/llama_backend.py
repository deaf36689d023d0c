"""llama.cpp as an OpenEngine backend: the scheduler (`openengine.llama.scheduler`) behind the
SDK's `Backend` interface.

It receives upstream's `GenerateRequest` and answers in the SDK's outputs, which the SDK turns
into upstream's GenerateResponse events. What it advertises comes from the model file and the
configuration: the context length and vocabulary from the GGUF file, the limits from
`LlamaConfig`. It serves the core (one output per request, sampling with temperature, top-k,
top-p, min-p, seed and penalties, stop texts and stop token ids with the matched stop reported,
output log-probabilities with the top N candidates), load, and admin (pause in every mode, sleep
level 1 that frees the KV cache); it has no guided decoding, no prompt log-probabilities and no
updatable limits, and advertises none of them.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from openengine.llama import scheduler as sched
from openengine.llama.native import LlamaModel
from openengine.serve import (
    AbortReason, Chunk, EngineDescription, EngineHandle, ErrorCode, Failure, Final, GenerateRequest, Load,
    Model, Refusal, RefusalCode, Tokenizer, TokenInfo, invalid,
)

# llama.cpp's sequence ids are bounded (LLAMA_MAX_SEQ).
MAX_SEQUENCES = 256
LARGEST_SEED = 0xFFFFFFFE   # llama.cpp seeds are 32-bit; 0xFFFFFFFF asks for a random one
# SamplingParams fields passed on when set, under the same names; an unset one keeps the
# scheduler's neutral default (`sched.Sampling`).
_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty", "frequency_penalty",
                    "presence_penalty")


@dataclass(frozen=True)
class LlamaConfig:
    """How the backend runs a model; its context is the model's training context, and the longest
    output half of it (so a request asking for the longest output still has room for its prompt).

    `threads` is llama.cpp's threads per step. More speed up a large model on cores nobody else
    uses; but they wait for each other by spinning, so more threads than free cores make every
    step slower (on a busy 2-core machine, hundreds of times slower), hence one by default."""

    model_path: str
    max_running_requests: int = 8
    max_queued_requests: int = 64
    max_batch_tokens: int = 512
    max_logprobs: int = 20
    threads: int = 1

    def problems(self) -> list[str]:
        """What is wrong with the numbers for llama.cpp, each naming the setting and the range it
        needs (the SDK holds every limit to the contract's range when it starts)."""
        found = []
        if not 1 <= self.max_running_requests <= MAX_SEQUENCES:
            found.append(f"max_running_requests {self.max_running_requests}: must be 1..{MAX_SEQUENCES} "
                         "(llama.cpp sequence ids)")
        if self.max_queued_requests < 1:
            found.append(f"max_queued_requests {self.max_queued_requests}: must be 1 or more "
                         "(the queue is always bounded; the protocol's 0 would advertise no bound)")
        if self.max_batch_tokens < self.max_running_requests:
            found.append(f"max_batch_tokens {self.max_batch_tokens}: must be at least "
                         f"max_running_requests ({self.max_running_requests}), one token per running request")
        if self.threads < 1:
            found.append(f"threads {self.threads}: must be 1 or more")
        return found


class LlamaBackend:
    """Serves one GGUF model on the CPU. Construct it on the event loop that serves it."""

    def __init__(self, config: LlamaConfig):
        problems = config.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.config = config
        self.model = LlamaModel(config.model_path)
        facts = self.model.facts
        self.context_tokens = facts.context_length
        self.max_output_tokens = self.context_tokens // 2
        self.model_name = facts.name   # the file's general.name
        self._loop = asyncio.get_running_loop()
        self._engine: EngineHandle | None = None
        self._streams: dict[str, _Stream] = {}
        self._inbox: list[sched.Event] = []
        self._inbox_lock = threading.Lock()
        self.scheduler = sched.Scheduler(self.model, sched.SchedulerConfig(
            max_running_requests=config.max_running_requests,
            max_batch_tokens=config.max_batch_tokens,
            context_tokens=self.context_tokens,
            threads=config.threads), self._from_scheduler)

    # -- Backend ------------------------------------------------------------------------------------

    def describe(self) -> EngineDescription:
        facts = self.model.facts
        # One token's own text, for TokenInfo.token (a piece may be part of a UTF-8 character).
        tokenizer = Tokenizer(Path(self.config.model_path).name, vocab_size=facts.vocab_size,
                              eos_token_id=facts.eos_token_id, bos_token_id=facts.bos_token_id,
                              token_text=lambda token: self.model.piece(token).decode("utf-8", errors="replace"))
        model = Model(self.model_name, max_context_tokens=self.context_tokens,
                      max_output_tokens=self.max_output_tokens, tokenizer=tokenizer)
        return EngineDescription(
            engine_name="llama.cpp", engine_version=f"llama-cpp-python {llama_cpp.__version__}",
            models=(model,),
            limits={"core": {"max_sequences": 1, "max_logprobs": self.config.max_logprobs,
                             "output_logprobs": self.config.max_logprobs > 0,
                             "min_p": True, "prompt_logprobs": False,
                             "max_running_requests": self.config.max_running_requests,
                             "max_queued_requests": self.config.max_queued_requests,
                             "max_batch_tokens": self.config.max_batch_tokens},
                    "load": {"change_driven": True},
                    "admin": {"pause_modes": ["abort", "wait", "keep"], "max_sleep_level": 1}})

    def attach(self, engine: EngineHandle) -> None:
        self._engine = engine

    async def generate(self, request: GenerateRequest):
        plan = self.plan(request)
        stream = _Stream()
        self._streams[request.request_id] = stream
        try:
            self.scheduler.submit(plan)
        except sched.SchedulerClosed:
            del self._streams[request.request_id]
            raise Refusal(RefusalCode.UNAVAILABLE, "the engine is stopping; retry on another engine",
                          retryable=True) from None
        try:
            while True:
                out = stream.take(await stream.wait())
                if out is not None:
                    yield out
                if isinstance(out, (Final, Failure)):
                    return
        finally:
            if not stream.finished:
                self.scheduler.cancel(request.request_id)

    async def abort(self, request_id: str, reason: AbortReason) -> None:
        stream = self._streams.get(request_id)
        if stream is not None and self.scheduler.cancel(request_id):
            await stream.done

    def load(self) -> Load:
        return self.scheduler.load()

    # -- AdminOperations (openengine.admin; the SDK keeps the run state and aborts requests) ----------

    async def pause(self, mode: str) -> None:
        """`abort` and `keep` stop the steps (kept requests hold their KV cells); `wait` lets
        the running requests finish, as the SDK refuses new ones meanwhile."""
        if mode != "wait":
            self.scheduler.pause()

    async def resume(self) -> None:
        self.scheduler.resume()

    async def sleep(self, level: int, tags: frozenset[str]) -> int:
        """Level 1, the only one advertised: free the KV cache; the weights stay loaded."""
        return self.scheduler.sleep()

    async def wake(self, tags: frozenset[str]) -> None:
        self.scheduler.wake()

    async def reset_prefix_cache(self) -> int | None:
        """Nothing to drop: a finished request's KV cells are freed at once, so no prefix is
        kept for another request."""
        return 0

    def update_limits(self, limits) -> None:
        """Never called with a change: no limit is advertised as updatable (every one sizes the
        llama.cpp context made at start)."""

    def close(self) -> None:
        """Stop the scheduler (what runs ends ABORTED) and free the model."""
        self.scheduler.close()
        self.model.close()

    # -- admission ----------------------------------------------------------------------------------

    def plan(self, request: GenerateRequest) -> sched.SequenceRequest:
        """What only this engine can check (the room its context leaves, its seeds, the kinds of
        candidates it returns), then the scheduler's request. The SDK's admission has already
        checked the advertised limits (max_output_tokens among them) and the number domains."""
        message, sampling, stopping, response = request.message, request.sampling, request.stopping, request.response
        if message.WhichOneof("input") == "token_ids":
            prompt = tuple(message.token_ids.ids)
        else:
            prompt = tuple(self.model.tokenize(message.prompt))
        if not prompt:
            raise invalid("prompt", "the prompt is empty")
        room = self.context_tokens - len(prompt)
        if room < 1:
            raise invalid("prompt", f"{len(prompt)} tokens leave no room in the context "
                                     f"(ModelInfo.max_context_length = {self.context_tokens})")
        if stopping.HasField("max_tokens"):
            if stopping.max_tokens < 1:
                raise invalid("stopping.max_tokens", "must be at least 1")
            if stopping.max_tokens > room:
                raise invalid("stopping.max_tokens", f"the prompt's {len(prompt)} tokens plus "
                               f"{stopping.max_tokens} exceed ModelInfo.max_context_length = "
                               f"{self.context_tokens}")
            max_tokens = stopping.max_tokens
        else:
            max_tokens = min(self.max_output_tokens, room)
        if stopping.min_tokens > max_tokens:
            raise invalid("stopping.min_tokens", f"{stopping.min_tokens} exceeds max_tokens {max_tokens}")
        if sampling.HasField("seed") and sampling.seed > LARGEST_SEED:
            raise invalid("sampling.seed", f"{sampling.seed} is above {LARGEST_SEED}: llama.cpp "
                                            "seeds are 32-bit")
        selection = response.output_candidates.WhichOneof("selection")
        if response.return_output_logprobs and selection not in (None, "top_n"):
            raise invalid(f"response.output_candidates.{selection}",
                          "this engine returns the top N candidates only (top_n)")
        return sched.SequenceRequest(
            request_id=request.request_id,
            prompt=prompt,
            max_tokens=max_tokens,
            sampling=sched.Sampling(
                **{name: getattr(sampling, name) for name in _SAMPLING_FIELDS if sampling.HasField(name)}),
            stopping=stopping,
            detokenize=not message.skip_detokenize,
            logprobs=response.output_candidates.top_n if response.return_output_logprobs else None)

    # -- events from the scheduler's thread ---------------------------------------------------------

    def _from_scheduler(self, events: list[sched.Event]) -> None:
        """From the scheduler's thread: queue the events for the event loop, waking it only when
        it has no delivery pending (a loop that lags behind takes several steps at once)."""
        with self._inbox_lock:
            wake = not self._inbox
            self._inbox += events
        if wake and not self._loop.is_closed():   # after the loop ends no stream is left to tell
            self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._inbox_lock:
            events, self._inbox = self._inbox, []
        started = False
        for event in events:
            if isinstance(event, sched.Started):
                started = True
                continue
            stream = self._streams.get(event.request_id)
            if stream is None:
                continue
            stream.put(event)
            if stream.finished:
                del self._streams[event.request_id]
        if started and self._engine is not None:
            self._engine.load_changed()


class _Stream:
    """The events of one request, from the scheduler to its `generate` iterator. Events that
    arrive while the client is still reading earlier ones are sent together, as one chunk."""

    def __init__(self):
        self.events: list[sched.Event] = []
        self.ready = asyncio.Event()
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()

    @property
    def finished(self) -> bool:
        return self.done.done()

    def put(self, event: sched.Event) -> None:
        self.events.append(event)
        self.ready.set()
        if isinstance(event, (sched.Finished, sched.Errored)):
            self.done.set_result(event)

    async def wait(self) -> list[sched.Event]:
        await self.ready.wait()
        self.ready.clear()
        events, self.events = self.events, []
        return events

    def take(self, events: list[sched.Event]):
        """One output for everything that arrived: a chunk, or the request's last message."""
        tokens: list[int] = []
        text: list[str] = []
        logprobs: list[TokenInfo] = []
        for event in events:
            if isinstance(event, (sched.Emitted, sched.Finished)):
                tokens += event.token_ids
                text.append(event.text)
                logprobs += event.logprobs
            if isinstance(event, sched.Errored):
                return Failure(ErrorCode.INTERNAL, f"llama.cpp failed: {event.message}", retryable=True)
            if isinstance(event, sched.Finished):
                # A request the scheduler dropped (Abort, or the engine closing) ends CANCELLED
                # with the tokens it had made, as upstream's cancellation does.
                return Final(event.reason, prompt_tokens=event.prompt_tokens,
                             completion_tokens=event.completion_tokens, token_ids=tuple(tokens),
                             text="".join(text), stop_match=event.stop, logprobs=tuple(logprobs))
        if not tokens:
            return None
        return Chunk(tuple(tokens), text="".join(text), logprobs=tuple(logprobs))
