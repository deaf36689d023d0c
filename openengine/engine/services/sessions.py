"""Sessions: cache pinning across turns."""

from __future__ import annotations

import uuid

from openengine.engine.resources import Session
from openengine.engine.services._base import Base
from openengine.serve import Refusal, RefusalCode, invalid
from openengine.v1 import sessions_pb2


class Sessions(Base):
    def _info(self, s: Session) -> sessions_pb2.SessionInfo:
        return sessions_pb2.SessionInfo(session_id=s.session_id, model=s.model, capacity_tokens=s.capacity_tokens,
                                        ttl_ms=s.ttl_ms, retained_tokens=s.retained_tokens,
                                        expires_at=self.backend.clock.timestamp(s.expires_ns))

    async def OpenSession(self, request: sessions_pb2.OpenSessionRequest, context):
        backend = self.backend
        model = backend.engine.served_model(request.model)
        backend.expire_sessions()
        lim = lambda name: backend.limit("openengine.sessions", name)  # noqa: E731
        if len(backend.sessions) >= lim("max_sessions"):
            raise Refusal(RefusalCode.RESOURCE_EXHAUSTED, f"{len(backend.sessions)} sessions are open, "
                          f"openengine.sessions.max_sessions = {lim('max_sessions')}")
        sid = request.session_id or f"sess-{uuid.uuid4().hex[:12]}"
        if sid in backend.sessions:
            raise Refusal(RefusalCode.ALREADY_EXISTS, f"session_id: {sid!r} is already open")
        max_tokens = lim("max_session_tokens")
        bound = max_tokens or backend.models[model].max_context_tokens
        if request.HasField("capacity_tokens"):
            if request.capacity_tokens > bound:
                raise invalid("capacity_tokens", f"{request.capacity_tokens} exceeds "
                              f"{'openengine.sessions.max_session_tokens' if max_tokens else 'ModelInfo.max_context_length'} = {bound}")
            capacity = request.capacity_tokens
        else:
            capacity = bound
        if request.HasField("ttl_ms"):
            ttl = min(request.ttl_ms, lim("max_session_ttl_ms"))
            if ttl == 0:
                raise invalid("ttl_ms", "must be positive")
        else:
            ttl = lim("default_session_ttl_ms")
        session = Session(sid, model, capacity, ttl, expires_ns=backend.clock.now_ns() + ttl * 1_000_000)
        backend.sessions[sid] = session
        backend.load_changed()
        return sessions_pb2.OpenSessionResponse(session=self._info(session))

    async def CloseSession(self, request, context):
        closed = self.backend.sessions.pop(request.session_id, None) is not None
        if closed:
            self.backend.load_changed()
        return sessions_pb2.CloseSessionResponse(closed=closed)

    async def ListSessions(self, request, context):
        backend = self.backend
        backend.expire_sessions()
        if request.model:
            backend.engine.served_model(request.model)
        return sessions_pb2.ListSessionsResponse(sessions=[self._info(s) for s in backend.sessions.values()])
