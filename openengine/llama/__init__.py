"""A llama.cpp backend for the engine SDK (`openengine.serve`): GGUF models served over OpenEngine.

An optional part of the runtime: it needs llama-cpp-python (`make llama`, pinned in
requirements-llama.txt, or the `llama` extra). Importing this package imports nothing of it; the
modules that call llama.cpp import it themselves.

- `llama_backend`: `LlamaBackend`, the SDK backend, and `LlamaConfig`;
- `scheduler`: continuous batching on llama.cpp's low-level API, usable without a server;
- `native`: the loaded model, its vocabulary, contexts, and llama.cpp's log;
- `tinymodel`: the tiny random-weight model the tests and benchmarks build;
- `command`: `oespec engine --backend llama --model FILE.gguf`.
"""
