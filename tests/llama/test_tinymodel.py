"""The tiny model: the same bytes every time, and a file llama.cpp loads with the shape, context
and tokenizer the writer gave it."""

from __future__ import annotations

import hashlib

from openengine.llama.tinymodel import SPACE, TinyModelSpec, vocabulary, write_tiny_model


def test_the_writer_gives_the_same_bytes_every_time(tmp_path, tiny_model_path):
    again = write_tiny_model(tmp_path / "again.gguf")
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(tiny_model_path.read_bytes()).digest()
    other = write_tiny_model(tmp_path / "other.gguf", TinyModelSpec(seed=1))
    assert other.read_bytes() != again.read_bytes()


def test_llama_cpp_reads_the_model_as_written(tiny_model):
    facts = tiny_model.facts
    tokens, _, _ = vocabulary()
    assert facts.name == "openengine-tiny"
    assert facts.context_length == TinyModelSpec().context_length
    assert facts.vocab_size == len(tokens)
    assert (facts.bos_token_id, facts.eos_token_id) == (1, 2)


def test_the_tokenizer_merges_word_pieces_and_falls_back_to_bytes(tiny_model):
    tokens, _, _ = vocabulary()
    ids = tiny_model.tokenize("hello engine")
    assert ids[0] == 1   # the beginning-of-sequence token
    assert [tokens[i] for i in ids[1:]] == [SPACE + "hello", SPACE + "engine"]
    # "é" is not a piece: its two UTF-8 bytes become byte tokens, and they decode back to it.
    accented = tiny_model.tokenize("é", add_special=False)
    assert [tokens[i] for i in accented if tokens[i] != SPACE] == ["<0xC3>", "<0xA9>"]
    assert b"".join(tiny_model.piece(i) for i in accented).decode().strip() == "é"
