"""The OpenEngine server SDK: serve an engine over the OpenEngine protocol by writing a backend.

    from openengine.serve import Backend, serve
    asyncio.run(serve(MyBackend(), ServeConfig(port=50051)))

The backend interface and its types are in `openengine.serve.backend`; the SDK does the
protocol (discovery, health, load, admission, Abort, cancellation, the admin guard, the wire
policy, reflection, shutdown); `SequenceStops` applies a request's stop conditions for a backend.
"""

from openengine.serve.backend import (
    AbortReason, AdminOperations, Backend, Chunk, EngineDescription, EngineHandle, ErrorCode, Failure, Final,
    FinishReason, GenerateOutput, GenerateRequest, Load, Model, Prompt, RankLoad, Refusal, RefusalCode, ServiceProvider,
    StateListener, StopMatch, Tokenizer, TokenInfo, invalid,
)
from openengine.serve.profiles import CannotServe
from openengine.serve.server import AdminAccess, ConnectionPolicy, Gate, Layer, RunningServer, ServeConfig, Server, serve
from openengine.serve.stopping import SequenceStops

__all__ = [
    "AbortReason", "AdminOperations", "Backend", "Chunk", "EngineDescription", "EngineHandle", "ErrorCode",
    "Failure", "Final", "FinishReason", "GenerateOutput", "GenerateRequest", "Load", "Model", "Prompt", "RankLoad",
    "Refusal", "RefusalCode", "ServiceProvider", "StateListener", "StopMatch", "Tokenizer", "TokenInfo",
    "AdminAccess", "CannotServe", "ConnectionPolicy", "Gate", "Layer", "RunningServer", "SequenceStops", "ServeConfig",
    "Server", "invalid", "serve",
]
