"""A deterministic stand-in for a language model: no weights, no tokenizer files.

Tokens are bytes of UTF-8 text (ids 0..255) plus one end-of-sequence id. Generated tokens are
drawn from printable ASCII by a keyed hash of the prompt, the seed, the sequence index and the
position, so every output is a pure function of its inputs: the same request always produces the
same tokens, and a different seed (when sampling, temperature > 0) produces different ones.
Embeddings, classifications and scores are hashes of the input in the same way.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass

VOCAB_SIZE = 257
EOS_TOKEN_ID = 256
TOKENIZER_NAME = "utf-8-bytes"

# Generated text: lower-case words with spaces and the odd full stop, always valid UTF-8.
_ALPHABET = b"etaoinshrdlucmfwypvbgk    ."
CLASS_LABELS = ("negative", "neutral", "positive")


def tokenize(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def detokenize(ids) -> str:
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def _digest(*parts) -> bytes:
    h = hashlib.blake2b(digest_size=32)
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\x00")
    return h.digest()


@dataclass
class SequenceSampler:
    """Produces the tokens of one output sequence, one step at a time."""

    state: bytes
    forced: list[int] | None = None
    position: int = 0
    chosen: int = -1

    @classmethod
    def start(cls, prompt_ids, *, seed: int, index: int, temperature: float, adapter: str | None,
              choice: tuple[str, ...] = (), json_object: bool = False) -> "SequenceSampler":
        # Greedy decoding ignores the seed: the output depends on the prompt alone.
        key_seed = seed if temperature > 0 else 0
        state = _digest(bytes(_clip(prompt_ids)), key_seed, index, adapter or "")
        sampler = cls(state)
        if choice:
            pick = choice[state[0] % len(choice)]
            sampler.forced = tokenize(pick)
        elif json_object:
            sampler.forced = tokenize('{"text": "' + "".join(chr(_ALPHABET[b % 22]) for b in state[:6]) + '"}')
        else:
            sampler.forced = None
        return sampler

    def next_token(self) -> int:
        forced = self.forced
        if forced is not None:
            token = forced[self.position] if self.position < len(forced) else EOS_TOKEN_ID
        else:
            self.state = _digest(self.state)
            token = _ALPHABET[self.state[0] % len(_ALPHABET)]
        self.position += 1
        self.chosen = token
        return token

    def logprob(self, token: int) -> float:
        """A made-up but deterministic log-probability of `token` at this step: the chosen token
        (the last one `next_token` gave) is always the most likely one."""
        top = -round((self.state[1] / 255.0) * 2.0 + 0.01, 4)
        if token == self.chosen:
            return top
        return round(top - 0.5 - ((self.state[2] + token * 37) % 251) / 50.0, 4)


def _clip(ids):
    return [i & 0xFF for i in ids]


def prompt_logprob(prompt_ids, pos: int) -> float:
    """The made-up log-probability of the prompt token at `pos` given the tokens before it."""
    d = _digest(bytes(_clip(prompt_ids[:pos + 1])))
    return -round(d[0] / 255.0 * 3.0 + 0.01, 4)


def prompt_candidate_logprob(prompt_ids, pos: int, token: int) -> float:
    """The prompt token at `pos` is the most likely one there; any other is less likely."""
    top = prompt_logprob(prompt_ids, pos)
    if token == prompt_ids[pos]:
        return top
    return round(top - 1.0 - ((token - prompt_ids[pos]) % VOCAB_SIZE) / 64.0, 4)


def embed(ids, size: int, *, normalize: bool = True) -> list[float]:
    values = []
    block = 0
    while len(values) < size:
        d = _digest(bytes(_clip(ids)), "embed", block)
        values.extend((struct.unpack_from("<h", d, i)[0] / 32768.0) for i in range(0, 32, 2))
        block += 1
    values = values[:size]
    if normalize:
        norm = math.sqrt(sum(v * v for v in values)) or 1.0
        values = [v / norm for v in values]
    return values


def classify(ids) -> list[tuple[str, float]]:
    d = _digest(bytes(_clip(ids)), "classify")
    logits = [d[i] / 64.0 for i in range(len(CLASS_LABELS))]
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    total = sum(exps)
    pairs = [(label, e / total) for label, e in zip(CLASS_LABELS, exps)]
    return sorted(pairs, key=lambda p: -p[1])


def score(query_ids, doc_ids) -> float:
    a = embed(query_ids, 32)
    b = embed(doc_ids, 32)
    return sum(x * y for x, y in zip(a, b))


def block_hashes(ids, block_size: int, *, salt: str = "", adapter: str = "") -> list[bytes]:
    """Prefix-chained hashes of the full blocks of a token sequence (as KV events carry them)."""
    out, parent = [], _digest("root", salt, adapter)[:16]
    for start in range(0, len(ids) - len(ids) % block_size, block_size):
        parent = _digest(parent, bytes(_clip(ids[start:start + block_size])))[:16]
        out.append(parent)
    return out


def encode_item(payload: bytes) -> tuple[str, int]:
    """An encoder-cache handle and the number of embedding tokens of one media item."""
    d = _digest(payload, "encode")
    return d[:12].hex(), 16 + d[12] % 48
