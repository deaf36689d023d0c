"""Admission: whether a Generate call is taken, and as which `GenerateRequest`.

Every check runs here, in order, before the backend sees the request: the engine takes work, the
model is served, the shared preflight (`openengine.validate.preflight`) against what the engine
itself advertises finds nothing wrong, token ids fit the model's vocabulary, and the request id
is not in flight. Right after the first check comes room: with `max_queued_requests` above 0, a
request that would make the accepted requests more than `max_running_requests +
max_queued_requests` is refused with a retryable RESOURCE_EXHAUSTED and counted
(LoadInfo.rejected_requests, REQ-CORE-014).

Room is counted on the SDK's in-flight table, not on the backend's `load()`: every accepted call
is in it from admission to its stream's end, so the count is exact at the moment of the decision
and the same for every backend, whereas a backend's own running and queued numbers may lag behind
(a request the backend has not picked up yet) or call a request that is about to take a free slot
neither.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from openengine.contract import CORE
from openengine.serve.backend import GenerateRequest, Refusal, RefusalCode, Tokenizer, invalid
from openengine.serve.state import refuse_errors
from openengine.v1 import generation_pb2
from openengine.validate import Violation, number_violations, preflight


@dataclass
class Admission:
    """Admits against the capability revision the state advertises now."""

    state: object

    def violations(self, routed: generation_pb2.GenerateRequest, tokenizer: Tokenizer) -> list[Violation]:
        """What the shared preflight finds wrong with a request routed to its model, against
        what the engine advertises, and its numbers' domains (REQ-CAP-009, REQ-SVC-005)."""
        return preflight(routed, self.state.advertised_report()) + \
            number_violations(routed, vocab_size=tokenizer.vocab_size)

    def admit(self, message: generation_pb2.GenerateRequest) -> GenerateRequest:
        state = self.state
        if not state.accepting:
            raise Refusal(RefusalCode.UNAVAILABLE, "openengine.v1.Inference is not taking work now; "
                                                   "retry later or on another engine", retryable=True)
        self.check_room()
        model = state.served_model(message.model)
        if message.WhichOneof("prompt") is None:
            raise invalid("prompt", "set text or token_ids")
        routed = message
        if not message.model and len(state.models) > 1:
            routed = generation_pb2.GenerateRequest()
            routed.CopyFrom(message)
            routed.model = model
        tokenizer = state.models[model].tokenizer
        if message.WhichOneof("prompt") == "text" and not tokenizer.text_input:
            raise invalid("text", f"model {model!r} takes token_ids only (ModelInfo.tokenizer.text_input is false)")
        if message.WhichOneof("prompt") == "token_ids":
            outside = next((t for t in message.token_ids.ids if t >= tokenizer.vocab_size), None)
            if outside is not None:
                raise invalid("token_ids", f"token id {outside} is outside the vocabulary of model {model!r} "
                                           f"({tokenizer.vocab_size} tokens)")
        refuse_errors(self.violations(routed, tokenizer))
        request_id = message.request_id or f"req-{uuid.uuid4().hex[:16]}"
        if request_id in state.in_flight:
            raise Refusal(RefusalCode.ALREADY_EXISTS, f"request_id: {request_id!r} is already in flight")
        return GenerateRequest(request_id=request_id, model=model, message=message)

    def check_room(self) -> None:
        """Refuse, retryable, when the running requests and the queue are full; count the refusal.
        Checked before the request is read any further: under overload the refusal is the engine's
        cheapest answer. The count reaches watchers with the next snapshot, not a change-driven one
        of its own, so a flood of refused calls does not become a flood of snapshots."""
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
                          retryable=True)
