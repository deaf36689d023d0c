"""The SDK with small in-process backends, seen through upstream's v1 stubs and the proposal's:
what is advertised (and what a backend that says nothing gets), Control's core RPCs and its
optional ones dispatched per RPC, how a Generate call is admitted and becomes upstream's events,
how it is aborted or cancelled, and how the SDK answers a backend that breaks the protocol."""

from __future__ import annotations

import asyncio
import logging
import threading

import grpc
import pytest

from openengine.serve import (
    AbortReason, CannotServe, Chunk, EngineDescription, ErrorCode, Failure, Final, FinishReason, Load, Model, Prompt,
    Refusal, RefusalCode, RunningServer, ServeConfig, Server, StateListener, StopMatch, Tokenizer, TokenInfo,
)
from openengine.v1 import (
    control_service_pb2_grpc as control_grpc, discovery_pb2, discovery_service_pb2_grpc as discovery_grpc,
    error_pb2, generation_pb2, inference_service_pb2_grpc as inference_grpc, kv_pb2, lifecycle_pb2, lora_pb2,
    model_pb2, server_pb2,
)

TEXT = Tokenizer("bytes", 256, eos_token_id=0, token_text=chr)
MODEL = Model("m", max_context_tokens=512, max_output_tokens=64, tokenizer=TEXT)
OK_FINAL = dict(prompt_tokens=2, completion_tokens=2)


class Backend:
    """Streams "A" then ends with "B" (per output); `hold` keeps a request running until aborted;
    `script` replaces the outputs; `refuse` refuses."""

    def __init__(self, *, limits=None, refuse: Refusal | None = None, hold: bool = False, script=None,
                 load: Load | None = None, models=(MODEL,)):
        self.limits = limits or {}
        self.refuse, self.hold, self.script, self.figures, self.models = refuse, hold, script, load, models
        self.aborts: list[tuple[str, AbortReason]] = []
        self.running: dict[str, bool] = {}
        self.started = threading.Event()

    def describe(self):
        return EngineDescription("test-engine", "0.1", self.models, limits=self.limits)

    def attach(self, engine):
        self.engine = engine

    async def generate(self, request):
        if self.refuse is not None:
            raise self.refuse
        self.running[request.request_id] = True
        try:
            if self.script is not None:
                for output in self.script(request):
                    if isinstance(output, Exception):
                        raise output
                    yield output
                return
            for index in range(request.sequences):
                yield Chunk((65,), text="A", index=index)
            self.started.set()
            while self.hold and self.running[request.request_id]:
                await asyncio.sleep(0.005)
            for index in range(request.sequences):
                yield Final(FinishReason.LENGTH, token_ids=(66,), text="B", index=index, **OK_FINAL)
        finally:
            del self.running[request.request_id]

    async def abort(self, request_id, reason):
        self.aborts.append((request_id, reason))
        if request_id in self.running:
            self.running[request_id] = False

    def load(self):
        return self.figures or Load(running_requests=len(self.running))


class WithLoras(Backend):
    """Serves Control's LoRA RPCs itself (openengine.adapters), listed by its model."""

    def __init__(self):
        super().__init__(models=(Model("m", 512, 64, TEXT, profiles=("adapters",)),))

    def services(self):
        return {"openengine.v1.Control": self}

    async def LoadLora(self, request, context):
        return lora_pb2.LoadLoraResponse(adapter=request.adapter)

    async def UnloadLora(self, request, context):
        raise Refusal(RefusalCode.NOT_FOUND, f"lora_name: no adapter {request.lora_name!r}")

    async def ListLoras(self, request, context):
        return lora_pb2.ListLorasResponse(adapters=[lora_pb2.LoraAdapter(lora_id=1, lora_name="a")])


def running(backend, **config) -> RunningServer:
    return RunningServer(lambda: backend, ServeConfig(port=0, **config))


def generate(address, metadata=(), **fields):
    fields.setdefault("prompt", "hi")
    with grpc.insecure_channel(address) as channel:
        return list(inference_grpc.InferenceStub(channel).Generate(
            generation_pb2.GenerateRequest(**fields), metadata=metadata, timeout=10))


def refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def test_what_a_backend_does_not_state_is_not_advertised():
    server = Server(Backend())
    assert [p.name for p in server.state.advertised] == ["openengine.core", "openengine.load"]
    left_out = server.state.selection.left_out
    assert any(r.startswith("openengine.admin needs openengine.v1.Admin/Drain") for r in left_out)
    core = server.state.selection.limits["openengine.core"]
    assert (core["max_logprobs"], core["output_logprobs"], core["prompt_logprobs"], core["max_sequences"]) == \
        (0, False, False, 1)
    stated = Server(Backend(limits={"core": {"max_logprobs": 5, "output_logprobs": True}})).state.selection.limits
    assert (stated["openengine.core"]["max_logprobs"], stated["openengine.core"]["output_logprobs"]) == (5, True)


def test_what_cannot_be_served_is_refused_at_start_naming_it():
    with pytest.raises(CannotServe) as cannot:
        Server(Backend(limits={"core": {"max_sequences": "many", "no_such_limit": 1}}),
               ServeConfig(profiles=("admin", "no-such")))
    text = str(cannot.value)
    assert "openengine.admin needs openengine.v1.Admin/Drain" in text and "'no-such' is not a profile" in text
    assert "openengine.core.max_sequences takes an integer" in text
    assert "openengine.core has no limit 'no_such_limit'" in text


def test_control_and_discovery_answer_from_the_same_limits():
    limits = {"core": {"max_logprobs": 4, "output_logprobs": True, "max_sequences": 2, "max_running_requests": 8,
                       "guided_decoding_modes": ["regex"]}}
    with running(Backend(limits=limits)) as engine, grpc.insecure_channel(engine.address) as channel:
        control = control_grpc.ControlStub(channel)
        info = control.GetServerInfo(server_pb2.GetServerInfoRequest())
        model = control.GetModelInfo(model_pb2.GetModelInfoRequest())
        caps = discovery_grpc.DiscoveryStub(channel).GetCapabilities(discovery_pb2.GetCapabilitiesRequest())
        unknown = refused(lambda: control.GetModelInfo(model_pb2.GetModelInfoRequest(model="other")))
        health = control.Health(lifecycle_pb2.HealthRequest(include_inference_probe=True))
    assert (info.schema_revision, info.minimum_client_revision) == (2, 1)
    assert info.schema_release.startswith("openengine-profiles/registry-")
    assert info.engine_role == server_pb2.ENGINE_ROLE_AGGREGATED and info.supported_models == ["m"]
    assert info.capacity.max_running_requests == caps.core.max_running_requests == 8
    assert info.capability_revision == caps.revision == 1
    generation = model.generation
    assert generation.output_logprobs.supported and generation.output_logprobs.max_top_n == caps.core.max_logprobs
    assert not generation.prompt_logprobs.supported
    assert generation.max_num_sequences == caps.core.max_sequences == 2
    assert list(generation.guided_decoding.modes) == [model_pb2.GUIDED_DECODING_MODE_REGEX]
    assert (model.model_id, model.vocab_size, model.eos_token_id, model.max_output_tokens) == ("m", 256, 0, 64)
    assert unknown.code() == grpc.StatusCode.NOT_FOUND
    assert health.state == lifecycle_pb2.HEALTH_STATE_READY
    assert [(c.name, c.state) for c in health.checks] == \
        [("scheduler", health.state), ("inference_probe", health.state)]


def test_control_dispatches_per_rpc_to_the_sdk_and_the_backend():
    with running(Backend()) as plain, grpc.insecure_channel(plain.address) as channel:
        missing = refused(lambda: control_grpc.ControlStub(channel).ListLoras(lora_pb2.ListLorasRequest()))
    assert missing.code() == grpc.StatusCode.UNIMPLEMENTED and "openengine.adapters" in missing.details()
    with running(WithLoras()) as engine, grpc.insecure_channel(engine.address) as channel:
        control = control_grpc.ControlStub(channel)
        assert [a.lora_name for a in control.ListLoras(lora_pb2.ListLorasRequest()).adapters] == ["a"]
        gone = refused(lambda: control.UnloadLora(lora_pb2.UnloadLoraRequest(lora_name="x")))
        assert gone.code() == grpc.StatusCode.NOT_FOUND and "no adapter 'x'" in gone.details()
        assert control.GetModelInfo(model_pb2.GetModelInfoRequest(model="m")).supports_lora
        caps = discovery_grpc.DiscoveryStub(channel).GetCapabilities(discovery_pb2.GetCapabilitiesRequest())
    assert [(m.model, [p.name for p in m.profiles], m.adapters.max_loras) for m in caps.models] == \
        [("m", ["openengine.adapters"], 1)]


def test_generate_streams_upstream_events_with_usage_on_the_last_only():
    with running(Backend(limits={"core": {"max_sequences": 2}})) as engine:
        out = generate(engine.address, request_id="r-1", sampling=generation_pb2.SamplingParams(num_sequences=2))
    assert {m.request_id for m in out} == {"r-1"}
    assert [(m.WhichOneof("event"), m.HasField("usage")) for m in out] == \
        [("token", False)] * 3 + [("finished", False), ("token", False), ("finished", True)]
    first = out[0].token
    assert first.HasField("output_index") and first.output_index == 0
    assert [(t.token_id, t.token) for t in first.tokens] == [(65, "A")] and first.text == "A"
    assert out[-1].finished.output_index == 1 and out[-1].finished.reason == generation_pb2.FINISH_REASON_LENGTH
    assert (out[-1].usage.prompt_tokens, out[-1].usage.completion_tokens, out[-1].usage.total_tokens) == (2, 4, 6)


def test_admission_refuses_what_is_not_advertised_and_malformed_metadata():
    with running(Backend()) as engine:
        for fields, metadata, code, says in [
            (dict(model="other"), (), grpc.StatusCode.NOT_FOUND, "no served model 'other'"),
            (dict(sampling=generation_pb2.SamplingParams(num_sequences=2)), (), grpc.StatusCode.INVALID_ARGUMENT,
             "num_sequences"),
            (dict(response=generation_pb2.ResponseOptions(return_output_logprobs=True)), (),
             grpc.StatusCode.INVALID_ARGUMENT, "output_logprobs"),
            ({}, (("openengine-priority", "high"),), grpc.StatusCode.INVALID_ARGUMENT, "openengine-priority"),
            ({}, (("openengine-priority", "1"), ("openengine-priority", "2")), grpc.StatusCode.INVALID_ARGUMENT,
             "more than once"),
        ]:
            err = refused(lambda: generate(engine.address, metadata, **fields))
            assert err.code() == code and says in err.details(), err.details()


def test_priority_metadata_reaches_the_backend_when_advertised():
    seen = []

    def script(request):
        seen.append(request.priority)
        return [Final(FinishReason.LENGTH, prompt_tokens=2, completion_tokens=0)]

    with running(Backend(limits={"core": {"priority": True}}, script=script)) as engine:
        generate(engine.address, (("openengine-priority", "-7"),))
    assert seen == [-7]


def test_logprobs_and_prompt_information_are_merged_into_token_info():
    def script(request):
        yield Prompt((TokenInfo(token_id=104), TokenInfo(token_id=105, logprob=-1.5)))
        yield Chunk((65, 66), text="AB", logprobs=(TokenInfo(logprob=-0.1, rank=1),
                                                  TokenInfo(logprob=-0.2, rank=2, candidates=[{"token_id": 67}])))
        yield Final(FinishReason.STOP, prompt_tokens=2, completion_tokens=3, token_ids=(0,),
                    stop_match=StopMatch(eos_token_id=0), logprobs=(TokenInfo(logprob=-0.3),))

    limits = {"core": {"max_logprobs": 2, "output_logprobs": True, "prompt_logprobs": True}}
    with running(Backend(limits=limits, script=script)) as engine:
        out = generate(engine.address, response=generation_pb2.ResponseOptions(
            return_output_logprobs=True, return_prompt_logprobs=True))
        bare = generate(engine.address, skip_detokenize=True)
    assert [t.token for t in out[0].prompt.tokens] == ["h", "i"]
    tokens = out[1].token.tokens
    assert [(t.token_id, t.token, t.logprob, t.rank) for t in tokens] == [(65, "A", -0.1, 1), (66, "B", -0.2, 2)]
    assert tokens[1].candidates[0].token == "C"
    assert out[-1].finished.stop_match.eos_token_id == 0 and out[-1].usage.completion_tokens == 3
    assert all(not t.token for t in bare[1].token.tokens) and bare[1].token.text == ""


def test_a_prefill_request_ends_with_prefill_ready():
    session = kv_pb2.KvSessionRef(session_id="kv-1", transfer_backend="nixl")

    def script(request):
        return [Final(FinishReason.LENGTH, prompt_tokens=2, completion_tokens=1, token_ids=(65,),
                      kv_session=session)]

    with running(Backend(script=script)) as engine:
        out = generate(engine.address)
    assert [m.WhichOneof("event") for m in out] == ["token", "prefill_ready"]
    assert out[-1].prefill_ready.kv_session.session_id == "kv-1" and out[-1].usage.total_tokens == 3


def test_a_backend_refusal_before_output_is_the_calls_status():
    backend = Backend(refuse=Refusal(RefusalCode.UNIMPLEMENTED, "guided: regex is not supported here"))
    with running(backend) as engine:
        err = refused(lambda: generate(engine.address))
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED and "regex" in err.details()


@pytest.mark.parametrize("outputs, code, says", [
    ([Chunk((65,)), RuntimeError("device lost")], error_pb2.ERROR_CODE_INTERNAL, "RuntimeError"),
    ([Chunk((65,)), Failure(ErrorCode.KV_TRANSFER_FAILED, "the KV transfer failed", retryable=True)],
     error_pb2.ERROR_CODE_KV_TRANSFER_FAILED, "KV transfer failed"),
    ([Chunk((65,))], error_pb2.ERROR_CODE_INTERNAL, "output(s) 0 unfinished"),
    ([Chunk((65,)), Final(FinishReason.STOP, prompt_tokens=1, completion_tokens=5)], error_pb2.ERROR_CODE_INTERNAL,
     "Backend.generate(): Final.completion_tokens is 5, but 1 tokens were sent"),
    ([Chunk((65,)), Chunk((66,), index=3)], error_pb2.ERROR_CODE_INTERNAL, "Chunk.index is 3"),
    ([Chunk((65,)), Final(FinishReason.LENGTH, prompt_tokens=1, completion_tokens=1,
                          stop_match=StopMatch(stop_text="x"))],
     error_pb2.ERROR_CODE_INTERNAL, "Final.stop_match is set with finish_reason LENGTH"),
])
def test_a_failure_after_acceptance_is_the_streams_terminal_error(outputs, code, says):
    with running(Backend(script=lambda request: outputs)) as engine:
        out = generate(engine.address)
    assert out[0].WhichOneof("event") == "token"
    last = out[-1]
    assert last.WhichOneof("event") == "error" and last.error.code == code and says in last.error.message
    assert last.HasField("usage") and last.usage.completion_tokens >= 1


def test_abort_ends_open_outputs_cancelled_and_reaches_the_backend():
    backend = Backend(hold=True)
    with running(backend) as engine, grpc.insecure_channel(engine.address) as channel:
        stream = inference_grpc.InferenceStub(channel).Generate(
            generation_pb2.GenerateRequest(prompt="hi", request_id="r-1"), timeout=10)
        assert next(stream).WhichOneof("event") == "token"
        control = control_grpc.ControlStub(channel)
        answer = control.Abort(lifecycle_pb2.AbortRequest(request_id="r-1"))
        rest = list(stream)
        again = control.Abort(lifecycle_pb2.AbortRequest(request_id="r-1"))
        unknown = refused(lambda: control.Abort(lifecycle_pb2.AbortRequest(request_id="nobody")))
        untargeted = refused(lambda: control.Abort(lifecycle_pb2.AbortRequest()))
    assert answer.status == lifecycle_pb2.ABORT_STATUS_ABORTED
    assert [m.WhichOneof("event") for m in rest] == ["finished"]
    assert rest[0].finished.reason == generation_pb2.FINISH_REASON_CANCELLED and rest[0].usage.completion_tokens == 1
    assert again.status == lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED
    assert unknown.code() == grpc.StatusCode.NOT_FOUND and untargeted.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert backend.aborts == [("r-1", AbortReason.ABORT_RPC)]


class Queueing(Backend):
    """Holds every request in its queue, with no output, until it is aborted."""

    def __init__(self):
        super().__init__()
        self.queued = threading.Event()
        self.left_queue: list[str] = []

    async def generate(self, request):
        self.queued.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.left_queue.append(request.request_id)
        yield Chunk((65,), text="A")   # never reached


def test_abort_all_ends_a_request_the_backend_has_not_started_at_once():
    backend = Queueing()
    with running(backend) as engine, grpc.insecure_channel(engine.address) as channel:
        stream = inference_grpc.InferenceStub(channel).Generate(
            generation_pb2.GenerateRequest(prompt="hi", request_id="q-1"), timeout=10)
        assert backend.queued.wait(10)
        answer = control_grpc.ControlStub(channel).Abort(lifecycle_pb2.AbortRequest(
            all_requests=lifecycle_pb2.AllRequests()))
        out = list(stream)
    assert answer.status == lifecycle_pb2.ABORT_STATUS_ABORTED and "1 request" in answer.message
    assert [(m.WhichOneof("event"), m.finished.reason) for m in out] == \
        [("finished", generation_pb2.FINISH_REASON_CANCELLED)]
    assert backend.left_queue == ["q-1"] and backend.aborts == [("q-1", AbortReason.ABORT_RPC)]


def test_a_client_that_goes_away_has_its_request_aborted_in_the_backend():
    backend = Backend(hold=True)
    with running(backend) as engine, grpc.insecure_channel(engine.address) as channel:
        stream = inference_grpc.InferenceStub(channel).Generate(
            generation_pb2.GenerateRequest(prompt="hi", request_id="r-2"))
        assert next(stream).WhichOneof("event") == "token"
        stream.cancel()
        load = control_grpc.ControlStub(channel).GetLoad
        for _ in range(200):
            if load(server_pb2.GetLoadRequest()).running_requests == 0:
                break
            threading.Event().wait(0.01)
    assert backend.aborts == [("r-2", AbortReason.CLIENT_CANCELLED)] and backend.running == {}


def test_a_stalled_consumer_is_aborted_and_leaves_the_load():
    from openengine.serve.generate import Inference
    from openengine.serve.state import InFlight

    async def scenario():
        server = Server(Backend())
        state = server.state
        inference = next(s for s in server.services.values() if isinstance(s, Inference))
        loop = asyncio.get_running_loop()
        fresh, stuck = (InFlight(inference.admission.admit(generation_pb2.GenerateRequest(prompt="x", request_id=rid)))
                        for rid in ("fresh", "stuck"))
        state.in_flight.update(fresh=fresh, stuck=stuck)
        stuck.writing_since = loop.time() - 1.0
        fresh.writing_since = loop.time()
        watch = asyncio.ensure_future(inference.watch_stalls(0.2))
        await asyncio.sleep(0.12)
        watch.cancel()
        return state, stuck

    state, stuck = asyncio.run(scenario())
    assert list(state.in_flight) == ["fresh"] and stuck.aborted is AbortReason.STALLED_CONSUMER


@pytest.mark.parametrize("figures, says", [
    (Load(running_requests=-5), "Backend.load(): Load.running_requests is -5; load figures are never negative"),
    (Load(running_requests=300),
     "Backend.load(): Load.running_requests is 300, above the advertised max_running_requests 256"),
])
def test_wrong_load_figures_answer_internal_naming_them_and_are_logged_once(figures, says, caplog):
    with running(Backend(load=figures)) as engine, grpc.insecure_channel(engine.address) as channel:
        control = control_grpc.ControlStub(channel)
        with caplog.at_level(logging.ERROR, logger="openengine.serve"):
            errors = [refused(lambda: control.GetLoad(server_pb2.GetLoadRequest())) for _ in range(3)]
    assert {(e.code(), e.details()) for e in errors} == {(grpc.StatusCode.INTERNAL, f"engine error in {says}")}
    logged = [r for r in caplog.records if "Backend.load()" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is None


def test_interceptors_and_a_state_listener_see_the_server():
    class Counting(grpc.aio.ServerInterceptor):
        methods: list[str] = []

        async def intercept_service(self, continuation, details):
            self.methods.append(details.method)
            return await continuation(details)

    class Listening(Backend, StateListener):
        heard: list = []

        def state_changed(self, previous, current, reason):
            self.heard.append((current.name, reason))

        def revision_changed(self, previous, revision, changed):
            pass

    backend = Listening()
    with running(backend, interceptors=(Counting(),)) as engine:
        generate(engine.address)
    assert "/openengine.v1.Inference/Generate" in Counting.methods
    assert backend.heard == [("ENGINE_STATE_STOPPING", "shutdown")]


def test_a_repeated_cause_is_logged_once_per_interval_with_its_count(caplog, monkeypatch):
    from openengine.serve import wire_policy as wire

    now = [0.0]
    monkeypatch.setattr(wire.time, "monotonic", lambda: now[0])
    counter = wire.CauseCounter()
    with caplog.at_level(logging.DEBUG, logger="openengine.serve"):
        for i in range(50):
            counter.record("some cause", f"request {i}")
        now[0] = wire.LOG_INTERVAL_S + 1
        counter.record("some cause", "request 50")
        counter.record("other cause", "x")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3 and "request 0" in messages[0]
    assert "50 more, 51 in total" in messages[1] and "request 50" in messages[1]
    assert counter.counts == {"some cause": 51, "other cause": 1}


def test_a_stop_token_kept_out_of_the_output_is_withheld_and_counted():
    def script(request):
        return [Chunk((65,), text="A"), Final(FinishReason.STOP, prompt_tokens=2, completion_tokens=2, token_ids=(7,),
                                              stop_match=StopMatch(stop_token_id=7))]

    with running(Backend(script=script)) as engine:
        out = generate(engine.address)
        kept = generate(engine.address, stopping=generation_pb2.StoppingOptions(include_stop_in_output=True))
    assert [[t.token_id for t in m.token.tokens] for m in out if m.HasField("token")] == [[65]]
    assert out[-1].finished.stop_match.stop_token_id == 7 and out[-1].usage.completion_tokens == 2
    assert [[t.token_id for t in m.token.tokens] for m in kept if m.HasField("token")] == [[65], [7]]


def test_log_probabilities_advertised_and_asked_for_must_be_delivered():
    limits = {"core": {"max_logprobs": 2, "output_logprobs": True, "prompt_logprobs": True}}
    outputs = [Chunk((65,), text="A"), Final(FinishReason.LENGTH, prompt_tokens=2, completion_tokens=1)]
    with running(Backend(limits=limits, script=lambda request: outputs)) as engine:
        output = generate(engine.address, response=generation_pb2.ResponseOptions(return_output_logprobs=True))
        prompt = generate(engine.address, response=generation_pb2.ResponseOptions(return_prompt_logprobs=True))
    assert [m.WhichOneof("event") for m in output] == ["error"]
    assert "Chunk.logprobs has 0 entries for 1 tokens; the request asked for output log-probabilities" in \
        output[0].error.message
    assert "Prompt is missing" in prompt[0].error.message


@pytest.mark.parametrize("reason, code", [(AbortReason.PAUSED, error_pb2.ERROR_CODE_OVERLOADED),
                                          (AbortReason.DRAIN_DEADLINE, error_pb2.ERROR_CODE_DRAINING)])
def test_a_request_the_engine_stops_ends_with_a_retryable_error(reason, code):
    backend = Backend(hold=True)
    with running(backend) as engine, grpc.insecure_channel(engine.address) as channel:
        stream = inference_grpc.InferenceStub(channel).Generate(generation_pb2.GenerateRequest(prompt="hi"), timeout=10)
        assert next(stream).WhichOneof("event") == "token"

        async def stop():
            engine.server.state.abort_all(reason)

        asyncio.run_coroutine_threadsafe(stop(), engine.loop).result(5)
        rest = list(stream)
    assert [(m.error.code, m.error.retryable, m.usage.completion_tokens) for m in rest] == [(code, True, 1)]


def test_abort_ends_the_stream_at_once_even_when_the_backend_is_slow_to_stop():
    class Slow(Backend):
        async def generate(self, request):
            yield Chunk((65,), text="A")
            await asyncio.sleep(30)   # a long step that does not look at abort
            yield Final(FinishReason.LENGTH, prompt_tokens=2, completion_tokens=2, token_ids=(66,))

    backend = Slow()
    with running(backend) as engine, grpc.insecure_channel(engine.address) as channel:
        stream = inference_grpc.InferenceStub(channel).Generate(
            generation_pb2.GenerateRequest(prompt="hi", request_id="slow"), timeout=10)
        assert next(stream).WhichOneof("event") == "token"
        control_grpc.ControlStub(channel).Abort(lifecycle_pb2.AbortRequest(request_id="slow"), timeout=5)
        rest = list(stream)
    assert [(m.finished.reason, m.usage.completion_tokens) for m in rest] == \
        [(generation_pb2.FINISH_REASON_CANCELLED, 1)]
    assert backend.aborts == [("slow", AbortReason.ABORT_RPC)]
