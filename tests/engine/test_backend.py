"""The reference backend as the SDK sees it, driven through its public interface alone: what it
yields for a request (tokens, stop rules, logprobs, outputs, the prefill handoff), what it
refuses, and the Control RPCs it serves itself (LoRA, KV events). No server: a small engine handle
stands in for the SDK, so these run in milliseconds."""

from __future__ import annotations

import asyncio

import pytest

from openengine.contract import catalogue
from openengine.engine import EngineConfig, ReferenceBackend
from openengine.engine import model as stand_in
from openengine.serve import AbortReason, Chunk, Final, FinishReason, GenerateRequest, Prompt, Refusal, RefusalCode
from openengine.v1 import generation_pb2 as g
from openengine.v1 import kv_pb2, lora_pb2

MODEL = "reference-byte-model"


class Handle:
    """The engine handle of a server advertising `profiles` with the backend's declared limits."""

    def __init__(self, backend: ReferenceBackend, profiles: set[str]):
        cat = catalogue()
        declared = backend.describe().limits
        self.profiles = profiles | {"openengine.core"}
        self.limits = {p.name: {**p.defaults(), **declared.get(p.name, {})} for p in cat.profiles}
        self.changes = 0

    instance_id, address, revision, accepting = "ref-test", "127.0.0.1:50999", 1, True

    def load_changed(self):
        self.changes += 1

    def has(self, profile):
        return profile in self.profiles

    def limit(self, profile, name):
        return self.limits[profile][name]

    def model_limit_values(self, model, profile):
        return self.limits[profile]

    def served_model(self, name, field="model"):
        return name or MODEL

    def lists(self, model, profile):
        return profile in self.profiles

    def preflight(self, message, model):
        pass


def backend(*profiles: str, **config) -> ReferenceBackend:
    config.setdefault("token_delay_ms", 0)
    b = ReferenceBackend(EngineConfig(**config))
    b.attach(Handle(b, set(profiles)))
    return b


def request(prompt="hello", rid="r1", **fields) -> GenerateRequest:
    return GenerateRequest(rid, MODEL, g.GenerateRequest(request_id=rid, prompt=prompt, **fields))


def run(b: ReferenceBackend, req: GenerateRequest) -> list:
    async def collect():
        return [out async for out in b.generate(req)]
    return asyncio.run(collect())


def by_output(outputs) -> dict[int, tuple[list[int], str, Final]]:
    """index -> (every token id, the text, its Final)."""
    out: dict[int, tuple[list[int], str, Final]] = {}
    for o in outputs:
        if isinstance(o, (Chunk, Final)):
            ids, text, _ = out.get(o.index, ([], "", None))
            out[o.index] = (ids + list(o.token_ids), text + o.text, o if isinstance(o, Final) else None)
    return out


def stopping(**kw) -> g.StoppingOptions:
    stops = [g.StopCondition(stop_text=s) for s in kw.pop("texts", ())]
    stops += [g.StopCondition(stop_token_id=t) for t in kw.pop("tokens", ())]
    return g.StoppingOptions(conditions=stops, **kw)


def test_max_tokens_every_token_once_and_usage_that_counts_them():
    b = backend()
    ids, text, final = by_output(run(b, request(stopping=stopping(max_tokens=8))))[0]
    assert len(ids) == final.completion_tokens == 8 and final.prompt_tokens == 5
    assert final.finish_reason == FinishReason.LENGTH and final.stop_match is None
    assert text == stand_in.detokenize(ids)
    assert not b.scheduler.in_flight()


def test_output_is_a_pure_function_of_prompt_and_seed():
    def tokens(prompt, seed):
        sampling = g.SamplingParams(seed=seed, temperature=0.8)
        return by_output(run(backend(), request(prompt, sampling=sampling, stopping=stopping(max_tokens=10))))[0][0]
    assert tokens("abc", 7) == tokens("abc", 7)
    assert tokens("abc", 7) != tokens("abc", 8) and tokens("abc", 7) != tokens("abd", 7)


def test_every_output_ends_once_with_its_own_index():
    outputs = run(backend(), request(sampling=g.SamplingParams(num_sequences=3, seed=1, temperature=1.0),
                                     stopping=stopping(max_tokens=6)))
    finals = [o for o in outputs if isinstance(o, Final)]
    assert sorted(f.index for f in finals) == [0, 1, 2]
    assert all(o.index not in {f.index for f in finals[:i]} for i, f in enumerate(finals)
               for o in outputs[outputs.index(f) + 1:] if isinstance(o, Chunk))


def test_stop_text_ends_the_output_with_its_match_and_keeps_it_only_when_asked():
    free = by_output(run(backend(), request("xyz", stopping=stopping(max_tokens=40))))[0][1]
    stop = free[10:12]
    cut = free[:free.index(stop)]
    ids, text, final = by_output(run(backend(), request("xyz", stopping=stopping(max_tokens=40, texts=[stop]))))[0]
    assert final.finish_reason == FinishReason.STOP and final.stop_match.stop_text == stop
    assert text == cut and len(ids) == final.completion_tokens == len(cut) + len(stop)
    kept = by_output(run(backend(), request("xyz", stopping=stopping(max_tokens=40, texts=[stop],
                                                                      include_stop_in_output=True))))[0][1]
    assert kept == cut + stop


def test_stop_token_eos_and_ignore_eos():
    free = by_output(run(backend(), request("xyz", stopping=stopping(max_tokens=40))))[0][0]
    token = free[5]
    ids, text, final = by_output(run(backend(), request("xyz", stopping=stopping(max_tokens=40, tokens=[token]))))[0]
    assert final.stop_match.stop_token_id == token and ids == free[:free.index(token)]
    assert text == stand_in.detokenize(ids) and final.completion_tokens == len(ids) + 1
    ids, text, _ = by_output(run(backend(), request("xyz", stopping=stopping(max_tokens=40, tokens=[token],
                                                                           include_stop_in_output=True))))[0]
    assert ids == free[:free.index(token) + 1] and text == stand_in.detokenize(ids)
    choice = g.GuidedDecoding(choice=g.ChoiceConstraint(choices=["yes"]))
    ids, text, final = by_output(run(backend(), request("pick", guided=choice, stopping=stopping(max_tokens=20))))[0]
    assert text == "yes" and ids[-1] == stand_in.EOS_TOKEN_ID and final.stop_match.eos_token_id == stand_in.EOS_TOKEN_ID
    ids, _, final = by_output(run(backend(), request("pick", guided=choice,
                                                     stopping=stopping(max_tokens=9, ignore_eos=True))))[0]
    assert len(ids) == 9 and stand_in.EOS_TOKEN_ID not in ids and final.finish_reason == FinishReason.LENGTH
    ids, _, final = by_output(run(backend(), request("pick", guided=choice,
                                                     stopping=stopping(max_tokens=20, min_tokens=6))))[0]
    assert len(ids) >= 6 and stand_in.EOS_TOKEN_ID not in ids[:6]


def test_logprobs_one_record_per_token_with_the_candidates_asked_and_prompt_logprobs_first():
    response = g.ResponseOptions(return_output_logprobs=True, output_candidates=g.CandidateTokenSelection(top_n=3),
                                 return_prompt_logprobs=True, prompt_candidates=g.CandidateTokenSelection(top_n=2))
    outputs = run(backend(), request("hello", response=response, stopping=stopping(max_tokens=4)))
    prompt = outputs[0]
    assert isinstance(prompt, Prompt) and [t.token_id for t in prompt.tokens] == list(b"hello")
    assert not prompt.tokens[0].HasField("logprob") and not prompt.tokens[0].candidates
    assert all(t.rank == 1 and len(t.candidates) == 2 for t in prompt.tokens[1:])
    records = [info for o in outputs[1:] for info in o.logprobs]
    assert [r.token_id for r in records] == by_output(outputs)[0][0]
    for r in records:
        assert [c.rank for c in r.candidates] == [1, 2, 3] and r.candidates[0].token_id == r.token_id
        assert r.logprob == r.candidates[0].logprob > r.candidates[1].logprob >= r.candidates[2].logprob
    plain = run(backend(), request("hello", stopping=stopping(max_tokens=4)))
    assert not any(isinstance(o, Prompt) or o.logprobs for o in plain)


def test_what_only_the_engine_knows_is_refused_before_the_first_output():
    b = backend("openengine.sessions", "openengine.adapters")
    cases = {"session_id": request(session_id="nope"), "lora_name": request(lora_name="missing"),
             "stopping.max_tokens": request(stopping=stopping(max_tokens=5000)),
             "prompt": request("")}
    for field, req in cases.items():
        with pytest.raises(Refusal) as refused:
            run(b, req)
        assert refused.value.message.startswith(field), refused.value.message
    assert not b.scheduler.in_flight()


def test_prefill_hands_over_a_kv_session_and_decode_continues_from_it():
    prefill = backend("openengine.kv", role="prefill")
    outputs = run(prefill, request("a prompt long enough for two blocks of KV", stopping=stopping(max_tokens=8),
                                   sampling=g.SamplingParams(num_sequences=2)))
    assert [o.index for o in outputs] == [0, 1] and outputs[0].kv_session == outputs[1].kv_session
    final = outputs[-1]
    assert isinstance(final, Final) and final.completion_tokens == 0 and not final.token_ids
    session = final.kv_session
    assert session.session_id and session.transfer_backend == "nixl"
    assert (session.endpoints[0].host, session.endpoints[0].port) == ("127.0.0.1", 50999)
    decode = backend("openengine.kv", role="decode")
    ids, _, final = by_output(run(decode, request("a prompt long enough for two blocks of KV",
                                                  kv=g.KvOptions(session=session), stopping=stopping(max_tokens=5))))[0]
    assert len(ids) == 5 and final.cached_prompt_tokens == final.prompt_tokens


def test_the_scheduler_runs_at_most_max_running_requests_and_an_abort_ends_a_queued_one():
    b = backend(limits={"core": {"max_running_requests": 1}}, token_delay_ms=5)

    async def main():
        first = asyncio.ensure_future(_collect(b, request(rid="a", stopping=stopping(max_tokens=20))))
        second = asyncio.ensure_future(_collect(b, request(rid="b", stopping=stopping(max_tokens=20))))
        await asyncio.sleep(0.02)
        load = b.load()
        await b.abort("b", AbortReason.ABORT_RPC)
        return load, await first, await second
    load, first, second = asyncio.run(main())
    assert (load.ranks[0].running_requests, load.ranks[0].queued_requests) == (1, 1)
    assert isinstance(first[-1], Final) and second == []
    assert b.load().ranks[0].running_requests == 0


async def _collect(b, req):
    return [o async for o in b.generate(req)]


def test_lora_lifecycle_as_upstream_defines_it():
    b = backend("openengine.adapters")
    control = b.services()["openengine.v1.Control"]

    def call(method, **fields):
        message = {"LoadLora": lora_pb2.LoadLoraRequest, "UnloadLora": lora_pb2.UnloadLoraRequest,
                   "ListLoras": lora_pb2.ListLorasRequest}[method](**fields)
        return asyncio.run(getattr(control, method)(message, None))

    adapter = lora_pb2.LoraAdapter(lora_id=7, lora_name="sql", source_path="/adapters/sql")
    assert not call("LoadLora", adapter=adapter).already_loaded
    assert call("LoadLora", adapter=adapter).already_loaded
    for clash in (dict(lora_id=7, lora_name="other", source_path="/adapters/other"),
                  dict(lora_id=8, lora_name="sql", source_path="/adapters/other"),
                  dict(lora_id=9, lora_name="x", source_path="/adapters/sql")):
        with pytest.raises(Refusal) as refused:
            call("LoadLora", adapter=lora_pb2.LoraAdapter(**clash))
        assert refused.value.code is RefusalCode.ALREADY_EXISTS
    for bad in (dict(lora_id=0, lora_name="a", source_path="/a"), dict(lora_id=1, lora_name="", source_path="/a"),
                dict(lora_id=1, lora_name="a", source_path="relative")):
        with pytest.raises(Refusal) as refused:
            call("LoadLora", adapter=lora_pb2.LoraAdapter(**bad))
        assert refused.value.code is RefusalCode.INVALID_ARGUMENT
    assert list(call("ListLoras").adapters) == [adapter]
    ids = by_output(run(b, request(lora_name="sql", stopping=stopping(max_tokens=6))))[0][0]
    assert ids != by_output(run(b, request(stopping=stopping(max_tokens=6))))[0][0]
    assert call("UnloadLora", lora_name="sql").adapter == adapter
    with pytest.raises(Refusal) as refused:
        call("UnloadLora", lora_name="sql")
    assert refused.value.code is RefusalCode.NOT_FOUND


def test_kv_events_tell_what_the_cache_stored_and_replay_from_a_sequence_number():
    b = backend("openengine.kv", role="prefill")
    control = b.services()["openengine.v1.Control"]
    sources = asyncio.run(control.GetKvEventSources(kv_pb2.GetKvEventSourcesRequest(), None)).sources
    assert [(s.transport, s.endpoint_addr.host, s.data_parallel_rank) for s in sources] == [("grpc", "127.0.0.1", 0)]

    async def main():
        stream = control.SubscribeKvEvents(kv_pb2.SubscribeKvEventsRequest(), None)
        first = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)
        await _collect(b, request("x" * 40, rid="kv-1"))
        live = await first
        await stream.aclose()
        replay = control.SubscribeKvEvents(kv_pb2.SubscribeKvEventsRequest(start_sequence_number=1), None)
        again = await anext(replay)
        await replay.aclose()
        return live, again
    live, again = asyncio.run(main())
    event = live.batch.events[0]
    assert live.batch.sequence_number == 1 and event.request_id == "kv-1"
    assert len(event.block_stored.block_hashes) == 40 // b.kv_block_size
    assert again == live
