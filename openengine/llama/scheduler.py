"""Continuous batching on llama.cpp's low-level API.

One thread owns the llama.cpp context and runs steps. Each step builds one `llama_batch` from every
running sequence, one sequence id per request: the last sampled token of each sequence that is
decoding, and chunks of the prompts still being read, up to `max_batch_tokens` in all. After
`llama_decode` it samples each sequence with that request's own sampler chain, applies the
request's stop conditions, and hands the step's events to `emit` in one call. A sequence that
ends, or is cancelled, is removed from the KV cache (`llama_memory_seq_rm`) before the next step,
and a queued request takes its sequence id in that same step.

Requests wait in a queue when all `max_running_requests` sequence ids are taken (the SDK's
admission bounds it by the advertised `max_queued_requests`). The
numbers `load()` reports are the scheduler's own: running and queued requests, their tokens, and
KV cells used and allocated (llama.cpp keeps one cell per token).
"""

from __future__ import annotations

import codecs
import heapq
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

import llama_cpp
import numpy as np

from openengine.llama.native import LlamaModel
from openengine.serve import FinishReason, Load, SequenceStops, StopMatch, TokenInfo
from openengine.v1 import generation_pb2

logger = logging.getLogger(__name__)

# llama.cpp draws a random seed when given this one.
RANDOM_SEED = 0xFFFFFFFF


@dataclass(frozen=True)
class Sampling:
    """How one request's tokens are chosen. The chain is llama.cpp's: penalties, logit bias,
    top-k, top-p, min-p, temperature, then a seeded draw (greedy at temperature 0). Neutral values
    (top_k 0, top_p 1, min_p 0, penalties 1/0/0) leave the candidates as they are."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SequenceRequest:
    """One admitted request, already tokenized and checked against the context."""

    request_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    sampling: Sampling = Sampling()
    # upstream's stop conditions, applied by the SDK's `SequenceStops`
    stopping: generation_pb2.StoppingOptions = field(default_factory=generation_pb2.StoppingOptions)
    detokenize: bool = True
    logprobs: int | None = None   # top candidates per position; None: no log-probabilities


@dataclass(frozen=True)
class Started:
    """A queued request got a sequence id and runs from the next step on."""

    request_id: str


@dataclass(frozen=True)
class Emitted:
    """New tokens of one request and the text they complete."""

    request_id: str
    token_ids: tuple[int, ...]
    text: str = ""
    logprobs: tuple[TokenInfo, ...] = ()


@dataclass(frozen=True)
class Finished:
    """The end of one request: its last tokens and text, why it ended and its token counts."""

    request_id: str
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    token_ids: tuple[int, ...] = ()
    text: str = ""
    stop: StopMatch | None = None     # what ended a STOP; None for another reason
    logprobs: tuple[TokenInfo, ...] = ()


@dataclass(frozen=True)
class Errored:
    """llama.cpp failed on a step this request was in; the request has been removed."""

    request_id: str
    message: str


Event = Union[Started, Emitted, Finished, Errored]


@dataclass(frozen=True)
class SchedulerConfig:
    max_running_requests: int = 8
    max_batch_tokens: int = 512
    context_tokens: int = 512     # KV cells of each sequence: prompt plus output
    threads: int = 2


class SchedulerClosed(Exception):
    """The scheduler was closed; it takes no more requests."""


class _Sequence:
    """A running request: its sequence id, sampler chain, position and output so far."""

    def __init__(self, request: SequenceRequest, seq_id: int, chain):
        self.request = request
        self.seq_id = seq_id
        self.chain = chain
        self.prompt_read = 0          # prompt tokens already in the KV cache
        self.position = 0             # next position to write
        self.last_token: int | None = None
        self.generated: list[int] = []
        self.unsent: list[int] = []
        self.unsent_logprobs: list[TokenInfo] = []
        # A token may end inside a UTF-8 character; invalid bytes become U+FFFD.
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stops = SequenceStops(request.stopping)

    @property
    def decoding(self) -> bool:
        return self.prompt_read == len(self.request.prompt)


def _sampler_chain(sampling: Sampling, vocab_size: int, context_tokens: int):
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = lambda sampler: llama_cpp.llama_sampler_chain_add(chain, sampler)   # noqa: E731
    if (sampling.repetition_penalty, sampling.frequency_penalty, sampling.presence_penalty) != (1.0, 0.0, 0.0):
        add(llama_cpp.llama_sampler_init_penalties(
            vocab_size, context_tokens, sampling.repetition_penalty, sampling.frequency_penalty,
            sampling.presence_penalty))
    if sampling.logit_bias:
        biases = (llama_cpp.llama_logit_bias * len(sampling.logit_bias))(
            *(llama_cpp.llama_logit_bias(token, bias) for token, bias in sampling.logit_bias.items()))
        add(llama_cpp.llama_sampler_init_logit_bias(vocab_size, len(sampling.logit_bias), biases))
    if sampling.temperature == 0.0:
        add(llama_cpp.llama_sampler_init_greedy())
        return chain
    add(llama_cpp.llama_sampler_init_top_k(sampling.top_k))
    add(llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
    add(llama_cpp.llama_sampler_init_min_p(sampling.min_p, 1))
    add(llama_cpp.llama_sampler_init_temp(sampling.temperature))
    add(llama_cpp.llama_sampler_init_dist(RANDOM_SEED if sampling.seed is None else sampling.seed))
    return chain


def _logprobs(logits: np.ndarray, token: int, top: int) -> TokenInfo:
    """The log-probability of a generated token under the model (before sampling changes it), its
    rank among all candidates (1 for the most likely) and the `top` candidates; the SDK fills in
    the tokens' text."""
    shifted = logits - logits.max()
    logprobs = shifted - np.log(np.exp(shifted).sum())
    rank = int((logprobs > logprobs[token]).sum()) + 1
    best = np.argsort(-logprobs, kind="stable")[:top] if top else ()
    return TokenInfo(token_id=token, logprob=float(logprobs[token]), rank=rank,
                     candidates=[generation_pb2.LogProb(token_id=int(t), logprob=float(logprobs[t]), rank=i)
                                 for i, t in enumerate(best, start=1)])


class Scheduler:
    """Runs requests on one llama.cpp context with continuous batching. `emit` receives each
    step's events in one call, from the scheduler's thread; it must not block."""

    def __init__(self, model: LlamaModel, config: SchedulerConfig,
                 emit: Callable[[list[Event]], None]):
        if config.max_batch_tokens < config.max_running_requests:
            raise ValueError(f"max_batch_tokens ({config.max_batch_tokens}) must be at least "
                             f"max_running_requests ({config.max_running_requests}): every "
                             "running request decodes one token in each step")
        self.model = model
        self.config = config
        self._emit = emit
        self._open_context()
        self._cells_total = int(llama_cpp.llama_n_ctx(self._context))
        self._vocab_size = model.facts.vocab_size
        self._lock = threading.Condition()
        self._waiting: deque[SequenceRequest] = deque()
        self._running: dict[str, _Sequence] = {}
        # A heap: a new request takes the lowest free sequence id. With the decoding sequences
        # batched in id order, llama.cpp decodes a batch about 1.7x faster than with the ids a
        # last-in-first-out list leaves behind (descending, with gaps), measured at 8 sequences.
        self._free_ids = list(range(config.max_running_requests))
        self._cancelled: set[str] = set()
        self._paused = False
        self._asleep = False
        self._closing = False
        self._last_sizes = (0, 0)
        self._thread = threading.Thread(target=self._run, name="llama-scheduler", daemon=True)
        self._thread.start()

    # -- called from any thread -------------------------------------------------------------------

    def submit(self, request: SequenceRequest) -> None:
        """Queue a request; it starts as soon as a sequence id is free (often in the next step)."""
        with self._lock:
            if self._closing:
                raise SchedulerClosed("the scheduler is closed")
            self._waiting.append(request)
            self._lock.notify()

    def cancel(self, request_id: str) -> bool:
        """Stop a request, queued or running: before the next step the scheduler's thread takes
        it out of the queue or the KV cache and emits its `Finished` (ABORTED). False when the
        scheduler does not hold the request."""
        with self._lock:
            held = request_id in self._running or any(
                queued.request_id == request_id for queued in self._waiting)
            if held:
                self._cancelled.add(request_id)
                self._lock.notify()
            return held

    def pause(self) -> None:
        """Stop stepping after the current step; running requests keep their KV cells."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False
            self._lock.notify()

    def sleep(self) -> int:
        """Free the KV cache (the llama.cpp context) while nothing runs or waits; returns the
        bytes released. Requests submitted meanwhile wait for `wake`."""
        with self._lock:
            if self._running or self._waiting:
                raise RuntimeError("requests are running or queued; the KV cache is in use")
            if self._asleep:
                return 0
            self._asleep = True
            self._close_context()
        return self._cells_total * self.model.kv_bytes_per_cell()

    def wake(self) -> None:
        """Make the KV cache again after `sleep` and go on."""
        with self._lock:
            if not self._asleep:
                return
            self._open_context()
            self._asleep = False
            self._lock.notify()

    def load(self) -> Load:
        """The scheduler's numbers as the SDK's `Load`: a KV block is one llama.cpp cell (a token);
        the batch sizes are the latest step's requests reading prompt tokens and decoding."""
        with self._lock:
            running = list(self._running.values())
            return Load(running_requests=len(running), queued_requests=len(self._waiting),
                        running_tokens=sum(len(s.request.prompt) + len(s.generated) for s in running),
                        waiting_tokens=sum(len(r.prompt) for r in self._waiting),
                        used_kv_blocks=sum(s.position for s in running), total_kv_blocks=self._cells_total,
                        prefill_batch_size=self._last_sizes[0], decode_batch_size=self._last_sizes[1])

    def close(self) -> None:
        """Abort what runs and waits, stop the thread and free the context."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join()
        if not self._asleep:
            self._close_context()

    def _open_context(self) -> None:
        config = self.config
        self._context = self.model.new_context(
            sequences=config.max_running_requests, context_per_sequence=config.context_tokens,
            batch_tokens=config.max_batch_tokens, threads=config.threads)
        self._memory = llama_cpp.llama_get_memory(self._context)
        self._batch = llama_cpp.llama_batch_init(config.max_batch_tokens, 0, 1)

    def _close_context(self) -> None:
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._context)
        self._context = self._memory = self._batch = None

    # -- the scheduler's thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while True:
                    events = self._settle()
                    if events or self._closing or (self._running and not self._paused and not self._asleep):
                        break
                    self._lock.wait()
                closing = self._closing
                if closing:
                    # Cancel every queued and running request.
                    self._cancelled.update(request.request_id for request in self._waiting)
                    self._cancelled.update(self._running)
                    events += self._settle()
            if events:
                self._emit(events)
            if closing:
                return
            if self._running and not self._paused and not self._asleep:
                try:
                    self._step()
                except Exception as err:   # a failed step fails its requests, not the scheduler
                    logger.exception("a llama.cpp step failed")
                    self._fail(list(self._running.values()), f"the step failed ({type(err).__name__}: {err})")

    def _settle(self) -> list[Event]:
        """Under the lock: drop cancelled requests, then give free ids to queued requests."""
        events: list[Event] = []
        if self._cancelled:
            for queued in [r for r in self._waiting if r.request_id in self._cancelled]:
                self._waiting.remove(queued)
                events.append(Finished(queued.request_id, FinishReason.CANCELLED, len(queued.prompt), 0))
            for request_id in [held for held in self._running if held in self._cancelled]:
                sequence = self._running.pop(request_id)
                self._free(sequence)
                events.append(Finished(request_id, FinishReason.CANCELLED,
                                       len(sequence.request.prompt), len(sequence.generated)))
            self._cancelled.clear()
        while self._waiting and self._free_ids and not self._paused and not self._asleep:
            request = self._waiting.popleft()
            seq_id = heapq.heappop(self._free_ids)
            chain = _sampler_chain(request.sampling, self._vocab_size, self.config.context_tokens)
            self._running[request.request_id] = _Sequence(request, seq_id, chain)
            events.append(Started(request.request_id))
        return events

    def _free(self, sequence: _Sequence) -> None:
        llama_cpp.llama_memory_seq_rm(self._memory, sequence.seq_id, -1, -1)
        llama_cpp.llama_sampler_free(sequence.chain)
        heapq.heappush(self._free_ids, sequence.seq_id)

    def _step(self) -> None:
        with self._lock:
            sequences = list(self._running.values())
        batch = self._batch
        outputs: list[tuple[_Sequence, int]] = []
        count = 0

        def put(sequence: _Sequence, token: int, logits: bool) -> None:
            nonlocal count
            batch.token[count] = token
            batch.pos[count] = sequence.position
            batch.n_seq_id[count] = 1
            batch.seq_id[count][0] = sequence.seq_id
            batch.logits[count] = logits
            if logits:
                outputs.append((sequence, count))
            sequence.position += 1
            count += 1

        decoding = sorted((s for s in sequences if s.decoding), key=lambda s: s.seq_id)
        for sequence in decoding:
            put(sequence, sequence.last_token, True)
        budget = self.config.max_batch_tokens - count
        prefilling = 0
        for sequence in sequences:
            if sequence.decoding or budget <= 0:
                continue
            prompt = sequence.request.prompt
            end = min(len(prompt), sequence.prompt_read + budget)
            for at in range(sequence.prompt_read, end):
                put(sequence, prompt[at], at == len(prompt) - 1)
            budget -= end - sequence.prompt_read
            sequence.prompt_read = end
            prefilling += 1
        batch.n_tokens = count
        self._last_sizes = (prefilling, len(decoding))

        status = llama_cpp.llama_decode(self._context, batch)
        if status != 0:
            self._fail(sequences, f"llama_decode failed with status {status}")
            return
        events: list[Event] = []
        ended: list[_Sequence] = []
        for sequence, index in outputs:
            token = llama_cpp.llama_sampler_sample(sequence.chain, self._context, index)
            event = self._advance(sequence, token, index)
            if event is not None:
                events.append(event)
                if isinstance(event, Finished):
                    ended.append(sequence)
        with self._lock:
            for sequence in ended:
                del self._running[sequence.request.request_id]
                self._cancelled.discard(sequence.request.request_id)
                self._free(sequence)
        if events:
            self._emit(events)

    def _advance(self, sequence: _Sequence, token: int, index: int) -> Event | None:
        """Take one sampled token: record it, and end the sequence when a stop condition holds."""
        request = sequence.request
        sequence.last_token = token
        sequence.generated.append(token)
        sequence.unsent.append(token)
        if request.logprobs is not None:
            pointer = llama_cpp.llama_get_logits_ith(self._context, index)
            logits = np.ctypeslib.as_array(pointer, shape=(self._vocab_size,))
            sequence.unsent_logprobs.append(_logprobs(logits, token, request.logprobs))
        produced = len(sequence.generated)
        stops, stopping = sequence.stops, request.stopping
        may_stop = produced >= stopping.min_tokens
        if may_stop and not stopping.ignore_eos and token in self.model.end_of_generation:
            return self._finish(sequence, FinishReason.STOP, StopMatch(eos_token_id=token), stops.rest())
        text, match = stops.add(token, sequence.decoder.decode(self.model.piece(token)))
        if match is not None:
            return self._finish(sequence, FinishReason.STOP, match, text)
        if produced >= request.max_tokens:
            return self._finish(sequence, FinishReason.LENGTH, None,
                                text + stops.rest() + sequence.decoder.decode(b"", final=True))
        out = Emitted(request.request_id, tuple(sequence.unsent),
                      text if request.detokenize else "",
                      tuple(sequence.unsent_logprobs))
        sequence.unsent.clear()
        sequence.unsent_logprobs.clear()
        return out

    def _finish(self, sequence: _Sequence, reason: FinishReason, stop: StopMatch | None,
                last_text: str) -> Finished:
        request = sequence.request
        return Finished(request.request_id, reason, len(request.prompt), len(sequence.generated),
                        tuple(sequence.unsent), last_text if request.detokenize else "",
                        stop, tuple(sequence.unsent_logprobs))

    def _fail(self, sequences: list[_Sequence], message: str) -> None:
        logger.error("%s; failing %d requests", message, len(sequences))
        with self._lock:
            for sequence in sequences:
                if self._running.pop(sequence.request.request_id, None) is not None:
                    self._cancelled.discard(sequence.request.request_id)
                    self._free(sequence)
        self._emit([Errored(s.request.request_id, message) for s in sequences])
