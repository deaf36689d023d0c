"""The optional RPCs the reference backend serves itself (`ServiceProvider`), one module per
service, one class per service named as the contract names the service (`openengine.v1.Sessions`
-> class `Sessions`), one coroutine or async generator per RPC named as the RPC. The protocol's
own RPCs (Generate, GetServerInfo, Abort, WatchLoad, Admin, ...) are the SDK's; a class may serve
the rest of a service the SDK also serves (`Control`: the LoRA and KV RPCs).

Every public module of this package is scanned and each `Base` subclass serves the service with
its name, so adding a profile's RPCs to the engine is adding one module here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

from openengine.engine.services._base import Base

__all__ = ["Base", "for_backend", "service_classes"]


def service_classes() -> dict[str, type[Base]]:
    """Service short name (`Sessions`) -> the class serving it, from every public module here."""
    found: dict[str, type[Base]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, Base) and cls is not Base and cls.__module__ == module.__name__:
                found[name] = cls
    return found


def for_backend(backend: Any) -> dict[str, object]:
    """Full service name -> the object serving its RPCs for `backend`."""
    return {f"openengine.v1.{name}": cls(backend) for name, cls in service_classes().items()}
