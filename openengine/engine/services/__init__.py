"""The RPC implementations, one module per service, one class per service named as the contract
names the service (`openengine.v1.Inference` -> class `Inference`), one coroutine per RPC named as
the RPC.

Nothing here lists the services or the profiles: every public module of this package is scanned
and each `Base` subclass is the implementation of the service with its name. An RPC is implemented
when its class has a method of the RPC's name; a profile is served only when all of its RPCs are
(`missing_rpcs`). So adding a profile's RPC to the engine is adding one module here, and nothing
else in the engine changes. `server.py` routes every compiled RPC to its method and refuses it with
UNIMPLEMENTED when its profile is not advertised.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import lru_cache
from typing import Callable, Iterable

from openengine.engine.contract import ProfileInfo, RpcInfo
from openengine.engine.services._base import Base, Refused

__all__ = ["Base", "Refused", "implementation", "missing_rpcs", "service_classes"]


@lru_cache(maxsize=1)
def service_classes() -> dict[str, type[Base]]:
    """Service short name (`Inference`) -> the class implementing it, from every public module of
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


def _short(service: str) -> str:
    return service.rsplit(".", 1)[-1]


def implementation(rpc: RpcInfo, classes: dict[str, type[Base]] | None = None) -> Callable | None:
    """The unbound method implementing `rpc`, or None when the engine has no code for it."""
    cls = (classes if classes is not None else service_classes()).get(_short(rpc.service))
    method = getattr(cls, rpc.method.name, None) if cls is not None else None
    if method is None or not (inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)):
        return None
    return method


def missing_rpcs(profile: ProfileInfo, classes: dict[str, type[Base]] | None = None) -> list[RpcInfo]:
    """The RPCs of `profile` that have no implementation here (REQ-CORE-002: an engine advertises
    a profile only when it serves every RPC of it)."""
    return [rpc for rpc in profile.rpcs if implementation(rpc, classes) is None]


def instantiate(runtime, services: Iterable[str]) -> dict[str, Base]:
    """One instance per implemented service of `services` (full names), sharing `runtime`."""
    classes = service_classes()
    return {s: classes[_short(s)](runtime) for s in services if _short(s) in classes}
