"""The OpenEngine server SDK: serve an engine over upstream's OpenEngine v1 and the proposal's
services by writing a backend.

    from openengine.serve import Backend, serve
    asyncio.run(serve(MyBackend(), ServeConfig(port=50051)))

The backend interface and its types are in `openengine.serve.backend`; the SDK does the protocol
(Control's core RPCs, discovery, health, load, admission, Abort, cancellation, the admin guard,
the wire policy, reflection, shutdown); `SequenceStops` applies a request's stop conditions for a
backend. A backend uses only the names exported here.

A Generate call walks forward through these modules, each entered once:
  server (the route: profile advertised, else UNIMPLEMENTED) -> generate.Inference.Generate ->
  admission (engine taking work, room, metadata, model, preflight; a refusal is the status) ->
  the backend's `generate` iterator -> generate.Events (each output becomes upstream's events,
  checked against the stream's rules) -> wire (the write policy) -> the client.
The stream's end (its last output, an abort, the client going away) leaves the in-flight table
kept by state, which admission counts room on and Control/Abort looks requests up in.

A WatchLoad call: server -> load.Observability.WatchLoad, which opens a Watcher with the
publisher (load.LoadPublisher) and waits on it; a tick of a shared load.Ticker or a load change
offers it a Snapshot built by load.load_info from the backend's `load()` (checked figures as
upstream's LoadInfo) -> wire -> the client.
"""

from openengine.serve.backend import (
    AbortReason, AdminOperations, Backend, Chunk, EngineDescription, EngineHandle, ErrorCode, Failure, Final,
    FinishReason, GenerateOutput, GenerateRequest, Load, Model, Prompt, RankLoad, Refusal, RefusalCode, ServiceProvider,
    StateListener, StopMatch, Tokenizer, TokenInfo, invalid,
)
from openengine.serve.load import Clock
from openengine.serve.profiles import CannotServe
from openengine.serve.runstate import DRAINING, PAUSED, SERVING, SLEEPING, STOPPING, RunState
from openengine.serve.server import AdminAccess, ConnectionPolicy, RunningServer, ServeConfig, Server, serve
from openengine.serve.stopping import SequenceStops

__all__ = [
    "AbortReason", "AdminOperations", "Backend", "Chunk", "EngineDescription", "EngineHandle", "ErrorCode",
    "Failure", "Final", "FinishReason", "GenerateOutput", "GenerateRequest", "Load", "Model", "Prompt", "RankLoad",
    "Refusal", "RefusalCode", "ServiceProvider", "StateListener", "StopMatch", "Tokenizer", "TokenInfo",
    "AdminAccess", "CannotServe", "Clock", "ConnectionPolicy", "RunState", "RunningServer", "SequenceStops",
    "ServeConfig", "Server", "invalid", "serve", "SERVING", "PAUSED", "DRAINING", "SLEEPING", "STOPPING",
]
