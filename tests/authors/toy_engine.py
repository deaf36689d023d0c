"""A toy engine on the OpenEngine SDK's public names, as an engine author writes one.

Its model spells the alphabet on from the prompt's last letter, one letter every `token_ms`, and
ends with its end-of-sequence token after 'z'. It runs `slots` requests at a time and queues up
to `queue` more, applies every stop rule, answers Abort, reports its real load and returns the
output log-probabilities it advertises: the letter it picks has probability 0.9, every other
token shares the rest evenly.

    python toy_engine.py --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
from dataclasses import dataclass

from openengine.serve import (
    AbortReason, Chunk, EngineDescription, EngineHandle, Final, FinishReason, GenerateRequest, Load, Model,
    Refusal, RefusalCode, SequenceStops, ServeConfig, Tokenizer, TokenInfo, serve,
)

EOS = 256
VOCAB = 257
LETTERS = "abcdefghijklmnopqrstuvwxyz"
MAX_OUTPUT = 1024
PICKED, OTHER = math.log(0.9), math.log(0.1 / (VOCAB - 1))


def text_of(token: int) -> str:
    return "" if token == EOS else chr(token)


@dataclass(eq=False)
class Job:
    prompt_tokens: int
    generated: int = 0
    running: bool = False
    aborted: bool = False


class ToyBackend:
    """At most `slots` requests spell at once; up to `queue` others wait for a slot (the SDK
    refuses any more, retryable)."""

    def __init__(self, token_ms: float = 2.0, slots: int = 2, queue: int = 4):
        self.token_seconds = token_ms / 1000
        self.slots, self.queue = slots, queue
        self.jobs: dict[str, Job] = {}
        self.engine: EngineHandle | None = None
        self._slots = asyncio.Semaphore(slots)

    def limits(self) -> dict:
        return {"core": {"max_running_requests": self.slots, "max_queued_requests": self.queue,
                         "max_logprobs": 5, "output_logprobs": True},
                "load": {"min_watch_interval_ms": 100, "change_driven": True}}

    def describe(self) -> EngineDescription:
        model = Model("toy", max_context_tokens=2048, max_output_tokens=MAX_OUTPUT,
                      tokenizer=Tokenizer("bytes", vocab_size=VOCAB, eos_token_id=EOS))
        return EngineDescription(engine_name="toy-engine", engine_version="0.1", models=(model,),
                                 limits=self.limits())

    def attach(self, engine: EngineHandle) -> None:
        self.engine = engine

    def max_tokens(self, request: GenerateRequest) -> int:
        stopping = request.stopping
        return stopping.max_tokens if stopping.HasField("max_tokens") else MAX_OUTPUT

    def next_token(self, previous: int, job: Job, stopping) -> int:
        # The model's own end, never before min_tokens (SequenceStops would not stop on it there).
        if previous == ord("z") and not stopping.ignore_eos and job.generated + 1 >= stopping.min_tokens:
            return EOS
        return ord(LETTERS[(LETTERS.find(chr(previous)) + 1) % 26]) if chr(previous) in LETTERS else ord("a")

    def logprobs(self, request: GenerateRequest, token: int) -> tuple[TokenInfo, ...]:
        response = request.response
        if not response.return_output_logprobs:
            return ()
        info = TokenInfo(token_id=token, token=text_of(token), logprob=PICKED, rank=1)
        # The top_n candidates: the picked token first, then the others (equally likely) by id.
        top_n = response.output_candidates.top_n
        for rank, t in enumerate(([token] + [t for t in range(VOCAB) if t != token])[:top_n], 1):
            info.candidates.add(token_id=t, token=text_of(t), rank=rank, logprob=PICKED if t == token else OTHER)
        return (info,)

    async def generate(self, request: GenerateRequest):
        message, stopping = request.message, request.stopping
        if message.response.output_candidates.WhichOneof("selection") not in (None, "top_n"):
            raise Refusal(RefusalCode.UNIMPLEMENTED, "response.output_candidates: only top_n is supported")
        prompt = list(message.token_ids.ids) if message.HasField("token_ids") else list(message.prompt.encode())
        limit, stops = self.max_tokens(request), SequenceStops(stopping, eos_token_id=EOS)
        job = self.jobs[request.request_id] = Job(len(prompt))
        try:
            async with self._slots:
                job.running = True
                self.engine.load_changed()      # queued -> running: change-driven watchers see it
                token = prompt[-1] if prompt else ord(" ")
                while not job.aborted:
                    await asyncio.sleep(self.token_seconds)
                    token = self.next_token(token, job, stopping)
                    job.generated += 1
                    text, match = stops.add(token, text_of(token))
                    if match is not None or job.generated >= limit:
                        # A matched stop token is sent only when the request asks for it.
                        sent = () if match is not None and match.HasField("stop_token_id") \
                            and not stopping.include_stop_in_output else (token,)
                        yield Final(FinishReason.STOP if match else FinishReason.LENGTH,
                                    prompt_tokens=len(prompt), completion_tokens=job.generated,
                                    token_ids=sent, text=text + stops.rest(), stop_match=match,
                                    logprobs=self.logprobs(request, token) if sent else ())
                        return
                    yield Chunk((token,), text=text, logprobs=self.logprobs(request, token))
        finally:
            del self.jobs[request.request_id]

    async def abort(self, request_id: str, reason: AbortReason) -> None:
        if request_id in self.jobs:
            self.jobs[request_id].aborted = True

    def load(self) -> Load:
        running = [j for j in self.jobs.values() if j.running]
        waiting = [j for j in self.jobs.values() if not j.running]
        return Load(running_requests=len(running), queued_requests=len(waiting),
                    running_tokens=sum(j.prompt_tokens + j.generated for j in running),
                    waiting_tokens=sum(j.prompt_tokens for j in waiting),
                    prefill_batch_size=sum(1 for j in running if not j.generated),
                    decode_batch_size=sum(1 for j in running if j.generated))


def main(backend: type = ToyBackend, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=50051, help="0 picks a free port")
    parser.add_argument("--token-ms", type=float, help="time per generated token (default: the backend's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    toy = backend() if args.token_ms is None else backend(token_ms=args.token_ms)
    started = lambda server: print(f"listening on {server.address}", flush=True)  # noqa: E731
    asyncio.run(serve(toy, ServeConfig(host=args.host, port=args.port), on_started=started))


if __name__ == "__main__":
    main()
