"""What every service shares: refusals, error replies and the Base class."""

from __future__ import annotations

import logging

import grpc

from openengine.engine.refusal import Refused
from openengine.v1 import common_pb2, events_pb2, generation_pb2

log = logging.getLogger("openengine.engine")
ES = events_pb2
Code = grpc.StatusCode


def invalid(field: str, message: str) -> Refused:
    return Refused(Code.INVALID_ARGUMENT, f"{field}: {message}")


def refuse_bad_numbers(rt, request, *, vocab_size: int = 0) -> None:
    """REQ-SVC-005 through the shared admission check: a NaN or infinite number, a number outside
    its field's domain, or a token id outside the vocabulary is refused with INVALID_ARGUMENT."""
    from openengine.validate import number_violations

    refuse_violations(rt, number_violations(request, vocab_size=vocab_size))


def refuse_violations(rt, violations) -> None:
    """Refuse a request with INVALID_ARGUMENT naming every error among `violations` (from
    `openengine.validate`), each with its field, the limit or rule and the requirement."""
    from openengine.validate import Severity

    errors = [v for v in rt.hooks.at("admission.violations", list(violations)) if v.severity is Severity.ERROR]
    if errors:
        raise Refused(Code.INVALID_ARGUMENT, "; ".join(
            f"{v.message} (expected {v.expected}; {v.requirement})" for v in errors))


def _error(code, message, *, retryable=False, **details) -> generation_pb2.GenerateResponse:
    return generation_pb2.GenerateResponse(error=common_pb2.EngineError(
        code=code, message=message, retryable=retryable, details={k: str(v) for k, v in details.items()}))


class Base:
    def __init__(self, rt):
        self.rt = rt

    def model(self, name: str, field: str = "model") -> str:
        """The served model a request names (empty: the default model), else NOT_FOUND."""
        if not name:
            return self.rt.model_name
        if name not in self.rt.models:
            raise Refused(Code.NOT_FOUND, f"{field}: no served model {name!r}; served: {', '.join(self.rt.models)}")
        return name

    def model_config(self, name: str):
        return self.rt.models[self.model(name)].config

    def model_lists(self, model: str, profile: str, field: str = "model") -> None:
        """REQ-CAP-013 / REQ-TASKS-001: a model-scoped RPC for a model that does not list the profile."""
        if not self.rt.lists(model, profile):
            raise invalid(field, f"model {model!r} does not list {profile} (see its ModelInfo.capabilities.profiles)")

    def admit(self, request, model: str) -> None:
        """Refuse `request` for every reason `openengine.validate.preflight` finds against what
        this engine advertises (limits, profiles, model-scoped profiles, numbers), as a client's
        own preflight would (REQ-CAP-009, REQ-SVC-003, REQ-SVC-005). `model` is the served model
        the request was routed to. What only the engine knows (its vocabulary, the room left in
        the context, which adapters and sessions exist) the services check themselves."""
        from openengine.validate import preflight

        rt = self.rt
        if rt.admission is None or rt.admission[0] != rt.revision:
            from openengine.engine.messages import advertised_report

            rt.admission = (rt.revision, advertised_report(rt))
        if getattr(request, "model", None) == "" and len(rt.models) > 1:
            routed = type(request)()
            routed.CopyFrom(request)
            routed.model = model
            request = routed
        refuse_violations(rt, preflight(request, rt.admission[1]))

    def serving_work(self, service: str) -> None:
        if not self.rt.accepting():
            state = ES.EngineState.Name(self.rt.state)
            raise Refused(Code.UNAVAILABLE, f"{service} is not serving ({state}); retry later or elsewhere")
