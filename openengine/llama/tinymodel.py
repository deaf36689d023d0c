"""A tiny llama-architecture GGUF model with random weights, written by the `gguf` package.

No weights are downloaded or committed: tests and benchmarks build this file when they need it.
The same `TinyModelSpec` gives the same bytes every time (weights from a fixed seed, metadata in a
fixed order), so a test can compare token ids across runs and processes. The tokenizer is the
model's own: a SentencePiece-style vocabulary ("llama" tokenizer model) of the 256 byte-fallback
tokens, printable ASCII and a few word pieces, small enough that the file takes well under a
second to write.

    python -m openengine.llama.tinymodel tiny.gguf
"""

from __future__ import annotations

import argparse
import string
import sys
from dataclasses import dataclass
from pathlib import Path

SPACE = "\u2581"   # SentencePiece's word-boundary mark, which llama.cpp puts in place of spaces
WORDS = ("the", "and", "of", "to", "in", "is", "that", "it", "for", "on", "with", "as", "hello",
         "says", "conformance", "request", "running", "engine", "model", "token", "keeps", "this",
         "cancels", "open", "stream")


@dataclass(frozen=True)
class TinyModelSpec:
    """The shape of the model. The defaults make a file of about 0.5 MB that llama.cpp loads in a
    fraction of a second and decodes at over a thousand tokens a second on one core."""

    context_length: int = 512
    embedding: int = 64
    layers: int = 2
    heads: int = 4
    feed_forward: int = 128
    seed: int = 20261203
    name: str = "openengine-tiny"


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the tiny tokenizer: <unk>, <s>, </s>, the byte tokens,
    then pieces. Every prefix of a word piece is a piece too, because SentencePiece merges two
    adjacent pieces only when their concatenation is in the vocabulary; longer pieces score
    higher, so they win."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    scores = [0.0] * len(tokens)
    pieces: list[str] = [SPACE] + [c for c in string.printable if c.isprintable() and c != " "]
    for word in WORDS:
        marked = SPACE + word
        pieces += [marked[:end] for end in range(2, len(marked) + 1)]
        pieces += [word[:end] for end in range(2, len(word) + 1)]
    for piece in dict.fromkeys(pieces):   # each once, in first-seen order
        tokens.append(piece)
        types.append(TokenType.NORMAL)
        scores.append(float(len(piece)) - len(tokens) * 1e-4)
    return tokens, scores, [int(t) for t in types]


def write_tiny_model(path: str | Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write the model to `path` (replacing a file there) and return the path."""
    import numpy as np
    from gguf import GGUFWriter

    if spec.embedding % spec.heads:
        raise ValueError(f"embedding {spec.embedding} is not a multiple of heads {spec.heads}")
    path = Path(path)
    tokens, scores, types = vocabulary()
    vocab = len(tokens)
    rng = np.random.default_rng(spec.seed)

    def uniform(rows: int, cols: int, scale: float):
        return rng.uniform(-scale, scale, size=(rows, cols)).astype(np.float32)

    writer = GGUFWriter(str(path), "llama")
    writer.add_name(spec.name)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.embedding)
    writer.add_block_count(spec.layers)
    writer.add_feed_forward_length(spec.feed_forward)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.heads)
    writer.add_rope_dimension_count(spec.embedding // spec.heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(0)   # all F32
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)

    e, ff = spec.embedding, spec.feed_forward
    hidden = 1.0 / np.sqrt(e)
    writer.add_tensor("token_embd.weight", uniform(vocab, e, 1.0))
    for layer in range(spec.layers):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(e, dtype=np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{part}.weight", uniform(e, e, hidden))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(e, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", uniform(ff, e, hidden))
        writer.add_tensor(f"{block}.ffn_up.weight", uniform(ff, e, hidden))
        writer.add_tensor(f"{block}.ffn_down.weight", uniform(e, ff, 1.0 / np.sqrt(ff)))
    writer.add_tensor("output_norm.weight", np.ones(e, dtype=np.float32))
    # Wide logits (a spread of several units) keep greedy choices clear of near-ties, so batched
    # and one-at-a-time decoding pick the same tokens despite rounding differences.
    writer.add_tensor("output.weight", uniform(vocab, e, 6.0 * hidden))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m openengine.llama.tinymodel",
        description="Write the tiny random-weight llama model (GGUF) that the tests serve.")
    parser.add_argument("path", help="where to write the .gguf file")
    parser.add_argument("--context-length", type=int, default=TinyModelSpec.context_length)
    args = parser.parse_args(argv)
    written = write_tiny_model(args.path, TinyModelSpec(context_length=args.context_length))
    print(f"wrote {written} ({written.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
