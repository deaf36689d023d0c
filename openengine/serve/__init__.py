"""The OpenEngine server SDK: serve an engine over upstream's OpenEngine v1 and the proposal's
services by writing a backend.

    from openengine.serve import Backend, serve
    asyncio.run(serve(MyBackend(), ServeConfig(port=50051)))

The backend interface and its types are in `openengine.serve.backend`; the SDK does the protocol
(Control's core RPCs, discovery, health, load, admission, Abort, cancellation, the admin guard,
the wire policy, reflection, shutdown); `SequenceStops` applies a request's stop conditions for a
backend. A backend uses only the names exported here.

A Generate call walks forward, through each module once:
  server.Server.invoke_stream (the profile is advertised, else UNIMPLEMENTED)
  -> generate.Inference.Generate
  -> admission.Admission.admit (taking work, room, the openengine-* metadata, the model, the
     preflight against what is advertised; a refusal is the call's status), which reads the
     engine's state (state.ServingState: what is advertised, the in-flight table)
  -> the backend's `generate` iterator
  -> generate.Events (each output becomes upstream's GenerateResponse events, checked against
     the stream's rules and the usage)
  -> wire_policy.WirePolicy (the write, a vanished client) -> the client.
The stream's end takes the request out of the in-flight table (state.ServingState.ended), where
Control/Abort finds requests and admission counts room.

A WatchLoad call: server.Server.invoke_stream -> load.Observability.WatchLoad, which opens a
load.Watcher with the publisher (load.LoadPublisher) and waits on it; a tick of a shared
load.Ticker, or a load change, offers it a load.Snapshot that load.load_info built from the
backend's `load()` (each figure checked, as upstream's LoadInfo) -> wire_policy.WirePolicy -> the
client.
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
