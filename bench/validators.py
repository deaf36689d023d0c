"""Benchmark: the generated validators against general-purpose JSON Schema validators.

Run `python -m bench.validators` (prints a table of ratios), or import `collect()` for the
figures as `{name, value, unit, goal, met}` records. Each measurement runs for a fixed, small
time budget, so the whole run takes a few seconds (method: bench/NOTES.md).

Compared on the same capability documents:
- the generated validator on the protobuf message (what a client holds after a gRPC call),
- the same including the proto3 JSON -> message conversion,
- `jsonschema` (Draft 2020-12) and `fastjsonschema` on the JSON document with the generated schema;
and per WatchLoad message: the stream checker's `feed` against `ParseFromString` of the same bytes,
and, as the floor of any checker that reads the parsed message, the cost of only reading the values
that change with every message (sequence and two timestamps) against the same parse.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from bench.figures import ROUNDS, at_least

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 0.4   # per measurement


def _per_call(fn: Callable[[], object], budget: float = BUDGET_S) -> float:
    """Seconds per call: calls in batches until the budget is spent, keeps the best batch."""
    fn()
    batch, best, spent = 1, float("inf"), 0.0
    while spent < budget:
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        took = time.perf_counter() - start
        spent += took
        best = min(best, took / batch)
        if took < 0.01:
            batch *= 2
    return best


def _side_by_side(fns: dict[str, Callable[[], object]], budget: float = 3 * BUDGET_S) -> dict[str, float]:
    """CPU seconds per call of each function, the median of `_rounds`."""
    return {name: sorted(v)[len(v) // 2] for name, v in _rounds(fns, budget).items()}


def _rounds(fns: dict[str, Callable[[], object]], budget: float = 3 * BUDGET_S) -> dict[str, list[float]]:
    """CPU seconds per call of each function in every round, measured interleaved: every round calls
    each one (in batches of at least ~5 ms), at least ROUNDS rounds, so a load spike on a shared
    machine lands on all of them alike instead of on whichever ran during it."""
    batches = {}
    for name, fn in fns.items():
        fn()
        start = time.process_time()
        fn()
        took = max(time.process_time() - start, 1e-6)
        batches[name] = max(1, int(0.005 / took))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    spent, rounds = 0.0, 0
    while spent < budget or rounds < ROUNDS:
        for name, fn in fns.items():
            n = batches[name]
            start = time.process_time()
            for _ in range(n):
                fn()
            took = time.process_time() - start
            spent += took
            samples[name].append(took / n)
        rounds += 1
    return samples


def _documents() -> list[dict]:
    corpus = sorted((ROOT / "tests" / "data" / "validate" / "corpus").glob("valid-*.json"))
    return [json.loads(p.read_text()) for p in corpus]


def _stream():
    from openengine.v1 import load_pb2

    msgs = []
    start = 1_700_000_000 * 1_000_000_000     # a wall-clock reading: zero is no timestamp
    settings = load_pb2.WatchLoadResponse(sequence=0, timestamp_unix_nanos=start)
    settings.settings.interval_ms, settings.settings.heartbeat_ms = 100, 1000
    settings.settings.instance_id = "engine-1"
    msgs.append(settings)
    for seq in range(1, 2001):
        msg = load_pb2.WatchLoadResponse(sequence=seq, timestamp_unix_nanos=start + seq * 100_000_000)
        load = msg.snapshot.load
        load.instance_id = "engine-1"
        load.timestamp_unix_nanos = start + seq * 100_000_000
        load.running_requests, load.queued_requests, load.used_kv_blocks = seq % 64, seq % 7, seq * 3
        load.total_kv_blocks, load.running_tokens, load.waiting_tokens = 100000, seq * 50, seq * 5
        load.prefill_batch_size, load.decode_batch_size = 4, 32
        msgs.append(msg)
    return msgs


def collect() -> list[dict]:
    import fastjsonschema
    import jsonschema

    from openengine.validate import check_capabilities, document_from_json, WatchLoadChecker

    schema = json.loads((ROOT / "schemas" / "capabilities.schema.json").read_text())
    slow = jsonschema.Draft202012Validator(schema)
    fast = fastjsonschema.compile(schema)
    docs = _documents()
    messages = [document_from_json(d)[0].capabilities for d in docs]

    def generated():
        for m in messages:
            check_capabilities(m)

    def generated_json():
        for d in docs:
            check_capabilities(document_from_json(d)[0].capabilities)

    def with_jsonschema():
        for d in docs:
            slow.is_valid(d)

    def with_fastjsonschema():
        for d in docs:
            fast(d)

    t_gen = _per_call(generated)
    t_gen_json = _per_call(generated_json)
    t_fjs = _per_call(with_fastjsonschema)
    # The goal's two sides, in interleaved rounds.
    paired = _rounds({"ours": generated, "jsonschema": with_jsonschema})
    speedups = [js / ours for ours, js in zip(paired["ours"], paired["jsonschema"])]
    t_js = _per_call(with_jsonschema)

    from openengine.v1 import load_pb2

    stream = _stream()
    wire = [m.SerializeToString() for m in stream]
    parsed = [load_pb2.WatchLoadResponse.FromString(b) for b in wire]

    def parse_all():
        for b in wire:
            load_pb2.WatchLoadResponse.FromString(b)

    def check_all():
        checker = WatchLoadChecker(instance_id="engine-1", clock=lambda: 0.0)
        feed = checker.feed
        for m in parsed:
            feed(m, 0.0)

    def read_changing_values():
        # Not a check: only the reads every message-based checker needs because these values
        # change with every message (sequence, the message's and the snapshot's timestamps).
        for m in parsed:
            m.sequence
            m.timestamp_unix_nanos
            m.snapshot.load.timestamp_unix_nanos

    per_stream = _side_by_side({"parse": parse_all, "check": check_all, "reads": read_changing_values})
    t_parse, t_check, t_reads = (per_stream[k] / len(wire) for k in ("parse", "check", "reads"))
    n = len(docs)

    def record(name: str, value: float, unit: str) -> dict:
        return {"name": name, "value": value, "unit": unit, "goal": None, "verdict": None}

    return [
        record("validators.capabilities_per_doc_us", round(t_gen / n * 1e6, 2), "us"),
        {**at_least("validators.speedup_vs_jsonschema", speedups, 20, "x", digits=1,
                    note="jsonschema's CPU per document / the capability validator's, per round").as_dict(),
         "group": "validators"},
        record("validators.speedup_vs_fastjsonschema", round(t_fjs / t_gen, 2), "x"),
        record("validators.speedup_vs_jsonschema_from_json", round(t_js / t_gen_json, 2), "x"),
        record("validators.watchload_check_per_msg_us", round(t_check * 1e6, 3), "us"),
        record("validators.watchload_parse_per_msg_us", round(t_parse * 1e6, 3), "us"),
        record("validators.watchload_check_over_parse", round(t_check / t_parse, 2), "ratio"),
        record("validators.watchload_changing_reads_over_parse", round(t_reads / t_parse, 2), "ratio"),
    ]


def main() -> int:
    figures = collect()
    width = max(len(f["name"]) for f in figures)
    for f in figures:
        goal = f" (goal {f['goal']}: {f['verdict']})" if f["goal"] else ""
        print(f"{f['name']:<{width}}  {f['value']:>10} {f['unit']}{goal}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
