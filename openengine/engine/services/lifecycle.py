"""Lifecycle: Abort."""

from __future__ import annotations


from openengine.engine.services._base import Base, invalid
from openengine.v1 import lifecycle_pb2


class Lifecycle(Base):
    async def Abort(self, request: lifecycle_pb2.AbortRequest, context):
        rt = self.rt
        target = request.WhichOneof("target")
        if target is None:
            raise invalid("target", "set request_ids, kv_session_id or all")
        if target == "request_ids":
            ids = set(request.request_ids.values)
            match = lambda r: r.request_id in ids  # noqa: E731
        elif target == "kv_session_id":
            if not request.kv_session_id:
                raise invalid("kv_session_id", "must not be empty")
            match = lambda r: r.kv_session == request.kv_session_id  # noqa: E731
        else:
            if not request.all:
                raise invalid("all", "must be true when set")
            match = lambda r: True  # noqa: E731
        abort = rt.hooks.at("lifecycle.abort", rt.scheduler.abort, rt=rt)
        count = abort(match, "cancelled by Abort", retryable=False)
        return lifecycle_pb2.AbortResponse(aborted=count)
