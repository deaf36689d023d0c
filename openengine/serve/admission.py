"""Admission: whether a Generate call is taken, and as which `GenerateRequest`.

Every check runs here, in order, before the backend sees the request: the engine takes work, there
is room, the OpenEngine metadata keys are well formed, the model is served, the prompt's tokens are in the
model's vocabulary, the shared preflight (`openengine.validate.preflight`) against what the engine itself
advertises finds nothing wrong, and the request id is not in flight.

Room is counted on the SDK's in-flight table, not on the backend's `load()`: every accepted call
is in it from admission to its stream's end, so the count is exact at the moment of the decision
and the same for every backend. With `max_queued_requests` above 0, a request that would make the
accepted requests more than `max_running_requests + max_queued_requests` is refused with a
retryable RESOURCE_EXHAUSTED (EngineError OVERLOADED) and counted (LoadInfo.rejected_requests).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from openengine.contract import CORE
from openengine.serve.backend import ErrorCode, GenerateRequest, Refusal, RefusalCode, invalid
from openengine.serve.runstate import DRAINING
from openengine.v1 import generation_pb2

PRIORITY_KEY = "openengine-priority"
DP_RANK_KEY = "openengine-target-dp-rank"
ROUTING_KEY = "openengine-routing-key"
_INT32 = (-2**31, 2**31 - 1)
_UINT32 = (0, 2**32 - 1)


def openengine_metadata(metadata) -> dict[str, str]:
    """The call's `openengine-*` metadata keys, INVALID_ARGUMENT for a key sent twice or a value
    that is not what the protocol defines."""
    found: dict[str, str] = {}
    for key, value in metadata or ():
        if not key.startswith("openengine-"):
            continue
        if key in found:
            raise invalid(key, "sent more than once; send each openengine- key at most once")
        found[key] = value if isinstance(value, str) else value.decode("ascii", "replace")
    for key, (low, high) in ((PRIORITY_KEY, _INT32), (DP_RANK_KEY, _UINT32)):
        if key in found:
            text = found[key]
            digits = text[1:] if text[:1] in "+-" else text
            if not digits.isdigit() or not digits.isascii() or not low <= int(text) <= high:
                raise invalid(key, f"{text!r} is not a base-10 integer between {low} and {high}")
    if ROUTING_KEY in found and not found[ROUTING_KEY]:
        raise invalid(ROUTING_KEY, "must not be empty")
    return found


@dataclass
class Admission:
    """Admits against the capability revision the state advertises now."""

    state: object

    def admit(self, message: generation_pb2.GenerateRequest, metadata=()) -> GenerateRequest:
        state = self.state
        if not state.accepting:
            draining = state.run.phase == DRAINING
            raise Refusal(RefusalCode.UNAVAILABLE, f"openengine.v1.Inference is not taking work now (the engine is "
                                                   f"{state.run.name}); retry later or on another engine",
                          retryable=True, error=ErrorCode.DRAINING if draining else ErrorCode.OVERLOADED)
        self.check_room()
        keys = openengine_metadata(metadata)
        model = state.served_model(message.model)
        if message.WhichOneof("input") is None:
            raise invalid("input", "set prompt or token_ids")
        if message.sampling.HasField("num_sequences") and message.sampling.num_sequences == 0:
            raise invalid("sampling.num_sequences", "must be at least 1 when set")
        tokenizer = state.models[model].tokenizer
        if message.WhichOneof("input") == "prompt" and not tokenizer.text_input:
            raise invalid("prompt", f"model {model!r} takes token_ids only (ModelInfo.supports_text_input is false)")
        if message.WhichOneof("input") == "token_ids":
            ids = message.token_ids.ids
            outside = next((t for t in ids if t >= tokenizer.vocab_size), None)
            if outside is not None:
                raise invalid("token_ids", f"token id {outside} is outside the vocabulary of model {model!r} "
                                           f"({tokenizer.vocab_size} tokens)")
        session = message.kv.session if message.kv.HasField("session") else None
        if DP_RANK_KEY in keys and session is not None and int(keys[DP_RANK_KEY]) != session.dp_rank:
            raise invalid(DP_RANK_KEY, f"{keys[DP_RANK_KEY]} differs from kv.session.dp_rank "
                                       f"{message.kv.session.dp_rank}, which decides KV affinity")
        state.preflight(message, model)
        request_id = message.request_id or f"req-{uuid.uuid4().hex[:16]}"
        if request_id in state.in_flight:
            raise Refusal(RefusalCode.ALREADY_EXISTS, f"request_id: {request_id!r} is already in flight")
        # The priority key counts only where priority is advertised (upstream: used only then).
        priority = int(keys.get(PRIORITY_KEY, 0)) if state.limit(CORE, "priority") else 0
        return GenerateRequest(request_id=request_id, model=model, message=message, priority=priority)

    def check_room(self) -> None:
        """Refuse, retryable, when the running requests and the queue are full; count the refusal.
        Checked before the request is read any further: under overload the refusal is the engine's
        cheapest answer."""
        state = self.state
        queued = state.limit(CORE, "max_queued_requests")
        if not queued:
            return   # 0: the engine does not bound its queue
        running = state.limit(CORE, "max_running_requests")
        if len(state.in_flight) >= running + queued:
            state.rejected_requests += 1
            raise Refusal(RefusalCode.RESOURCE_EXHAUSTED,
                          f"the engine is full: {len(state.in_flight)} requests accepted, max_running_requests "
                          f"{running} + max_queued_requests {queued}; retry later or on another engine",
                          retryable=True, error=ErrorCode.OVERLOADED)
