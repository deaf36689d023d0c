"""Client helpers on top of the validators.

- `CapabilityView`: what does this engine support? `supports`, `limit` (defaults applied),
  `require` (raises `CapabilityError` naming everything missing), `model(name)` for model-scoped
  limits; built from discovery answers (Control/GetServerInfo, Control/GetModelInfo,
  Discovery/GetCapabilities) or fetched (`fetch`, `afetch`). An engine serving upstream
  OpenEngine v1 alone is `upstream_only`: it advertises no profile and is known by what its
  ServerInfo and ModelInfo report.
- `LoadWatcher` / `AsyncLoadWatcher`: the engine's latest load, from a validated WatchLoad
  stream with reconnection (`Backoff`) and Control/GetLoad polling as the fallback; it follows an
  engine that restarts behind the same address (`Restart`) and ends with a reason when nothing is
  left to try. Both drive one state machine, `WatchState`, which does no I/O: fed what happened,
  it answers the next step (`Discover`, `Watch`, `Poll`, `Pause`, `Finished`), so another driver
  (another event loop, a simulation) needs only to make the calls.
"""

from openengine.client._view import (
    CapabilityError, CapabilityView, IncompatibleServerError, ModelView, NotOpenEngineError,
)
from openengine.client._watcher import (
    POLL, UNAVAILABLE, WATCH, AsyncLoadWatcher, Backoff, Discover, Finished, LoadWatcher, Pause, Poll, Restart,
    Watch, WatchState,
)

__all__ = ["AsyncLoadWatcher", "Backoff", "CapabilityError", "CapabilityView", "Discover", "Finished",
           "IncompatibleServerError", "LoadWatcher", "ModelView", "NotOpenEngineError", "Pause", "Poll", "Restart",
           "Watch", "WatchState", "POLL", "UNAVAILABLE", "WATCH"]
