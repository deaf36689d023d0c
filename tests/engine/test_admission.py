"""Request admission goes through the shared preflight (`openengine.validate.preflight`) against
what the engine itself advertises: the engine refuses exactly what a client's own preflight
refuses, plus only what the engine alone can know (its vocabulary, the room left in the context,
which adapters and sessions exist)."""

from __future__ import annotations

import grpc
import pytest

from openengine.validate import Severity, preflight, validate_capabilities
from openengine.v1 import (
    common_pb2, discovery_pb2, generation_pb2, kv_pb2, tasks_pb2,
)
from tests.engine.conftest import running

LIMITS = {"core": {"max_sequences": 2, "max_logprobs": 3, "min_p": False, "logit_bias": False,
                   "prompt_logprobs": False, "guided_decoding_modes": ["choice"]},
          "tasks": {"supported_tasks": ["embed"], "max_inputs_per_request": 2}}

REQUESTS = [
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4)),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4, n=3)),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4, logprobs=4)),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4, logprobs=3)),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4, min_p=0.1)),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4, prompt_logprobs=1)),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4, logit_bias={5: 1.0})),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4, guided=generation_pb2.GuidedDecoding(regex="a"))),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=100000)),
    generation_pb2.GenerateRequest(text="hi", sampling=generation_pb2.SamplingParams(max_tokens=4, temperature=float("nan"))),
    generation_pb2.GenerateRequest(text="hi", session_id="s1"),
    generation_pb2.GenerateRequest(text="hi", kv_transfer=kv_pb2.KvTransferParams(role=kv_pb2.KV_TRANSFER_ROLE_PRODUCER)),
    tasks_pb2.EmbedRequest(inputs=[tasks_pb2.TaskInput(text="a")]),
    tasks_pb2.EmbedRequest(inputs=[tasks_pb2.TaskInput(text=t) for t in "abc"]),
    tasks_pb2.ScoreRequest(query=tasks_pb2.TaskInput(text="q"), documents=[tasks_pb2.TaskInput(text="d")]),
]


def _call(stubs, request):
    kind = request.DESCRIPTOR.name
    if kind == "GenerateRequest":
        return list(stubs.inference.Generate(request, timeout=10))
    return getattr(stubs.tasks, kind[:-len("Request")])(request, timeout=10)


def test_the_engine_refuses_exactly_what_preflight_refuses_against_its_capabilities():
    with running(profiles=("tasks", "load"), limits=LIMITS) as (_, stubs):
        d = stubs.discovery
        report = validate_capabilities(
            stubs.caps(), engine_info=stubs.info(),
            model_infos=[d.GetModelInfo(discovery_pb2.GetModelInfoRequest(model=m), timeout=5)
                         for m in stubs.info().served_models])
        assert report.ok, report.errors
        refused_somewhere = 0
        for request in REQUESTS:
            errors = [v for v in preflight(request, report) if v.severity is Severity.ERROR]
            try:
                _call(stubs, request)
                refused = None
            except grpc.RpcError as err:
                refused = err
            if not errors:
                assert refused is None or refused.code() != grpc.StatusCode.INVALID_ARGUMENT, \
                    (request, refused.details())
                continue
            refused_somewhere += 1
            assert refused is not None and refused.code() == grpc.StatusCode.INVALID_ARGUMENT, request
            for v in errors:  # every reason, with the requirement it enforces
                assert v.message in refused.details() and v.requirement in refused.details()
        assert refused_somewhere >= 10


@pytest.mark.parametrize("request_, field, code", [
    (generation_pb2.GenerateRequest(token_ids=common_pb2.TokenIds(ids=[1 << 20])), "token_ids", grpc.StatusCode.INVALID_ARGUMENT),
    (generation_pb2.GenerateRequest(text="x" * 5000), "prompt", grpc.StatusCode.INVALID_ARGUMENT),
    (generation_pb2.GenerateRequest(text="hi", session_id="nope"), "session_id", grpc.StatusCode.NOT_FOUND),
    (generation_pb2.GenerateRequest(text="hi", adapter="nope"), "adapter", grpc.StatusCode.NOT_FOUND),
])
def test_what_only_the_engine_knows_is_checked_after_preflight_passes(request_, field, code):
    with running(profiles=("sessions", "adapters")) as (_, stubs):
        report = validate_capabilities(stubs.caps(), engine_info=stubs.info(), model_infos=[stubs.model()])
        assert preflight(request_, report) == []   # a client cannot know these ...
        with pytest.raises(grpc.RpcError) as err:
            _call(stubs, request_)
        assert err.value.code() == code and err.value.details().startswith(field)   # ... the engine does
