"""The upstream-only engine (tests/conformance/upstream_engine) behaves as upstream v1's API
reference says, and each planted variant breaks the clause it names. Both the engine and the
driver that judges it here run in `python -S` children on stubs generated from the pinned
descriptor image, so neither sees the project's own `openengine` package."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conformance.upstream_engine.launch import (
    child_command, child_env, generate_stubs, run_driver, start_upstream_engine, stop_upstream_engine,
    upstream_engine,
)
from tests.conformance.upstream_engine.variants import VARIANTS

# Engines started as subprocesses, mostly waiting on their streams (see tests/conftest.py).
pytestmark = pytest.mark.waits

# One slot, so the driver sees a request queue; fast tokens and a short limit keep runs brief.
OPTIONS = {"slots": 1, "token_ms": 1, "max_output_tokens": 400}

# The driver's check that each variant must fail (it may fail others too).
BROKEN_CHECK = {
    "ignores-max-tokens": "stream", "no-usage": "stream", "usage-wrong-total": "stream",
    "usage-on-every-response": "stream", "missing-output-index": "stream",
    "no-finished-event": "stream", "finished-twice": "stream", "request-id-not-echoed": "stream",
    "length-reported-as-stop": "stream", "stop-text-ignored": "stop-text",
    "stop-token-ignored": "stop-token", "stop-text-in-output": "stop-text", "no-stop-match": "eos",
    "min-tokens-ignored": "min-tokens", "seed-ignored": "seed", "num-sequences-ignored": "num-sequences",
    "logprobs-ignored": "logprobs", "abort-ignored": "abort", "abort-no-cancelled": "abort",
    "abort-unknown-ok": "abort-status", "abort-finished-not-found": "abort-status",
    "abort-no-target-ok": "abort-status", "load-never-idle": "load", "load-always-zero": "load",
    "revision-too-new": "server-info", "schema-revision-zero": "server-info",
    "model-info-unknown-ok": "model-info", "health-not-ready": "health",
}

# Findings named apart from the driver check that reports them.
CHECK_OF = {"abort": "abort-and-load", "load": "abort-and-load", "abort-status": "abort-and-load"}


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return generate_stubs(tmp_path_factory.mktemp("upstream-stubs"))


def _drive(stubs, targets: dict[str, str]) -> dict:
    done = run_driver(stubs, *(f"{name}={address}" for name, address in targets.items()))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_variant_table_is_printed_and_unknown_names_are_refused():
    listed = subprocess.run(child_command("engine.py", "unused", "--list-variants"), capture_output=True,
                            text=True, check=True, env=child_env()).stdout.splitlines()
    assert [line.split()[0] for line in listed] == list(VARIANTS)
    assert set(BROKEN_CHECK) == set(VARIANTS)
    refused = subprocess.run(child_command("engine.py", "unused", "--variant", "no-such-defect"),
                             capture_output=True, text=True, check=False, env=child_env())
    assert refused.returncode == 2 and "no-such-defect" in refused.stderr


def test_the_clean_engine_answers_as_upstream_documents(stubs):
    with upstream_engine(stubs, **OPTIONS) as address:
        assert address.startswith("127.0.0.1:") and not address.endswith(":0")
        found = _drive(stubs, {"clean": address})
    assert found == {"clean": {}}


@pytest.mark.slow
def test_each_variant_breaks_the_clause_it_names(stubs):
    engines = {}
    try:
        for name in VARIANTS:
            engines[name] = start_upstream_engine(stubs, name, **OPTIONS)
        # Each variant only through the check meant to catch it, which keeps the run short.
        found = _drive(stubs, {name: f"{address}/{CHECK_OF.get(BROKEN_CHECK[name], BROKEN_CHECK[name])}"
                               for name, (address, _) in engines.items()})
    finally:
        for _, process in engines.values():
            stop_upstream_engine(process)
    missed = {name: found[name] for name, check in BROKEN_CHECK.items() if not found[name].get(check)}
    assert missed == {}
