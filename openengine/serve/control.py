"""Control's core RPCs, the SDK's for every backend: GetServerInfo, GetModelInfo, GetLoad,
Health and Abort. Control's optional RPCs (LoRA, KV events) are the backend's own, served
through `ServiceProvider` when it implements them: the server dispatches per RPC."""

from __future__ import annotations

from openengine.serve.backend import AbortReason, Refusal, RefusalCode, invalid
from openengine.serve.discovery import model_info, server_info
from openengine.serve.load import load_info
from openengine.serve.runstate import DRAINING, SERVING
from openengine.v1 import lifecycle_pb2

# The run state's phase as upstream's HealthState; every phase not listed takes no work.
HEALTH_STATES = {SERVING: lifecycle_pb2.HEALTH_STATE_READY, DRAINING: lifecycle_pb2.HEALTH_STATE_DRAINING}


class Control:
    """openengine.v1.Control (the core RPCs)."""

    def __init__(self, state):
        self.state = state

    async def GetServerInfo(self, request, context):
        return server_info(self.state)

    async def GetModelInfo(self, request, context):
        state = self.state
        if not request.model and len(state.models) > 1:
            raise invalid("model", f"name one of the served models: {', '.join(state.models)}")
        return model_info(state, state.served_model(request.model))

    async def GetLoad(self, request, context):
        return load_info(self.state, per_rank=request.include_per_rank)

    async def Health(self, request, context):
        state = self.state
        if state.starting:
            health = lifecycle_pb2.HEALTH_STATE_STARTING
        else:
            health = HEALTH_STATES.get(state.run.phase, lifecycle_pb2.HEALTH_STATE_NOT_READY)
        check = lifecycle_pb2.HealthCheck(name="scheduler", state=health, message=f"the engine is {state.run.name}")
        return lifecycle_pb2.HealthResponse(state=health, checks=[check])

    async def Abort(self, request: lifecycle_pb2.AbortRequest, context):
        """Exactly one target: a request id (NOT_FOUND when unknown, ALREADY_FINISHED when it
        ended lately), a KV session (the requests continuing from it), or every request."""
        state = self.state
        target = request.WhichOneof("target")
        if target is None:
            raise invalid("target", "set request_id, kv_session or all_requests {}")
        if target == "request_id":
            if not request.request_id:
                raise invalid("request_id", "must not be empty")
            flight = state.in_flight.get(request.request_id)
            if flight is None:
                if request.request_id in state.finished:
                    return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED,
                                                       message=f"request {request.request_id!r} already finished")
                raise Refusal(RefusalCode.NOT_FOUND, f"request_id: no request {request.request_id!r} in flight")
            state.abort(flight, AbortReason.ABORT_RPC)
            return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ABORTED,
                                               message=f"request {request.request_id!r} aborted")
        if target == "kv_session":
            session = request.kv_session.session_id
            if not session:
                raise invalid("kv_session.session_id", "must not be empty")
            flights = [f for f in state.in_flight.values() if f.kv_session == session]
            if not flights:
                raise Refusal(RefusalCode.NOT_FOUND, f"kv_session: no request in flight uses session {session!r}")
            count = state.abort_all(AbortReason.ABORT_RPC, flights)
            return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ABORTED,
                                               message=f"{count} request(s) of session {session!r} aborted")
        count = state.abort_all(AbortReason.ABORT_RPC)
        return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ABORTED,
                                           message=f"{count} request(s) aborted")
