"""The mistakes a new engine author makes, each built on the toy engine as a small subclass.

    python -m tests.authors.mistakes NAME --port 0     (NAME: clean, or one of MISTAKES)
"""

from __future__ import annotations

import sys
from dataclasses import replace

from openengine.serve import Load
from tests.authors.toy_engine import MAX_OUTPUT, ToyBackend, main


class PhantomRunning(ToyBackend):
    """Counts one request more than it runs: its load never returns to idle."""

    def load(self) -> Load:
        load = super().load()
        return replace(load, running_requests=load.running_requests + 1)


class LogprobsNotReturned(ToyBackend):
    """States max_logprobs and output_logprobs, then never returns a log-probability."""

    def logprobs(self, request, token):
        return ()


class MaxTokensIgnored(ToyBackend):
    """Generates up to the model's limit whatever stopping.max_tokens asks, at 5 ms per token."""

    def __init__(self, token_ms: float = 5.0, **kwargs):
        super().__init__(token_ms, **kwargs)

    def max_tokens(self, request) -> int:
        return MAX_OUTPUT


class NegativeLoad(ToyBackend):
    """Reports its free slots as negative queued requests (idle: queued_requests -2)."""

    def load(self) -> Load:
        return replace(super().load(), queued_requests=len(self.jobs) - self.slots)


class ExceptionMidStream(ToyBackend):
    """Its model raises on a request's fourth token, after three were sent."""

    def next_token(self, previous, job, stopping) -> int:
        if job.generated == 3:
            raise RuntimeError("the toy model lost its place")
        return super().next_token(previous, job, stopping)


class LoadAlwaysZero(ToyBackend):
    """Never reports any work: every figure of its load is 0, busy or not."""

    def load(self) -> Load:
        return Load()


MISTAKES = {
    "phantom-running": PhantomRunning,
    "logprobs-not-returned": LogprobsNotReturned,
    "max-tokens-ignored": MaxTokensIgnored,
    "negative-load": NegativeLoad,
    "exception-mid-stream": ExceptionMidStream,
    "load-always-zero": LoadAlwaysZero,
}

if __name__ == "__main__":
    name = sys.argv[1]
    main(ToyBackend if name == "clean" else MISTAKES[name], sys.argv[2:])
