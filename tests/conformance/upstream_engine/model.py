"""The toy model behind the upstream-only engine: a byte vocabulary and hashed scores.

Token ids 0..255 are bytes (a text prompt is its UTF-8 bytes) and 256 is EOS. A step's scores
come from a hash of the prompt, the position and the previous token, so greedy output is a fixed
function of the prompt, and sampled output a fixed function of the prompt and the seed. The model
only ever proposes lowercase letters, space and a little punctuation, so each generated token is
one ASCII character and stop strings can be chosen from the output text. EOS grows likelier with
each position, so a request that neither ignores EOS nor sets min_tokens ends on its own.
"""

from __future__ import annotations

import hashlib
import math
import random

EOS = 256
VOCAB_SIZE = 257
ALPHABET = [ord(c) for c in "etaoinshrdlucmfwypvbgkqjxz ,.'"]
_OTHER = -9.0           # score of every byte the model never proposes
_EOS_START, _EOS_STEP = -5.0, 0.15


def token_text(token: int) -> str:
    # Bytes map one-to-one onto Latin-1 characters; EOS has no text.
    return "" if token == EOS else chr(token)


def tokenize(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def context_key(tokens: list[int]) -> bytes:
    return hashlib.blake2b(bytes(t & 0xFF for t in tokens) + len(tokens).to_bytes(4, "little"),
                           digest_size=16).digest()


def scores(key: bytes, position: int, previous: int, *, allow_eos: bool = True) -> list[float]:
    """Unnormalised scores over the whole vocabulary for one step."""
    h = hashlib.blake2b(key + position.to_bytes(4, "little") + previous.to_bytes(2, "little"),
                        digest_size=len(ALPHABET)).digest()
    out = [_OTHER] * VOCAB_SIZE
    for token, byte in zip(ALPHABET, h):
        out[token] = byte / 64.0
    out[EOS] = _EOS_START + _EOS_STEP * position if allow_eos else -math.inf
    return out


def log_softmax(values: list[float]) -> list[float]:
    top = max(values)
    total = math.log(sum(math.exp(v - top) for v in values if v != -math.inf))
    return [v - top - total if v != -math.inf else -math.inf for v in values]


def ranked(logprobs: list[float]) -> list[int]:
    """Token ids, likeliest first (ties by id, so ranks are stable)."""
    # A stable sort keeps equal scores in id order, reversed or not.
    return sorted(range(len(logprobs)), key=logprobs.__getitem__, reverse=True)


class Sampler:
    """Picks tokens from one step's scores: greedy at temperature 0, otherwise a seeded draw
    after top-k and top-p filtering."""

    def __init__(self, seed: int, index: int, temperature: float, top_k: int, top_p: float):
        self.rng = random.Random(seed * 1_000_003 + index)
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p

    def pick(self, logprobs: list[float]) -> int:
        order = [t for t in ranked(logprobs) if logprobs[t] != -math.inf]
        if self.temperature == 0.0:
            return order[0]
        if self.top_k > 0:
            order = order[:self.top_k]
        # Relative to the likeliest token, so a small temperature cannot underflow every weight.
        top = logprobs[order[0]]
        weights = [math.exp((logprobs[t] - top) / self.temperature) for t in order]
        if self.top_p < 1.0:
            total, kept, acc = sum(weights), 0, 0.0
            for kept, w in enumerate(weights, 1):
                acc += w
                if acc >= self.top_p * total:
                    break
            order, weights = order[:kept], weights[:kept]
        return self.rng.choices(order, weights)[0]
