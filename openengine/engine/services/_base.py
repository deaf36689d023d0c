"""What every service of the backend shares: the Base class, and `invalid` for its refusals."""

from __future__ import annotations

from typing import Any

from openengine.serve import Refusal, RefusalCode
from openengine.serve.backend import invalid


class Base:
    """A service object of the reference backend (`ServiceProvider`): `backend` is that backend, which
    reads the advertised limits through the SDK's engine handle."""

    def __init__(self, backend: Any):
        self.backend = backend

    def model(self, name: str, field: str = "model") -> str:
        """The served model a request names (empty: the default model), else NOT_FOUND."""
        return self.backend.engine.served_model(name, field)

    def model_lists(self, model: str, profile: str, field: str = "model") -> None:
        """REQ-CAP-013 / REQ-TASKS-001: a model-scoped RPC for a model that does not list the profile."""
        if not self.backend.lists(model, profile):
            raise invalid(field, f"model {model!r} does not list {profile} (see its ModelInfo.capabilities.profiles)")

    def admit(self, request, model: str) -> None:
        """Refuse `request` for what the SDK's shared preflight finds against what the engine
        advertises (REQ-CAP-009, REQ-SVC-003); what only the engine knows the service checks."""
        self.backend.engine.preflight(request, model)

    def serving_work(self, service: str) -> None:
        if not self.backend.accepting:
            raise Refusal(RefusalCode.UNAVAILABLE,
                          f"{service} is not serving ({self.backend.run.name}); retry later or elsewhere")
