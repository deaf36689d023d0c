"""The llama.cpp library through llama-cpp-python's low-level bindings: one loaded model, its
vocabulary, and contexts made from it.

Only this module and `scheduler` call llama.cpp. llama.cpp's log goes to the Python logger
`openengine.llama.native` (its errors at ERROR, the rest at DEBUG), and the latest error lines are
kept so a model that fails to load is reported with llama.cpp's own reason.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

logger = logging.getLogger(__name__)

# ggml's log levels (ggml.h): DEBUG 1, INFO 2, WARN 3, ERROR 4; CONT continues the previous line.
_GGML_LOG_LEVEL_WARN = 3
_GGML_LOG_LEVEL_ERROR = 4
_GGML_LOG_LEVEL_CONT = 5
_recent_errors: deque[str] = deque(maxlen=8)
_log_lock = threading.Lock()
_last_level = 0


@llama_cpp.llama_log_callback
def _log(level: int, text: bytes, user_data) -> None:
    global _last_level
    if level == _GGML_LOG_LEVEL_CONT:
        level = _last_level
    _last_level = level
    line = text.decode("utf-8", errors="replace").rstrip("\n")
    if not line:
        return
    if level >= _GGML_LOG_LEVEL_WARN:
        with _log_lock:
            _recent_errors.append(line)
    logger.log(logging.ERROR if level == _GGML_LOG_LEVEL_ERROR else logging.DEBUG, "%s", line)


llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()


def _call_with_reason(function, *args):
    """`function(*args)`, and when it returns null, llama.cpp's reason from the error lines it logged."""
    with _log_lock:
        _recent_errors.clear()
    result = function(*args)
    if result:
        return result, ""
    with _log_lock:
        return result, "; ".join(_recent_errors) or "llama.cpp gave no reason"


class ModelLoadError(Exception):
    """The file is missing or llama.cpp cannot load it; the message says which and why."""


@dataclass(frozen=True)
class ModelFacts:
    """What the model file says about itself."""

    name: str
    context_length: int      # the context it was trained with
    vocab_size: int
    bos_token_id: int | None
    eos_token_id: int | None


class LlamaModel:
    """A model loaded on the CPU. Tokenizing and reading pieces only read the vocabulary, so any
    thread may call them while a context decodes."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"{path}: no such model file (give the path of a .gguf file)")
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0
        pointer, reason = _call_with_reason(llama_cpp.llama_model_load_from_file, str(path).encode(), params)
        if not pointer:
            raise ModelLoadError(f"{path}: llama.cpp cannot load this model ({reason}); "
                                 "give a GGUF file of an architecture llama.cpp supports")
        self.path = path
        self.pointer = pointer
        self.vocab = llama_cpp.llama_model_get_vocab(pointer)
        # The vocabulary read once: each token's bytes and the tokens that end generation. The
        # scheduler looks these up for every token it samples, without a call into llama.cpp
        # (each such call gives up Python's lock and must wait to take it back).
        count = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.pieces: tuple[bytes, ...] = tuple(self._read_piece(token) for token in range(count))
        self.end_of_generation: frozenset[int] = frozenset(
            token for token in range(count) if llama_cpp.llama_vocab_is_eog(self.vocab, token))
        bos, eos = int(llama_cpp.llama_vocab_bos(self.vocab)), int(llama_cpp.llama_vocab_eos(self.vocab))
        self.facts = ModelFacts(
            name=self._meta("general.name") or path.stem,
            context_length=int(llama_cpp.llama_model_n_ctx_train(pointer)),
            vocab_size=count,
            bos_token_id=bos if bos >= 0 else None,    # llama.cpp's -1: the model has none
            eos_token_id=eos if eos >= 0 else None)

    def _meta(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        size = llama_cpp.llama_model_meta_val_str(self.pointer, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", errors="replace") if size >= 0 else None

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        """Token ids of `text`, with the beginning-of-sequence token when the model adds one."""
        data = text.encode("utf-8")
        room = len(data) + 8
        while True:
            tokens = (llama_cpp.llama_token * room)()
            count = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, room,
                                             add_special, False)
            if count >= 0:
                return list(tokens[:count])
            room = -count

    def piece(self, token: int) -> bytes:
        """The bytes one token stands for (control tokens stand for none)."""
        return self.pieces[token]

    def _read_piece(self, token: int) -> bytes:
        buffer = ctypes.create_string_buffer(32)
        size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, False)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, False)
        return buffer.raw[:size]

    def kv_bytes_per_cell(self) -> int:
        """Bytes one KV cell takes (keys and values of every layer, in the default F16 type)."""
        layers = int(llama_cpp.llama_model_n_layer(self.pointer))
        heads = int(llama_cpp.llama_model_n_head(self.pointer))
        kv_width = int(llama_cpp.llama_model_n_embd(self.pointer)) // heads * int(
            llama_cpp.llama_model_n_head_kv(self.pointer))
        return layers * 2 * kv_width * 2

    def new_context(self, *, sequences: int, context_per_sequence: int, batch_tokens: int,
                    threads: int):
        """A context with one KV stream of `context_per_sequence` cells for each of `sequences`
        sequence ids (not unified: a sequence never competes with another for cells)."""
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = context_per_sequence * sequences
        params.n_seq_max = sequences
        params.n_batch = batch_tokens
        params.n_ubatch = batch_tokens
        params.n_threads = threads
        params.n_threads_batch = threads
        params.kv_unified = False
        params.no_perf = True
        context, reason = _call_with_reason(llama_cpp.llama_init_from_model, self.pointer, params)
        if not context:
            raise ModelLoadError(f"{self.path}: llama.cpp cannot make a context of "
                                 f"{sequences} x {context_per_sequence} tokens ({reason})")
        return context

    def close(self) -> None:
        if self.pointer:
            llama_cpp.llama_model_free(self.pointer)
            self.pointer = None
