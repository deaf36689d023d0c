"""Benchmark: the generated capability validator against general-purpose JSON Schema validators.

    python -m bench.validators      # prints the table

Compared on the same capability documents (the corpus of tests/data/validate/corpus/): the
generated validator on the protobuf message (what a client holds after a gRPC call) against
`jsonschema` (Draft 2020-12) and `fastjsonschema` on the JSON document with the generated schema,
CPU time per document in interleaved rounds. What validating a WatchLoad stream costs a client is
measured where a client pays it, in bench/watchers.py.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from bench.figures import QUICK_ROUNDS, ROUNDS, Section, at_least, figure_table, info, interleaved

ROOT = Path(__file__).resolve().parents[1]
BATCH_S = 0.1   # CPU time of one side in one round


def _per_call(fn, calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls


def run(quick: bool = False) -> Section:
    import fastjsonschema
    import jsonschema

    from openengine.validate import check_capabilities, document_from_json

    schema = json.loads((ROOT / "schemas" / "capabilities.schema.json").read_text())
    slow, fast = jsonschema.Draft202012Validator(schema), fastjsonschema.compile(schema)
    corpus = sorted((ROOT / "tests" / "data" / "validate" / "corpus").glob("valid-*.json"))
    docs = [json.loads(p.read_text()) for p in corpus]
    messages = [document_from_json(d)[0].capabilities for d in docs]
    sides = {"generated": lambda: [check_capabilities(m) for m in messages],
             "jsonschema": lambda: [slow.is_valid(d) for d in docs],
             "fastjsonschema": lambda: [fast(d) for d in docs]}
    # As many calls per round as take about BATCH_S, from a first timing after a warm-up call.
    calls = {name: max(1, int(BATCH_S / max(_per_call(fn, 3), 1e-7))) for name, fn in sides.items()}
    rounds = interleaved(lambda name: _per_call(sides[name], calls[name]), tuple(sides),
                         QUICK_ROUNDS if quick else ROUNDS)
    ours = statistics.median(r[0] for r in rounds)
    g = "validators"
    figures = [
        info("validators.capabilities_per_doc_us", round(ours / len(docs) * 1e6, 2), "us", group=g,
             note=f"the generated validator on {len(docs)} documents, median round"),
        at_least("validators.speedup_vs_jsonschema", [js / gen for gen, js, _ in rounds], 20, "x", digits=1,
                 group=g, note="jsonschema's CPU per document / the capability validator's, per round"),
        info("validators.speedup_vs_fastjsonschema",
             round(statistics.median(f / gen for gen, _, f in rounds), 2), "x", group=g,
             note="fastjsonschema's CPU per document / the capability validator's, median round"),
    ]
    return Section("Validators", figures)


if __name__ == "__main__":
    print("\n".join(figure_table(run().figures)))
