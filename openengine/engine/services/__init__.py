"""The optional services the reference backend serves itself (`ServiceProvider`), one module per
service, one class per service named as the contract names the service (`openengine.v1.Sessions`
-> class `Sessions`), one coroutine or async generator per RPC named as the RPC. The protocol's
own services (Discovery, Inference, Lifecycle, Observability's load, Admin) are the SDK's.

Nothing here lists the services or the profiles: every public module of this package is scanned
and each `Base` subclass is the implementation of the service with its name. An RPC is implemented
when the SDK or one of these classes has a method of its name; a profile is served only when all
of its RPCs are. So adding a profile's RPCs to the engine is adding one module here, and nothing
else in the engine changes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import lru_cache

from openengine.engine.services._base import Base

__all__ = ["Base", "service_classes"]


@lru_cache(maxsize=1)
def service_classes() -> dict[str, type[Base]]:
    """Service short name (`Sessions`) -> the class implementing it, from every public module of
    this package. Two classes claiming one service is a programming error, reported at import."""
    found: dict[str, type[Base]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, cls in vars(module).items():
            if not (inspect.isclass(cls) and issubclass(cls, Base) and cls is not Base
                    and cls.__module__ == module.__name__):
                continue
            if name in found:
                raise RuntimeError(f"service {name} is implemented twice: in {found[name].__module__} "
                                   f"and in {module.__name__}; keep one")
            found[name] = cls
    return found
