"""Control's core RPCs, the SDK's for every backend: GetServerInfo, GetModelInfo, GetLoad,
Health and Abort. Control's optional RPCs (LoRA, KV events) are the backend's own, served
through `ServiceProvider` when it implements them: the server dispatches per RPC."""

from __future__ import annotations

import asyncio
import uuid

from openengine.serve.backend import AbortReason, Failure, Final, GenerateRequest, Refusal, RefusalCode, invalid
from openengine.serve.discovery import ROLE_NUMBERS, model_info, server_info
from openengine.serve.load import load_info
from openengine.serve.runstate import DRAINING, SERVING
from openengine.v1 import generation_pb2, lifecycle_pb2, server_pb2

READY, NOT_READY = lifecycle_pb2.HEALTH_STATE_READY, lifecycle_pb2.HEALTH_STATE_NOT_READY
# The run state's phase as upstream's HealthState; every phase not listed takes no work.
HEALTH_STATES = {SERVING: READY, DRAINING: lifecycle_pb2.HEALTH_STATE_DRAINING}
# How long Health's inference probe may take before it counts as failed.
PROBE_TIMEOUT_S = 10.0


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
        """The run state (READY, DRAINING, NOT_READY; STARTING before serving), as the
        `scheduler` check; with an expected `role`, a `role` check; with
        `include_inference_probe`, a one-token Generate through the backend. A check that is
        not READY makes a READY engine NOT_READY."""
        state = self.state
        if state.starting:
            health = lifecycle_pb2.HEALTH_STATE_STARTING
        else:
            health = HEALTH_STATES.get(state.run.phase, NOT_READY)
        checks = [lifecycle_pb2.HealthCheck(name="scheduler", state=health, message=f"the engine is {state.run.name}")]
        role = ROLE_NUMBERS[state.description.role]
        if request.role and request.role != role:
            checks.append(lifecycle_pb2.HealthCheck(
                name="role", state=NOT_READY, message=f"the engine's role is {server_pb2.EngineRole.Name(role)}"))
        if request.include_inference_probe:
            checks.append(await self.probe(state.served_model(request.model)))
        if health == READY and any(c.state != READY for c in checks):
            health = NOT_READY
        return lifecycle_pb2.HealthResponse(state=health, checks=checks)

    async def probe(self, model: str) -> lifecycle_pb2.HealthCheck:
        """Generate one token of `model` in the backend (outside admission: it takes no slot
        from clients) and say whether it ended."""
        state = self.state

        def check(health: int, message: str) -> lifecycle_pb2.HealthCheck:
            return lifecycle_pb2.HealthCheck(name="inference_probe", state=health, message=message)

        if not state.accepting:
            return check(NOT_READY, f"not run: the engine is {state.run.name}")
        tokenizer = state.models[model].tokenizer
        message = generation_pb2.GenerateRequest(request_id=f"health-probe-{uuid.uuid4().hex[:12]}", model=model,
                                                 stopping=generation_pb2.StoppingOptions(max_tokens=1))
        if tokenizer.text_input:
            message.prompt = "Hello"
        else:
            message.token_ids.ids.append(tokenizer.bos_token_id or 0)
        request = GenerateRequest(request_id=message.request_id, model=model, message=message)
        outputs = state.backend.generate(request)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                async for output in outputs:
                    if isinstance(output, Final):
                        return check(READY, f"model {model!r} generated a token")
                    if isinstance(output, Failure):
                        return check(NOT_READY, f"model {model!r} failed: {output.message}")
            return check(NOT_READY, f"model {model!r} ended without a Final")
        except TimeoutError:
            await state.backend.abort(request.request_id, AbortReason.CLIENT_CANCELLED)
            return check(NOT_READY, f"model {model!r} generated no token within {PROBE_TIMEOUT_S:g}s")
        except Refusal as refused:
            return check(NOT_READY, f"model {model!r} refused the probe: {refused.message}")
        except Exception as err:   # the probe reports the engine's failure, it does not raise it
            return check(NOT_READY, f"model {model!r} failed ({type(err).__name__})")
        finally:
            close = getattr(outputs, "aclose", None)
            if close is not None:
                await close()

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
