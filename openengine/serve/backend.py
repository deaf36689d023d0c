"""The interface between the protocol and an engine: what a backend declares and implements.

The SDK (`openengine.serve`) owns everything the OpenEngine protocol defines: Control's core RPCs
(server and model info, GetLoad, Health, Abort), discovery, standard health, WatchLoad, the
capability revision, admission against the advertised limits, the `openengine-*` metadata,
cancellation, the admin guard, the wire policy, reflection and graceful shutdown. A backend
supplies only what is the engine's own:

- `describe()`: its identity, its models and their limits, and the limits it serves each profile
  with (`EngineDescription`). A limit it does not state takes the contract's default, except
  that every feature the backend would have to implement itself is off (no log-probabilities,
  one output per request, no guided decoding, no min_p, no priority): it states what it does;
- `generate(request)`: an async iterator of at most one `Prompt`, `Chunk`s and, per output, a
  `Final`, or one `Failure` (`GenerateOutput`); the SDK turns them into upstream's
  GenerateResponse events;
- `abort(request_id, reason)`: stop one request it is running;
- `load()`: its figures now (`Load`); it calls `EngineHandle.load_changed()` when they change.

The backend applies the request's stop conditions (`stopping`: max_tokens, min_tokens, stop
texts, stop token ids, ignore_eos, include_stop_in_output; `SequenceStops` holds the rules) and
samples as `sampling` says. The SDK handles `skip_detokenize` (it sends no text) and fills each
token's text from `Tokenizer.token_text`.

Optional profiles are optional parts: a backend that implements `AdminOperations` can be served
with `openengine.admin`; one that returns an object for a service from `services()` serves the
RPCs of that service it implements (`openengine.v1.Tasks`, or Control's LoRA and KV-event RPCs
beside the SDK's core ones). Which profiles a backend can serve is derived from the compiled
contract's RPCs and what the backend implements, never from a list; asking for one it cannot
serve is refused at start, naming what is missing.

Everything here is plain typed data plus `Protocol`s; nothing imports gRPC.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Mapping, Protocol, Union, runtime_checkable

from openengine.v1 import error_pb2, generation_pb2, kv_pb2

# -- what a backend declares ------------------------------------------------------------------------


@dataclass(frozen=True)
class Tokenizer:
    """The model's tokenizer as ModelInfo reports it (tokenizer_modes, vocab_size, eos_token_id,
    supports_text_input). `token_text` gives one token id's text: the SDK fills `TokenInfo.token`
    and the candidates' `token` with it (unless the request sets `skip_detokenize`); without it
    they carry only what the backend set."""

    name: str
    vocab_size: int
    eos_token_id: int | None = None
    bos_token_id: int | None = None
    text_input: bool = True      # the engine tokenizes `prompt` text itself
    token_text: Callable[[int], str] | None = None


@dataclass(frozen=True)
class Model:
    """One served model. `profiles` names the model-scoped profiles it lists (REQ-CAP-012) and
    `limits` the model-scoped limits it sets itself (profile -> limit -> value); every other limit
    is the engine-wide value."""

    name: str
    max_context_tokens: int
    max_output_tokens: int
    tokenizer: Tokenizer
    profiles: tuple[str, ...] = ()
    limits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    multimodal: bool = False


@dataclass(frozen=True)
class EngineDescription:
    """What the backend is and serves. `limits` gives, per profile (full or short name), the
    values of that profile's typed limits the engine really has (`{"core": {"max_sequences": 4}}`);
    a limit left out takes the contract's default, except the core limits that switch on what
    the backend would have to implement (they are off: max_logprobs 0, output_logprobs and
    prompt_logprobs false, max_sequences 1, no guided decoding, min_p or priority). The SDK
    checks every value against the contract's type and range and refuses to start on one that
    does not fit."""

    engine_name: str
    engine_version: str
    models: tuple[Model, ...]
    limits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    role: str = "aggregated"            # aggregated, prefill, decode or encoder (ServerInfo.engine_role)
    data_parallel_size: int = 1
    tensor_parallel_size: int = 1


# -- one Generate call ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerateRequest:
    """An admitted Generate call, as the backend runs it.

    `message` is upstream's `GenerateRequest` as the client sent it, already admitted: every check
    `openengine.validate.preflight` makes against the engine's advertised capabilities has
    passed (limits, switches that are off, number domains, model-scoped profiles). `model` is the
    served model it is routed to (never empty), `request_id` its id (one is made when the client
    sent none) and `priority` the `openengine-priority` metadata value (0 when absent; higher is
    more urgent). What only the engine knows (its vocabulary, room left in the context,
    adapters and sessions it holds) the backend checks and refuses with `Refusal`."""

    request_id: str
    model: str
    message: generation_pb2.GenerateRequest
    priority: int = 0

    @property
    def sampling(self) -> generation_pb2.SamplingParams:
        return self.message.sampling

    @property
    def stopping(self) -> generation_pb2.StoppingOptions:
        return self.message.stopping

    @property
    def response(self) -> generation_pb2.ResponseOptions:
        return self.message.response

    @property
    def sequences(self) -> int:
        """How many outputs the request asks for (`sampling.num_sequences`, 1 when unset)."""
        s = self.message.sampling
        return s.num_sequences if s.HasField("num_sequences") else 1


class FinishReason(enum.IntEnum):
    """Why an output ended (generation.proto FinishReason)."""

    STOP = generation_pb2.FINISH_REASON_STOP
    LENGTH = generation_pb2.FINISH_REASON_LENGTH
    CANCELLED = generation_pb2.FINISH_REASON_CANCELLED


TokenInfo = generation_pb2.TokenInfo
StopMatch = generation_pb2.StopMatch


@dataclass(frozen=True)
class Prompt:
    """Information about the prompt's tokens (log-probabilities when the request asked for
    them), one `TokenInfo` per prompt token; yielded at most once, before any `Chunk`."""

    tokens: tuple[generation_pb2.TokenInfo, ...]


@dataclass(frozen=True)
class Chunk:
    """New tokens of one output (`index`, from 0 to `sequences - 1`) and the text they add (the
    SDK drops it for a request with `skip_detokenize`). `logprobs`, when the request asked for
    output log-probabilities, holds one `TokenInfo` per token of `token_ids` (its logprob, rank
    and candidates); the SDK fills in each token's id and text."""

    token_ids: tuple[int, ...]
    text: str = ""
    index: int = 0
    logprobs: tuple[generation_pb2.TokenInfo, ...] = ()


@dataclass(frozen=True)
class Final:
    """The end of one output: its last tokens (every token not sent in a `Chunk`, the
    end-of-sequence token included when it ended the output), why it ended and its token
    accounting: `completion_tokens` is the number of tokens sent for this output, in its Chunks
    and here (the SDK checks it), `cached_prompt_tokens` at most `prompt_tokens`. `stop_match`
    says what matched when the reason is STOP (`SequenceStops` gives it). A KV producer (prefill
    role) sets `kv_session` to the cache a decode engine continues from: the stream then ends
    with PrefillReady instead of GenerationFinished."""

    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    token_ids: tuple[int, ...] = ()
    text: str = ""
    index: int = 0
    cached_prompt_tokens: int = 0
    stop_match: generation_pb2.StopMatch | None = None
    logprobs: tuple[generation_pb2.TokenInfo, ...] = ()
    kv_session: kv_pb2.KvSessionRef | None = None


class ErrorCode(enum.IntEnum):
    """What went wrong after acceptance (upstream error.proto ErrorCode)."""

    INVALID_ARGUMENT = error_pb2.ERROR_CODE_INVALID_ARGUMENT
    UNSUPPORTED_FEATURE = error_pb2.ERROR_CODE_UNSUPPORTED_FEATURE
    ROLE_MISMATCH = error_pb2.ERROR_CODE_ROLE_MISMATCH
    MODEL_NOT_FOUND = error_pb2.ERROR_CODE_MODEL_NOT_FOUND
    OVERLOADED = error_pb2.ERROR_CODE_OVERLOADED
    REQUEST_NOT_FOUND = error_pb2.ERROR_CODE_REQUEST_NOT_FOUND
    DUPLICATE_REQUEST = error_pb2.ERROR_CODE_DUPLICATE_REQUEST
    KV_SESSION_NOT_FOUND = error_pb2.ERROR_CODE_KV_SESSION_NOT_FOUND
    KV_TRANSFER_FAILED = error_pb2.ERROR_CODE_KV_TRANSFER_FAILED
    CANCELLED = error_pb2.ERROR_CODE_CANCELLED
    DRAINING = error_pb2.ERROR_CODE_DRAINING
    INTERNAL = error_pb2.ERROR_CODE_INTERNAL


@dataclass(frozen=True)
class Failure:
    """The request failed after it was accepted: the stream's terminal error, nothing follows."""

    code: ErrorCode
    message: str
    retryable: bool = False


GenerateOutput = Union[Prompt, Chunk, Final, Failure]


class RefusalCode(enum.Enum):
    """The status a call refused before acceptance (or a stream the engine ends) gets: gRPC
    status names."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    UNAVAILABLE = "UNAVAILABLE"
    ABORTED = "ABORTED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    # A feature the engine does not have, asked for by one request although the capabilities
    # cannot say so (a request field no limit covers).
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"


class Refusal(Exception):
    """Raised by a backend before its first output to refuse a request: the call ends with
    `code` and `message` as its gRPC status. The message names the field and why, and how to
    fix it (`stopping.max_tokens: 9000 exceeds the context (4096)`). A `retryable` refusal (the
    engine is full or not taking work now) also carries an `EngineError` with `retryable` set in
    the status details (its `error` code, OVERLOADED unless given), so a scheduler knows to send
    the request again, here later or elsewhere."""

    def __init__(self, code: RefusalCode, message: str, *, retryable: bool = False,
                 error: ErrorCode = ErrorCode.OVERLOADED):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.error = error


def invalid(field: str, message: str) -> Refusal:
    """The INVALID_ARGUMENT refusal of a request field: `field: message`."""
    return Refusal(RefusalCode.INVALID_ARGUMENT, f"{field}: {message}")


class AbortReason(enum.Enum):
    """Why the SDK asks a backend to stop a request."""

    ABORT_RPC = "abort"                # Control/Abort named it
    CLIENT_CANCELLED = "cancelled"     # the client went away (REQ-CORE-011)
    STALLED_CONSUMER = "stalled"       # the client stopped reading for longer than the stall limit
    PAUSED = "paused"                  # Admin PauseGeneration with mode abort (or wait, past its timeout)
    DRAIN_DEADLINE = "drain"           # Admin Drain's deadline passed with the request still running
    SHUTDOWN = "shutdown"              # the engine is stopping


# -- load -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankLoad:
    """One data-parallel rank's share of the load (upstream RankLoadInfo)."""

    rank: int
    running_requests: int = 0
    queued_requests: int = 0
    used_kv_blocks: int = 0
    total_kv_blocks: int = 0
    prefill_batch_size: int = 0
    decode_batch_size: int = 0


@dataclass(frozen=True)
class Load:
    """The engine's numbers now (upstream LoadInfo). Every figure is a count, never negative, and
    `running_requests` never exceeds the advertised `max_running_requests`: the SDK checks each
    and answers INTERNAL, naming the figure, when one is wrong. With `ranks`, the totals of
    requests and KV blocks are the SDK's sums over them (the ones given here are ignored); the
    token figures and batch sizes are the ones given here.
    `attributes` are engine-specific values (strings, numbers, booleans)."""

    running_requests: int = 0
    queued_requests: int = 0
    used_kv_blocks: int = 0
    total_kv_blocks: int = 0
    running_tokens: int = 0
    waiting_tokens: int = 0
    prefill_batch_size: int = 0
    decode_batch_size: int = 0
    active_kv_sessions: int = 0
    ranks: tuple[RankLoad, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)


# -- what the SDK gives a backend -------------------------------------------------------------------


class EngineHandle(Protocol):
    """What a running server offers its backend (passed to `Backend.attach`)."""

    def load_changed(self) -> None:
        """The backend's load changed (a request queued, started or ended outside a Generate
        call's own start and end, which the SDK signals itself): change-driven WatchLoad streams
        get a snapshot. Cheap and never blocking; call it from the event loop's thread."""

    @property
    def instance_id(self) -> str:
        """The instance id the engine reports (ServerInfo, LoadInfo)."""

    @property
    def address(self) -> str:
        """host:port the engine serves on (a KV producer's KvSessionRef endpoint)."""

    @property
    def accepting(self) -> bool:
        """Whether the engine takes new work now (SERVING); work services refuse UNAVAILABLE otherwise."""

    def has(self, profile: str) -> bool:
        """Whether the engine advertises `profile` (full name)."""

    def limit(self, profile: str, name: str) -> Any:
        """The advertised engine-wide value of a limit of an advertised profile."""

    def model_limit_values(self, model: str, profile: str) -> dict[str, Any]:
        """A model-scoped profile's limits as `model` sees them: its own values over the engine's."""

    def served_model(self, name: str, field: str = "model") -> str:
        """The served model a request names (empty: the default model); `Refusal` (NOT_FOUND) naming
        `field` for a model the engine does not serve."""

    def lists(self, model: str, profile: str) -> bool:
        """Whether served `model` lists the advertised model-scoped `profile` (REQ-CAP-012)."""

    def preflight(self, message: Any, model: str) -> None:
        """Raise `Refusal` (INVALID_ARGUMENT) for what `openengine.validate.preflight` finds wrong
        with a request a backend service admits itself (tasks, Encode) against what is advertised."""


# -- the backend ------------------------------------------------------------------------------------


@runtime_checkable
class Backend(Protocol):
    """The core every engine provides. All methods are called on the server's event loop."""

    def describe(self) -> EngineDescription:
        """Identity, models and limits; called once, at start."""

    def attach(self, engine: EngineHandle) -> None:
        """Called once before serving starts, with the handle to report load changes through."""

    def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateOutput]:
        """Run one admitted request: at most one `Prompt`, `Chunk`s, then one `Final` per output
        (`sampling.num_sequences`), or a `Failure`. Raise `Refusal` before the first output to
        refuse it. When the client goes away or the request is aborted the SDK calls `abort` and
        closes the iterator; an aborted request's open outputs end with the SDK's
        GenerationFinished(CANCELLED)."""

    async def abort(self, request_id: str, reason: AbortReason) -> None:
        """Stop a request `generate` is running and free what it holds, at once."""

    def load(self) -> Load:
        """The engine's numbers now (GetLoad, and every WatchLoad snapshot; keep it cheap)."""


@runtime_checkable
class AdminOperations(Protocol):
    """What `openengine.admin` needs from the engine. The SDK owns the run state (SERVING,
    PAUSED, DRAINING, SLEEPING), health, the guard and the refusals; these do the engine's part."""

    async def pause(self, mode: str) -> None:
        """Stop making progress: `abort` (the SDK aborts the requests), `wait` or `keep`."""

    async def resume(self) -> None:
        """Make progress again after `pause`."""

    async def sleep(self, level: int, tags: frozenset[str]) -> int:
        """Release memory (weights, KV cache...); returns the bytes released."""

    async def wake(self, tags: frozenset[str]) -> None:
        """Bring back what `sleep` released (everything when `tags` is empty)."""

    async def reset_prefix_cache(self) -> int | None:
        """Drop the prefix cache; the blocks freed, or None when it cannot now (requests run)."""

    def update_limits(self, limits: Mapping[str, Mapping[str, Any]]) -> None:
        """Run with these limits from now on (profile -> limit -> value, already checked)."""


@runtime_checkable
class StateListener(Protocol):
    """A backend that wants to know what the SDK changes: the run state (Admin, shutdown) and the
    capability revision (UpdateConfig). A backend serving `openengine.runtime-events` publishes
    these as its StateChanged and CapabilityRevisionChanged events; one that holds subscriptions
    ends them when the state becomes STOPPING. Called on the event loop, after the change."""

    def state_changed(self, previous: Any, current: Any, reason: str) -> None:
        """The run state changed (`openengine.serve.RunState`: phase, pause mode, sleep tags)."""

    def revision_changed(self, previous: int, revision: int, changed: tuple[str, ...]) -> None:
        """A new capability revision is advertised; `changed` names the limits that changed."""


@runtime_checkable
class ServiceProvider(Protocol):
    """A backend that serves the RPCs of an optional profile itself returns, per full service
    name (`openengine.v1.Tasks`), an object with one coroutine (unary) or async generator
    (server streaming) per RPC, named as the RPC, taking the request message and returning or
    yielding response messages, as a gRPC servicer does. The SDK still gates each call on the
    advertised profiles, guards Admin and applies the wire policy; `Refusal` ends a call with
    its status."""

    def services(self) -> Mapping[str, object]:
        """Full service name -> the object implementing its RPCs."""
