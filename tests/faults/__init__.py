"""Faults: the reference engine made to break one conformance rule on purpose, to prove that the
runner catches each broken rule.

Each fault misbehaves in exactly one way a client can observe and names every requirement, or
clause of one (`REQ-CORE-010.7`), that behaviour breaks. It is built only from public seams
(`seams.py`): standard gRPC server interceptors for what goes wrong on the wire, and a wrapper
around the backend for what goes wrong in the engine. The product never imports this package.

    from tests.faults import faulty_engine
    with faulty_engine(EngineConfig(port=0), ["max-tokens-overrun"]) as engine:
        ...  # connect to engine.address

`python -m tests.faults --list` prints every fault with what it breaks; `python -m tests.faults
--serve NAME --port 0 ...` runs an engine committing it as its own process, as `oespec engine` runs
the plain one.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

from openengine.engine import EngineConfig, ReferenceBackend, check, serve_config
from openengine.serve import RunningServer, ServeConfig

from tests.faults.table import FAULTS, Fault, Held

__all__ = ["FAULTS", "Fault", "faulty_engine", "faulty_parts"]


def faulty_parts(config: EngineConfig, names: Iterable[str]) -> tuple[Callable[[], object], ServeConfig]:
    """What the SDK serves for a reference engine committing the faults `names`: a factory of
    its (wrapped) backend and its ServeConfig with the faults' interceptors."""
    names = list(names)
    unknown = [name for name in names if name not in FAULTS]
    if unknown:
        raise KeyError(f"unknown fault(s) {', '.join(unknown)}; `python -m tests.faults --list` lists them")
    faults = [FAULTS[name] for name in names]
    held = Held(check(config))
    interceptors = [interceptor for fault in faults if fault.wire for interceptor in fault.wire(held)]

    def backend():
        held.reference = ReferenceBackend(held.config)
        served = held.reference
        for fault in faults:
            if fault.engine is not None:
                served = fault.engine(served, held)
        return served
    return backend, dataclasses.replace(serve_config(held.config), interceptors=tuple(interceptors))


def faulty_engine(config: EngineConfig, names: Iterable[str], *, grace: float = 0.25) -> RunningServer:
    """A reference engine (not started) committing the faults `names`, served from a thread."""
    backend, served = faulty_parts(config, names)
    return RunningServer(backend, served, grace=grace)
