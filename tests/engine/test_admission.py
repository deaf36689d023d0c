"""Request admission goes through the shared preflight (`openengine.validate.preflight`) against
what the engine itself advertises: the engine refuses exactly what a client's own preflight
refuses, plus only what the engine alone can know (its vocabulary, the room left in the context,
which adapters and sessions exist)."""

from __future__ import annotations

import grpc
import pytest

from openengine.validate import Severity, preflight, validate_capabilities
from openengine.v1 import generation_pb2 as g
from openengine.v1 import model_pb2, tasks_pb2
from tests.engine.conftest import running

LIMITS = {"core": {"max_sequences": 2, "max_logprobs": 3, "min_p": False, "prompt_logprobs": False,
                   "guided_decoding_modes": ["choice"]},
          "tasks": {"supported_tasks": ["embed"], "max_inputs_per_request": 2}}


def _gen(**fields) -> g.GenerateRequest:
    fields.setdefault("stopping", g.StoppingOptions(max_tokens=4))
    return g.GenerateRequest(prompt="hi", **fields)


def _top(n: int) -> g.ResponseOptions:
    return g.ResponseOptions(return_output_logprobs=True, output_candidates=g.CandidateTokenSelection(top_n=n))


REQUESTS = [
    _gen(),
    _gen(sampling=g.SamplingParams(num_sequences=3)),
    _gen(response=_top(4)),
    _gen(response=_top(3)),
    _gen(sampling=g.SamplingParams(min_p=0.1)),
    _gen(response=g.ResponseOptions(return_prompt_logprobs=True)),
    _gen(guided=g.GuidedDecoding(regex="a")),
    _gen(stopping=g.StoppingOptions(max_tokens=100000)),
    _gen(sampling=g.SamplingParams(temperature=float("nan"))),
    _gen(session_id="s1"),
    _gen(kv=g.KvOptions(session={"session_id": "kv-1"})),
    tasks_pb2.EmbedRequest(inputs=[tasks_pb2.TaskInput(text="a")]),
    tasks_pb2.EmbedRequest(inputs=[tasks_pb2.TaskInput(text=t) for t in "abc"]),
    tasks_pb2.ScoreRequest(query=tasks_pb2.TaskInput(text="q"), documents=[tasks_pb2.TaskInput(text="d")]),
]


def _report(stubs):
    info = stubs.info()
    return validate_capabilities(stubs.caps(), server_info=info,
                                 model_infos=[stubs.model(m) for m in info.supported_models])


def _call(stubs, request):
    kind = request.DESCRIPTOR.name
    if kind == "GenerateRequest":
        return list(stubs.inference.Generate(request, timeout=10))
    return getattr(stubs.tasks, kind[:-len("Request")])(request, timeout=10)


def test_the_engine_refuses_exactly_what_preflight_refuses_against_its_capabilities():
    with running(profiles=("tasks", "load"), limits=LIMITS) as (_, stubs):
        report = _report(stubs)
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
        assert refused_somewhere >= 9


@pytest.mark.parametrize("request_, field, code", [
    (g.GenerateRequest(token_ids=g.TokenIds(ids=[300])), "token_ids", grpc.StatusCode.INVALID_ARGUMENT),
    (g.GenerateRequest(prompt="hi", sampling=g.SamplingParams(num_sequences=0)), "sampling.num_sequences",
     grpc.StatusCode.INVALID_ARGUMENT),
    (g.GenerateRequest(prompt="x" * 5000), "prompt", grpc.StatusCode.INVALID_ARGUMENT),
    (g.GenerateRequest(prompt="hi", session_id="nope"), "session_id", grpc.StatusCode.NOT_FOUND),
    (g.GenerateRequest(prompt="hi", lora_name="nope"), "lora_name", grpc.StatusCode.NOT_FOUND),
])
def test_what_only_the_engine_knows_is_checked_after_preflight_passes(request_, field, code):
    with running(profiles=("sessions", "adapters")) as (_, stubs):
        report = _report(stubs)
        assert preflight(request_, report) == []   # a client cannot know these ...
        with pytest.raises(grpc.RpcError) as err:
            _call(stubs, request_)
        assert err.value.code() == code and err.value.details().startswith(field)   # ... the engine does
