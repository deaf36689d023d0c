"""The tiny model, built once per test process by the project's own writer (no weights are
committed), a loaded copy shared by the tests that only read it, and llama.cpp called directly
(llama-cpp-python's high-level `Llama`, one sequence at a time) as the yardstick for tokens."""

from __future__ import annotations

import pytest

from openengine.llama.tinymodel import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("llama") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_model(tiny_model_path):
    from openengine.llama.native import LlamaModel

    model = LlamaModel(tiny_model_path)
    yield model
    model.close()


@pytest.fixture(scope="session")
def direct(tiny_model_path):
    """`direct(prompt_ids, count, seed=None, **sampling)`: the first `count` tokens llama.cpp
    generates for the prompt, greedy unless `temp` is given (`Llama.generate`'s names)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(tiny_model_path), n_ctx=512, n_batch=512, n_threads=1,
                          verbose=False)

    def tokens(prompt: list[int], count: int, *, seed: int | None = None, **sampling) -> list[int]:
        if seed is not None:
            llm.set_seed(seed)
        llm.reset()
        out = []
        for token in llm.generate(prompt, **{"temp": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **sampling}):
            out.append(token)
            if len(out) == count:
                break
        return out
    yield tokens
    llm.close()
