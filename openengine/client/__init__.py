"""Client helpers on top of the generated validators.

- `CapabilityView`: what does this engine support? `supports`, `limit` (defaults applied),
  `require` (raises `CapabilityError` naming everything missing), `model(name)` for model-scoped
  limits; built from discovery messages or fetched (`fetch`, `afetch`). A server of an earlier
  layout (no `Discovery/GetCapabilities`) is reported as `EarlierLayoutError`, naming the alias
  and schema revision it serves (REQ-ALIAS-004).
- `LoadWatcher` / `AsyncLoadWatcher`: the engine's latest load, from a validated WatchLoad
  stream with reconnection (`Backoff`) and a GetLoad polling fallback; it follows an engine that
  restarts behind the same address (`Restart`) and ends with a reason when nothing is left to try.
"""

from openengine.client._view import CapabilityError, CapabilityView, EarlierLayoutError, ModelView
from openengine.client._watcher import POLL, UNAVAILABLE, WATCH, AsyncLoadWatcher, Backoff, LoadWatcher, Restart

__all__ = ["AsyncLoadWatcher", "Backoff", "CapabilityError", "CapabilityView", "EarlierLayoutError",
           "LoadWatcher", "ModelView", "Restart",
           "POLL", "UNAVAILABLE", "WATCH"]
