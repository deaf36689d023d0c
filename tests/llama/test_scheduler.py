"""The continuous-batching scheduler on the tiny model, driven directly (no server).

The yardstick is llama.cpp itself, called through llama-cpp-python's high-level `Llama` with
the same prompt, seed and sampling: a request's tokens must be the ones llama.cpp chooses alone,
whatever else runs beside it. Random weights emit byte tokens that are not valid UTF-8, so tokens
are compared as ids."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from openengine.llama.scheduler import (
    Emitted, Errored, Finished, Sampling, Scheduler, SchedulerConfig, SequenceRequest, Started,
)
from openengine.serve import FinishReason, StopMatch
from openengine.v1.generation_pb2 import StoppingOptions

GREEDY = Sampling(temperature=0.0)


class Collector:
    """The scheduler's `emit`: every event, per request, and a way to wait for them."""

    def __init__(self):
        self.events: dict[str, list] = defaultdict(list)
        self.changed = threading.Condition()

    def __call__(self, events) -> None:
        with self.changed:
            for event in events:
                self.events[event.request_id].append(event)
            self.changed.notify_all()

    def wait(self, predicate, timeout: float = 30.0):
        with self.changed:
            assert self.changed.wait_for(predicate, timeout), "the scheduler did not get there in time"

    def finished(self, request_id: str) -> Finished:
        self.wait(lambda: any(isinstance(e, (Finished, Errored)) for e in self.events[request_id]))
        last = self.events[request_id][-1]
        assert isinstance(last, Finished), last
        return last

    def tokens(self, request_id: str) -> list[int]:
        with self.changed:
            return [t for e in self.events[request_id] if isinstance(e, (Emitted, Finished))
                    for t in e.token_ids]

    def text(self, request_id: str) -> str:
        with self.changed:
            return "".join(e.text for e in self.events[request_id] if isinstance(e, (Emitted, Finished)))


@pytest.fixture
def collector():
    return Collector()


@pytest.fixture
def make_scheduler(tiny_model, collector):
    made = []

    def make(**config) -> Scheduler:
        scheduler = Scheduler(tiny_model, SchedulerConfig(**{"threads": 1, **config}), collector)
        made.append(scheduler)
        return scheduler
    yield make
    for scheduler in made:
        scheduler.close()


PROMPTS = ["hello engine", "the model says", "open stream of tokens", "conformance request"]


def request(tiny_model, request_id: str, prompt: str, max_tokens: int = 24, *, sampling=GREEDY, stop=(),
            stop_token_ids=(), ignore_eos=True, min_tokens=0, include_stop_in_output=False,
            **fields) -> SequenceRequest:
    conditions = [{"stop_text": s} for s in stop] + [{"stop_token_id": t} for t in stop_token_ids]
    return SequenceRequest(request_id, tuple(tiny_model.tokenize(prompt)), max_tokens, sampling=sampling,
                           stopping=StoppingOptions(conditions=conditions, ignore_eos=ignore_eos, min_tokens=min_tokens,
                                                    include_stop_in_output=include_stop_in_output), **fields)


def test_a_greedy_request_gets_llama_cpps_own_tokens(tiny_model, direct, make_scheduler, collector):
    scheduler = make_scheduler()
    scheduler.submit(request(tiny_model, "solo", PROMPTS[0], max_tokens=40))
    final = collector.finished("solo")
    expected = direct(list(tiny_model.tokenize(PROMPTS[0])), 40)
    assert collector.tokens("solo") == expected
    assert (final.reason, final.completion_tokens) == (FinishReason.LENGTH, 40)
    assert final.prompt_tokens == len(tiny_model.tokenize(PROMPTS[0]))
    assert isinstance(collector.events["solo"][0], Started)


def test_requests_batched_together_match_each_one_alone(tiny_model, direct, make_scheduler, collector):
    scheduler = make_scheduler(max_running_requests=4)
    for k, prompt in enumerate(PROMPTS):
        scheduler.submit(request(tiny_model, f"r{k}", prompt, max_tokens=30 + 5 * k))
    for k, prompt in enumerate(PROMPTS):
        collector.finished(f"r{k}")
        assert collector.tokens(f"r{k}") == direct(tiny_model.tokenize(prompt), 30 + 5 * k), prompt


def test_seeded_sampling_matches_llama_cpp_and_repeats(tiny_model, direct, make_scheduler, collector):
    scheduler = make_scheduler(max_running_requests=2)
    sampling = Sampling(temperature=0.9, top_k=50, top_p=0.95, min_p=0.02, seed=1234)
    scheduler.submit(request(tiny_model, "a", PROMPTS[1], sampling=sampling, max_tokens=32))
    scheduler.submit(request(tiny_model, "b", PROMPTS[1], sampling=sampling, max_tokens=32))
    collector.finished("a"), collector.finished("b")
    expected = direct(tiny_model.tokenize(PROMPTS[1]), 32, seed=1234, temp=0.9, top_k=50,
                             top_p=0.95, min_p=0.02)
    assert collector.tokens("a") == collector.tokens("b") == expected
    scheduler.submit(request(tiny_model, "c", PROMPTS[1], max_tokens=32,
                             sampling=Sampling(temperature=0.9, top_k=50, top_p=0.95, min_p=0.02, seed=99)))
    collector.finished("c")
    assert collector.tokens("c") != expected


def test_cancelling_one_running_request_leaves_the_others_unchanged(tiny_model, direct, make_scheduler, collector):
    scheduler = make_scheduler(max_running_requests=3)
    for k in range(3):
        scheduler.submit(request(tiny_model, f"r{k}", PROMPTS[k], max_tokens=200))
    collector.wait(lambda: len(collector.events["r1"]) >= 4)
    assert scheduler.cancel("r1")
    aborted = collector.finished("r1")
    assert aborted.reason is FinishReason.CANCELLED
    assert 0 < aborted.completion_tokens < 200
    load = scheduler.load()
    assert load.running_requests <= 2
    for k in (0, 2):
        collector.finished(f"r{k}")
        assert collector.tokens(f"r{k}") == direct(tiny_model.tokenize(PROMPTS[k]), 200)
    assert not scheduler.cancel("r1")   # gone: nothing is held for it any more
    assert scheduler.load().used_kv_blocks == 0


def test_a_queued_request_takes_the_first_free_sequence(tiny_model, direct, make_scheduler, collector):
    scheduler = make_scheduler(max_running_requests=1)
    scheduler.submit(request(tiny_model, "first", PROMPTS[0], max_tokens=200))
    collector.wait(lambda: collector.events["first"])    # started: it holds the only sequence id
    scheduler.submit(request(tiny_model, "second", PROMPTS[2], max_tokens=20))
    load = scheduler.load()
    assert (load.running_requests, load.queued_requests) == (1, 1)
    assert load.waiting_tokens == len(tiny_model.tokenize(PROMPTS[2]))
    assert load.total_kv_blocks >= 512
    collector.finished("first"), collector.finished("second")
    assert collector.tokens("second") == direct(tiny_model.tokenize(PROMPTS[2]), 20)


def test_a_paused_scheduler_starts_nothing_until_resumed(tiny_model, make_scheduler, collector):
    scheduler = make_scheduler()
    scheduler.pause()
    scheduler.submit(request(tiny_model, "held", PROMPTS[0], max_tokens=5))
    load = scheduler.load()
    assert (load.running_requests, load.queued_requests) == (0, 1)
    scheduler.resume()
    assert collector.finished("held").completion_tokens == 5


def test_sleep_frees_the_kv_cache_and_wake_brings_it_back(tiny_model, direct, make_scheduler, collector):
    scheduler = make_scheduler(max_running_requests=2)
    released = scheduler.sleep()
    # 2 sequences x 512 cells, each cell 2 layers of keys and values 64 wide in F16.
    assert released == 2 * 512 * (2 * 2 * 64 * 2)
    scheduler.submit(request(tiny_model, "after", PROMPTS[3], max_tokens=16))
    assert scheduler.load().queued_requests == 1   # waits: there is no KV cache to run it in
    scheduler.wake()
    collector.finished("after")
    assert collector.tokens("after") == direct(tiny_model.tokenize(PROMPTS[3]), 16)
    with pytest.raises(RuntimeError, match="requests are running or queued"):
        scheduler.submit(request(tiny_model, "busy", PROMPTS[0], max_tokens=200))
        collector.wait(lambda: collector.events["busy"])
        scheduler.sleep()


def test_cancelling_a_queued_request_ends_it_without_running(tiny_model, make_scheduler, collector):
    scheduler = make_scheduler(max_running_requests=1)
    scheduler.pause()
    scheduler.submit(request(tiny_model, "runs", PROMPTS[0]))
    scheduler.submit(request(tiny_model, "waits", PROMPTS[1]))
    assert scheduler.cancel("waits")
    final = collector.finished("waits")
    assert (final.reason, final.completion_tokens, collector.tokens("waits")) == (FinishReason.CANCELLED, 0, [])
    load = scheduler.load()
    assert (load.queued_requests, load.waiting_tokens) == (1, len(tiny_model.tokenize(PROMPTS[0])))


def test_stop_conditions(tiny_model, direct, make_scheduler, collector):
    scheduler = make_scheduler(max_running_requests=4)
    prompt = tiny_model.tokenize(PROMPTS[0])
    free = direct(prompt, 60)
    # A stop token id: the sequence ends on its first occurrence (after min_tokens), keeping it.
    stop_token = free[10]
    first = free.index(stop_token)
    scheduler.submit(request(tiny_model, "stop-id", PROMPTS[0], max_tokens=60, stop_token_ids=frozenset({stop_token})))
    scheduler.submit(request(tiny_model, "stop-id-late", PROMPTS[0], max_tokens=60, min_tokens=first + 2,
                             stop_token_ids=frozenset({stop_token})))
    final = collector.finished("stop-id")
    assert collector.tokens("stop-id") == free[:first + 1]
    assert (final.reason, final.stop) == (FinishReason.STOP, StopMatch(stop_token_id=stop_token))
    collector.finished("stop-id-late")
    later = free.index(stop_token, first + 1) if stop_token in free[first + 1:] else 59
    assert collector.tokens("stop-id-late") == free[:later + 1]

    # A stop string taken from the free-running text: the text ends before it (or with it).
    scheduler.submit(request(tiny_model, "text", PROMPTS[0], max_tokens=60))
    collector.finished("text")
    text = collector.text("text")
    stop = next(text[at:at + 3] for at in range(8, len(text) - 3) if "\ufffd" not in text[at:at + 3])
    cut = text.index(stop)
    scheduler.submit(request(tiny_model, "stop-str", PROMPTS[0], max_tokens=60, stop=(stop,)))
    scheduler.submit(request(tiny_model, "stop-str-kept", PROMPTS[0], max_tokens=60, stop=(stop,),
                             include_stop_in_output=True))
    final = collector.finished("stop-str")
    assert (final.reason, final.stop) == (FinishReason.STOP, StopMatch(stop_text=stop))
    assert collector.text("stop-str") == text[:cut]
    assert collector.tokens("stop-str") == free[:final.completion_tokens]
    assert final.completion_tokens < 60
    collector.finished("stop-str-kept")
    assert collector.text("stop-str-kept") == text[:cut + len(stop)]


def test_end_of_sequence_ends_a_request_unless_ignored(tiny_model, make_scheduler, collector):
    """A logit bias makes the end-of-sequence token certain: without ignore_eos the request ends
    on it at once; with ignore_eos, or before min_tokens, it goes on."""
    scheduler = make_scheduler(max_running_requests=3)
    eos = tiny_model.facts.eos_token_id
    certain = Sampling(temperature=0.0, logit_bias={eos: 1000.0})
    scheduler.submit(request(tiny_model, "ends", PROMPTS[0], sampling=certain, ignore_eos=False))
    scheduler.submit(request(tiny_model, "ignores", PROMPTS[0], sampling=certain, max_tokens=5))
    scheduler.submit(request(tiny_model, "floor", PROMPTS[0], sampling=certain, ignore_eos=False, min_tokens=3))
    final = collector.finished("ends")
    assert (final.reason, collector.tokens("ends")) == (FinishReason.STOP, [eos])
    assert collector.finished("ignores").reason is FinishReason.LENGTH
    assert collector.tokens("ignores") == [eos] * 5
    assert collector.finished("floor").reason is FinishReason.STOP
    assert collector.tokens("floor") == [eos] * 3


def test_logprobs_describe_the_models_choice(tiny_model, make_scheduler, collector):
    scheduler = make_scheduler()
    scheduler.submit(request(tiny_model, "lp", PROMPTS[0], max_tokens=8, logprobs=3))
    collector.finished("lp")
    logprobs = [lp for e in collector.events["lp"] if isinstance(e, (Emitted, Finished)) for lp in e.logprobs]
    assert [lp.token_id for lp in logprobs] == collector.tokens("lp")
    for lp in logprobs:
        assert lp.rank == 1 and lp.logprob <= 0.0     # greedy picks the most likely token
        top = [(c.token_id, c.logprob) for c in lp.candidates]
        assert len(top) == 3 and top[0] == (lp.token_id, pytest.approx(lp.logprob))
        assert [value for _, value in top] == sorted((value for _, value in top), reverse=True)


def test_a_batch_bound_smaller_than_a_prompt_reads_it_in_chunks(tiny_model, direct, make_scheduler, collector):
    scheduler = make_scheduler(max_running_requests=2, max_batch_tokens=4)
    long_prompt = " ".join(PROMPTS)
    scheduler.submit(request(tiny_model, "long", long_prompt, max_tokens=12))
    scheduler.submit(request(tiny_model, "short", PROMPTS[1], max_tokens=12))
    for name, prompt in (("long", long_prompt), ("short", PROMPTS[1])):
        collector.finished(name)
        assert collector.tokens(name) == direct(tiny_model.tokenize(prompt), 12)


def test_the_batch_bound_must_hold_one_token_per_running_request(tiny_model, collector):
    with pytest.raises(ValueError, match="max_batch_tokens \\(2\\) must be at least max_running_requests \\(4\\)"):
        Scheduler(tiny_model, SchedulerConfig(max_running_requests=4, max_batch_tokens=2), collector)
