"""llama.cpp served over OpenEngine against llama.cpp called directly, in one run.

The model is a random-weight one written by `openengine.llama.tinymodel`, larger than the tests'
(see `_bench_model`), the engine `oespec engine --backend llama` in its own process, and the
client a `grpc.aio` program streaming B greedy requests at once (`ignore_eos`, so every request
runs its full length). The direct figure is the same work with no server: one llama.cpp context
of the same shape, the same B sequences decoded together in one `llama_batch` per step and
sampled greedily, nothing else.
Tokens per second through OpenEngine over tokens per second direct is the cost of the protocol
(gRPC streams, the SDK, the scheduler's events and detokenization), at each batch size.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.figures import QUICK_ROUNDS, ROUNDS, Section, at_least, info, interleaved
from bench.measure import loadavg

MAX_RUNNING = 12   # above the largest batch
CONTEXT = 512
PROMPT = "the engine keeps this request running"


def _bench_model():
    from openengine.llama.tinymodel import TinyModelSpec

    # Larger than the tests' model, so the ratio weighs the protocol against real work (bench/NOTES.md).
    return TinyModelSpec(context_length=CONTEXT, embedding=512, layers=4, heads=8, feed_forward=1536)


def direct_rate(model_path: Path, batch: int, tokens: int, threads: int) -> tuple[float, float]:
    """(tokens per second, CPU seconds per token) of `batch` greedy sequences decoded together
    by llama.cpp alone, in this process."""
    import llama_cpp

    from openengine.llama.native import LlamaModel

    model = LlamaModel(model_path)
    context = model.new_context(sequences=MAX_RUNNING, context_per_sequence=CONTEXT,
                                batch_tokens=CONTEXT, threads=threads)
    memory = llama_cpp.llama_get_memory(context)
    prompt = model.tokenize(PROMPT)
    samplers = [llama_cpp.llama_sampler_init_greedy() for _ in range(batch)]
    llama_batch = llama_cpp.llama_batch_init(CONTEXT, 0, 1)

    def decode(entries) -> None:
        for i, (seq, token, pos, logits) in enumerate(entries):
            llama_batch.token[i] = token
            llama_batch.pos[i] = pos
            llama_batch.n_seq_id[i] = 1
            llama_batch.seq_id[i][0] = seq
            llama_batch.logits[i] = logits
        llama_batch.n_tokens = len(entries)
        assert llama_cpp.llama_decode(context, llama_batch) == 0

    try:
        # A context's first decode sets up its compute graph; the engine's context has done so.
        decode([(0, t, pos, False) for pos, t in enumerate(prompt)])
        llama_cpp.llama_memory_seq_rm(memory, 0, -1, -1)
        start, cpu = time.perf_counter(), time.process_time()
        decode([(seq, t, pos, pos == len(prompt) - 1) for seq in range(batch) for pos, t in enumerate(prompt)])
        last = [llama_cpp.llama_sampler_sample(samplers[seq], context, (seq + 1) * len(prompt) - 1)
                for seq in range(batch)]
        for step in range(1, tokens):
            decode([(seq, last[seq], len(prompt) + step - 1, True) for seq in range(batch)])
            last = [llama_cpp.llama_sampler_sample(samplers[seq], context, seq) for seq in range(batch)]
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        for seq in range(batch):
            llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)
            llama_cpp.llama_sampler_free(samplers[seq])
        llama_cpp.llama_batch_free(llama_batch)
        llama_cpp.llama_free(context)
        model.close()
    return batch * tokens / elapsed, cpu / (batch * tokens)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_engine(model_path: Path, threads: int) -> tuple[subprocess.Popen, str]:
    oespec = Path(sys.executable).parent / "oespec"
    proc = subprocess.Popen(
        [str(oespec), "engine", "--backend", "llama", "--model", str(model_path), "--port", "0",
         "--profiles", "core,load", "--limit", f"core.max_running_requests={MAX_RUNNING}",
         "--threads", str(threads), "--log-level", "info"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        found = re.search(r"serving .* on (\S+) \(instance", line)
        if found:
            return proc, found.group(1)
    proc.wait()
    raise RuntimeError("the llama engine did not start")


async def _stream(stub, generation_pb2, tokens: int) -> int:
    """Run one greedy request; the tokens received."""
    count = 0
    call = stub.Generate(generation_pb2.GenerateRequest(
        prompt=PROMPT, sampling=generation_pb2.SamplingParams(temperature=0.0),
        stopping=generation_pb2.StoppingOptions(max_tokens=tokens, ignore_eos=True)))
    async for response in call:
        event = response.WhichOneof("event")
        if event == "error":
            raise RuntimeError(f"the engine failed a request: {response.error.message}")
        if event == "token":
            count += len(response.token.tokens)
    return count


async def served(address: str, pid: int, batch: int, tokens: int) -> tuple[float, float]:
    """Through the engine: (tokens per second, the engine's CPU seconds per token) of `batch`
    concurrent streams."""
    import grpc

    from openengine.v1 import generation_pb2, inference_service_pb2_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = inference_service_pb2_grpc.InferenceStub(channel)
        await _stream(stub, generation_pb2, 4)    # connect and warm up
        cpu, start = cpu_seconds(pid), time.perf_counter()
        count = sum(await asyncio.gather(*(_stream(stub, generation_pb2, tokens) for _ in range(batch))))
        elapsed, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu
    return count / elapsed, cpu / count


def run(quick: bool = False) -> Section:
    from openengine.llama.tinymodel import write_tiny_model

    model = _bench_model()
    section = Section("llama.cpp through OpenEngine")
    load_start = loadavg()
    threads = 1   # the engine's default (LlamaConfig.threads), on both sides
    batches = (1, 4) if quick else (1, 4, 8)
    tokens = 64 if quick else 256
    rounds = QUICK_ROUNDS if quick else ROUNDS
    with tempfile.TemporaryDirectory() as folder:
        model_path = write_tiny_model(Path(folder) / "bench.gguf", model)
        proc, address = start_engine(model_path, threads)
        try:
            for batch in batches:
                def one(side: str) -> tuple[float, float]:
                    if side == "direct":
                        return direct_rate(model_path, batch, tokens, threads)
                    return asyncio.run(served(address, proc.pid, batch, tokens))
                pairs = interleaved(one, ("direct", "served"), rounds)
                direct, direct_cpu = (statistics.median(d[i] for d, _ in pairs) for i in (0, 1))
                through, through_cpu = (statistics.median(t[i] for _, t in pairs) for i in (0, 1))
                section.figures += [
                    info(f"llama.b{batch}.direct_tokens_per_s", round(direct), "tokens/s", group="llama",
                         note=f"{batch} sequences of {tokens} tokens, one llama_batch per step; median of {rounds} rounds"),
                    info(f"llama.b{batch}.openengine_tokens_per_s", round(through), "tokens/s",
                         group="llama", note=f"{batch} concurrent Generate streams; median of {rounds} rounds"),
                    at_least(f"llama.b{batch}.openengine_over_direct", [t[0] / d[0] for d, t in pairs], 0.9,
                             group="llama", note="tokens/s through OpenEngine / direct, per round"),
                    info(f"llama.b{batch}.engine_cpu_over_direct", round(through_cpu / direct_cpu, 3),
                         "ratio", group="llama",
                         note="CPU per token: the engine process / llama.cpp alone, median rounds"),
                ]
        finally:
            proc.terminate()
            proc.wait(30)
    section.discussion = (
        f"A random-weight model (context {CONTEXT}, embedding {model.embedding}, {model.layers} layers), "
        f"llama.cpp on {threads} thread on both sides, the engine with max_running_requests {MAX_RUNNING}, "
        f"{tokens} tokens per request; how to read the ratios: bench/NOTES.md. "
        f"Load average at the start / end of this section: {load_start} / {loadavg()}.")
    return section

