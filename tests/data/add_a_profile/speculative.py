"""Speculative: check a draft against the target model (the add-a-profile fixture's engine code)."""

from __future__ import annotations

from openengine.engine import model
from openengine.engine.services._base import Base
from openengine.serve import invalid
from openengine.v1 import speculative_pb2


class Speculative(Base):
    async def VerifyDraft(self, request: speculative_pb2.VerifyDraftRequest, context):
        cap = self.backend.limit("openengine.speculative", "max_draft_tokens")
        self.model(request.model)
        if not request.draft_token_ids:
            raise invalid("draft_token_ids", "needs at least one token")
        if len(request.draft_token_ids) > cap:
            raise invalid("draft_token_ids", f"{len(request.draft_token_ids)} tokens exceed "
                          f"openengine.speculative.max_draft_tokens = {cap}")
        sampler = model.SequenceSampler.start(list(request.prefix_token_ids) or [0], seed=0, index=0,
                                             temperature=0.0, adapter=None)
        accepted = 0
        token = sampler.next_token()
        while accepted < len(request.draft_token_ids) and request.draft_token_ids[accepted] == token:
            accepted += 1
            token = sampler.next_token()
        return speculative_pb2.VerifyDraftResponse(accepted_tokens=accepted, next_token_id=token)
