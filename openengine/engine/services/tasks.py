"""Tasks: embeddings, scoring and other non-generative work."""

from __future__ import annotations

from openengine.engine import model as stand_in
from openengine.engine.services._base import Base
from openengine.serve import invalid
from openengine.v1 import tasks_pb2


class Tasks(Base):
    def _check(self, request, count: int, field: str) -> tuple[str, int | None]:
        """Admit a task request: the shared preflight against what the engine advertises (the
        model lists openengine.tasks and serves this task family, the input count), then the
        shape of the request. Returns the served model and the truncation asked for."""
        self.serving_work("openengine.v1.Tasks")
        model = self.backend.engine.served_model(request.model)
        self.backend.engine.preflight(request, model)
        if count == 0:
            raise invalid(field, "needs at least one input")
        return model, request.truncate_tokens if request.HasField("truncate_tokens") else None

    def _ids(self, model: str, item: tasks_pb2.TaskInput, field: str, truncate: int | None,
             usage: tasks_pb2.TaskUsage) -> list[int]:
        """The input's token ids, counted into `usage`."""
        kind = item.WhichOneof("input")
        if kind is None:
            raise invalid(field, "set text or token_ids")
        ids = list(item.token_ids.ids) if kind == "token_ids" else stand_in.tokenize(item.text)
        limit = self.backend.models[model].max_context_tokens
        if truncate is not None:
            ids = ids[-truncate:] if truncate else []
        elif len(ids) > limit:
            raise invalid(field, f"{len(ids)} tokens exceed ModelInfo.max_context_length = {limit}; set truncate_tokens")
        usage.prompt_tokens += len(ids)
        return ids

    async def Embed(self, request: tasks_pb2.EmbedRequest, context):
        backend = self.backend
        model, truncate = self._check(request, len(request.inputs), "inputs")
        # The model's own value, else the engine-wide one.
        size = int(backend.engine.model_limit_values(model, "openengine.tasks")["embedding_size"])
        if size == 0:
            raise invalid("model", "the model does not embed (openengine.tasks.embedding_size = 0)")
        if request.HasField("dimensions"):
            if not 1 <= request.dimensions <= size:
                raise invalid("dimensions", f"must be in 1..{size} (openengine.tasks.embedding_size)")
            size = request.dimensions
        normalize = request.normalize if request.HasField("normalize") else True
        out = tasks_pb2.EmbedResponse()
        for i, item in enumerate(request.inputs):
            ids = self._ids(model, item, f"inputs[{i}]", truncate, out.usage)
            out.embeddings.add(index=i, values=stand_in.embed(ids, size, normalize=normalize))
        return out

    async def Classify(self, request: tasks_pb2.ClassifyRequest, context):
        model, truncate = self._check(request, len(request.inputs), "inputs")
        out = tasks_pb2.ClassifyResponse()
        for i, item in enumerate(request.inputs):
            ids = self._ids(model, item, f"inputs[{i}]", truncate, out.usage)
            c = out.classifications.add(index=i)
            for label, p in stand_in.classify(ids):
                c.labels.add(label=label, probability=p)
        return out

    async def Score(self, request: tasks_pb2.ScoreRequest, context):
        model, truncate = self._check(request, len(request.documents), "documents")
        out = tasks_pb2.ScoreResponse()
        query = self._ids(model, request.query, "query", truncate, out.usage)
        for i, doc in enumerate(request.documents):
            ids = self._ids(model, doc, f"documents[{i}]", truncate, out.usage)
            out.scores.add(index=i, score=stand_in.score(query, ids))
        return out
