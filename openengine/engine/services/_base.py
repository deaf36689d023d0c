"""What every service of the backend shares."""

from __future__ import annotations

from typing import Any

from openengine.serve import Refusal, RefusalCode


class Base:
    """A service object of the reference backend (`ServiceProvider`): `backend` is that backend, which
    reads the advertised limits through the SDK's engine handle."""

    def __init__(self, backend: Any):
        self.backend = backend

    def model(self, name: str, field: str = "model") -> str:
        """The served model a request names (empty: the default model), else NOT_FOUND."""
        return self.backend.engine.served_model(name, field)

    def admit(self, request, model: str) -> None:
        """Refuse `request` for what the SDK's shared preflight finds against what the engine
        advertises; what only the engine knows the service checks."""
        self.backend.engine.preflight(request, model)

    def serving_work(self, service: str) -> None:
        if not self.backend.engine.accepting:
            raise Refusal(RefusalCode.UNAVAILABLE,
                          f"{service} is not serving ({self.backend.phase_name}); retry later or elsewhere")
