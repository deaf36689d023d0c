"""Encoder: encoder outputs for disaggregated multimodal serving."""

from __future__ import annotations

from openengine.engine import model as stand_in
from openengine.engine.services._base import Base
from openengine.serve import invalid
from openengine.v1 import encoder_pb2


class Encoder(Base):
    async def Encode(self, request: encoder_pb2.EncodeRequest, context):
        backend = self.backend
        self.serving_work("openengine.v1.Encoder")
        backend.engine.preflight(request, backend.engine.served_model(request.model))
        if not request.items:
            raise invalid("items", "needs at least one item")
        ttl = int(backend.limit("openengine.encoder", "handle_ttl_ms"))
        now = backend.clock.now_ns()
        for handle in [h for h, (_, exp) in backend.encoder_cache.items() if exp <= now]:
            del backend.encoder_cache[handle]
        out = encoder_pb2.EncodeResponse()
        for i, item in enumerate(request.items):
            kind = item.WhichOneof("item")
            if kind is None:
                raise invalid(f"items[{i}]", "set image, audio or video")
            media = getattr(item, kind)
            payload = media.data if media.WhichOneof("source") == "data" else media.url.encode()
            if not payload:
                raise invalid(f"items[{i}].{kind}", "set data or url")
            handle, tokens = stand_in.encode_item(payload)
            expires = now + ttl * 1_000_000
            backend.encoder_cache[handle] = (tokens, expires)
            out.handles.add(handle=handle, encoder_instance_id=backend.engine.instance_id,
                            transfer_address=backend.engine.address,
                            item_id=item.item_id, num_tokens=tokens, expires_at=backend.clock.timestamp(expires))
        return out
