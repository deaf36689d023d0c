"""What every service of the backend shares."""

from __future__ import annotations

from typing import Any

from openengine.serve import Refusal, RefusalCode


class Base:
    """A service object of the reference backend (`ServiceProvider`): `backend` is that backend, which
    reads the advertised limits through the SDK's engine handle."""

    def __init__(self, backend: Any):
        self.backend = backend

    def serving_work(self, service: str) -> None:
        if not self.backend.engine.accepting:
            raise Refusal(RefusalCode.UNAVAILABLE,
                          f"{service} is not serving ({self.backend.phase_name}); retry later or elsewhere")
