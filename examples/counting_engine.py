"""A minimal OpenEngine engine on the SDK: a counting model served with core and load, on
upstream's OpenEngine v1 (Inference, Control) and the proposal's services beside it.

The model is not a language model: it answers each prompt by counting on from the prompt's last
byte through printable ASCII, one token every `--token-ms`, and ends its sequence (EOS) when the
count reaches '~'. Everything the protocol asks for (discovery, health, admission, Abort, load
watching, shutdown) is the SDK's; this file only says what the engine is and how it runs.

    python examples/counting_engine.py --port 50051
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from dataclasses import dataclass

from openengine.serve import (
    AbortReason, Chunk, EngineDescription, EngineHandle, Final, FinishReason, GenerateRequest, Load, Model,
    SequenceStops, ServeConfig, Tokenizer, serve,
)

EOS = 256
FIRST, LAST = ord(" "), ord("~")


def text_of(token: int) -> str:
    return "" if token == EOS else chr(token)


@dataclass(eq=False)
class Job:
    prompt_tokens: int
    generated: int = 0
    running: bool = False
    aborted: bool = False


class CountingBackend:
    """At most `slots` requests count at once; up to `queue` others wait their turn (the SDK
    refuses any more, retryable)."""

    def __init__(self, token_seconds: float = 0.002, slots: int = 4, queue: int = 16):
        self.token_seconds = token_seconds
        self.slots = slots
        self.queue = queue
        self.jobs: dict[str, Job] = {}
        self.engine: EngineHandle | None = None
        self._free = asyncio.Semaphore(slots)

    def describe(self) -> EngineDescription:
        model = Model("counter", max_context_tokens=4096, max_output_tokens=2048,
                      tokenizer=Tokenizer("bytes", vocab_size=257, eos_token_id=EOS, token_text=text_of))
        return EngineDescription(
            engine_name="counting-engine", engine_version="1.0", models=(model,),
            limits={"core": {"max_running_requests": self.slots, "max_queued_requests": self.queue},
                    "load": {"min_watch_interval_ms": 100, "change_driven": True}})

    def attach(self, engine: EngineHandle) -> None:
        self.engine = engine

    async def generate(self, request: GenerateRequest):
        message, stopping = request.message, request.stopping
        prompt = list(message.token_ids.ids) if message.HasField("token_ids") else list(message.prompt.encode())
        limit = stopping.max_tokens if stopping.HasField("max_tokens") else 2048
        floor = stopping.min_tokens if stopping.HasField("min_tokens") else 0
        stops = SequenceStops(stopping, eos_token_id=EOS)
        job = self.jobs[request.request_id] = Job(len(prompt))
        try:
            async with self._free:
                job.running = True
                self.engine.load_changed()
                token = prompt[-1] if prompt and FIRST <= prompt[-1] < LAST else FIRST - 1
                while not job.aborted:
                    await asyncio.sleep(self.token_seconds)
                    token = token + 1 if token < LAST else FIRST
                    job.generated += 1
                    if token == LAST and not stopping.ignore_eos and job.generated > floor:
                        token = EOS   # the count is complete: the sequence ends instead
                    text, stop = stops.add(token, text_of(token))
                    if stop is not None or job.generated >= limit:
                        reason = FinishReason.STOP if stop is not None else FinishReason.LENGTH
                        yield Final(reason, token_ids=(token,), text=text + stops.rest(), stop_match=stop,
                                    prompt_tokens=len(prompt), completion_tokens=job.generated)
                        return
                    yield Chunk((token,), text=text)
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
                    decode_batch_size=sum(1 for j in running if j.generated),
                    prefill_batch_size=sum(1 for j in running if not j.generated))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=50051, help="0 picks a free port")
    parser.add_argument("--token-ms", type=float, default=2.0, help="time per generated token")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    config = ServeConfig(host=args.host, port=args.port)
    started = lambda server: print(f"listening on {server.address}", flush=True)  # noqa: E731
    asyncio.run(serve(CountingBackend(args.token_ms / 1000.0), config, on_started=started))


if __name__ == "__main__":
    main()
