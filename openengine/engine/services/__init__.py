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
    names = sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))
    modules = [importlib.import_module(f"{__name__}.{name}") for name in names]
    return {name: cls for module in modules for name, cls in vars(module).items()
            if inspect.isclass(cls) and issubclass(cls, Base) and cls.__module__ == module.__name__}


def for_backend(backend: Any) -> dict[str, object]:
    """Full service name -> the object serving its RPCs for `backend`."""
    return {f"openengine.v1.{name}": cls(backend) for name, cls in service_classes().items()}
