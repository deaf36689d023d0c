"""The generated JSON Schema and the Python validator agree on every capability document, for
the rules a schema can express (`PYTHON_ONLY_RULES` are excluded explicitly)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import fastjsonschema
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openengine.validate import PYTHON_ONLY_RULES, Severity, document_from_json, validate_capabilities

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "tests" / "data" / "validate" / "corpus").glob("*.json"))


@lru_cache(maxsize=1)
def schema():
    return json.loads((ROOT / "schemas" / "capabilities.schema.json").read_text())


@lru_cache(maxsize=1)
def validators():
    return jsonschema.Draft202012Validator(schema()), fastjsonschema.compile(schema())


def schema_verdicts(doc) -> tuple[bool, bool]:
    slow, fast = validators()
    try:
        fast(doc)
        fast_ok = True
    except fastjsonschema.JsonSchemaException:
        fast_ok = False
    return slow.is_valid(doc), fast_ok


def python_errors(doc) -> tuple[set[str], set[str]]:
    """(errors of schema-expressible rules, errors of Python-only rules)."""
    parsed, errors = document_from_json(doc)
    report = validate_capabilities(parsed.capabilities)
    found = {v.rule_id for v in list(errors) + list(report.violations) if v.severity is Severity.ERROR}
    return found - PYTHON_ONLY_RULES, found & PYTHON_ONLY_RULES


def test_corpus_is_not_empty():
    kinds = {p.name.split("-", 1)[0] for p in CORPUS}
    assert kinds == {"valid", "invalid", "pyonly"}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_corpus_verdicts(path):
    doc = json.loads(path.read_text())
    kind, _, rest = path.stem.partition("-")
    expressible, python_only = python_errors(doc)
    slow_ok, fast_ok = schema_verdicts(doc)
    if kind == "valid":
        assert (expressible, python_only, slow_ok, fast_ok) == (set(), set(), True, True)
        return
    rule = rest.split("-", 1)[0]
    if kind == "invalid":
        assert rule in expressible
        assert (slow_ok, fast_ok) == (False, False)
    else:
        assert rule in PYTHON_ONLY_RULES and rule in python_only and not expressible
        assert (slow_ok, fast_ok) == (True, True)


# -- generated documents ------------------------------------------------------------------------
GOOD_NAMES = ["openengine.load", "openengine.kv", "openengine.tasks", "openengine.admin", "com.example.batch"]
BAD_NAMES = ["openengine.teleport", "Bad.Name", "", "single"]
# capability field (json, original) -> owning profile, limits (json, original) -> (valid, invalid) values
FIELDS = {
    ("core", "core", "openengine.core"): {
        ("maxLogprobs", "max_logprobs"): (st.integers(0, 1024), st.integers(1025, 1100)),
        ("maxSequences", "max_sequences"): (st.integers(1, 1024), st.just(0)),
        ("speculativeDecoding", "speculative_decoding"): (st.booleans(), st.just("yes")),
        ("pipelineParallelSize", "pipeline_parallel_size"): (st.integers(1, 3), st.just(0)),
        ("minP", "min_p"): (st.booleans(), st.just(1)),
        ("guidedDecodingModes", "guided_decoding_modes"): (
            st.lists(st.sampled_from([1, 6, "GUIDED_DECODING_MODE_REGEX", "GUIDED_DECODING_MODE_CHOICE"]), max_size=3),
            st.lists(st.sampled_from([0, 7, "GUIDED_DECODING_MODE_UNSPECIFIED"]), min_size=1, max_size=2)),
    },
    ("observability", "observability", "openengine.load"): {
        ("minWatchIntervalMs", "min_watch_interval_ms"): (st.integers(1, 60000), st.sampled_from([0, 60001])),
        ("changeDriven", "change_driven"): (st.booleans(), st.just(None)),
    },
    ("kv", "kv", "openengine.kv"): {
        ("kvBlockSize", "kv_block_size"): (st.integers(1, 4096), st.sampled_from([0, 4097])),
        ("totalKvBlocks", "total_kv_blocks"): (st.one_of(st.integers(0, 2**40), st.integers(0, 2**40).map(str)),
                                               st.just(-1)),
        ("kvTransferBackends", "kv_transfer_backends"): (st.lists(st.sampled_from(["nixl", "mooncake"]), max_size=2),
                                                         st.just([1])),
    },
    ("adapters", "adapters", "openengine.adapters"): {
        ("maxLoras", "max_loras"): (st.integers(1, 4096), st.just(0)),
        ("maxLoraRank", "max_lora_rank"): (st.integers(1, 512), st.integers(513, 600)),
    },
    ("runtimeEvents", "runtime_events", "openengine.runtime-events"): {
        ("eventKinds", "event_kinds"): (st.lists(st.sampled_from([1, 4, "RUNTIME_EVENT_KIND_STATE_CHANGED"]), max_size=2),
                                        st.just([5])),
    },
    ("admin", "admin", "openengine.admin"): {
        ("maxSleepLevel", "max_sleep_level"): (st.integers(1, 8), st.sampled_from([0, 9])),
        ("pauseModes", "pause_modes"): (st.lists(st.sampled_from(["PAUSE_MODE_WAIT", 3]), max_size=2), st.just([0])),
    },
}


def _rarely(draw) -> bool:
    return draw(st.integers(0, 19)) == 7   # not a boundary value, which hypothesis favours


@st.composite
def profiles(draw, names):
    entries = []
    for name in names:
        entry = {"name": name}
        if not _rarely(draw):
            entry["major"] = 1 if not _rarely(draw) else draw(st.sampled_from([0, 2]))
        if draw(st.booleans()):
            entry["minor"] = draw(st.integers(0, 3))
        entries.append(entry)
    return entries


@st.composite
def documents(draw):
    """Mostly valid documents, each with a few rare mutations."""
    doc = {}
    names = [] if _rarely(draw) else ["openengine.core"]
    names += draw(st.lists(st.sampled_from(GOOD_NAMES), max_size=2, unique=True))
    if _rarely(draw):
        names.append(draw(st.sampled_from(BAD_NAMES)))
    for (json_name, name, owner), limits in FIELDS.items():
        if not draw(st.integers(0, 2)):
            continue
        if owner not in names and not _rarely(draw):
            names.append(owner)
        body = {}
        for (lj, ln), (good, bad) in limits.items():
            if draw(st.booleans()):
                body[draw(st.sampled_from([lj, ln]))] = draw(bad if _rarely(draw) else good)
        doc[draw(st.sampled_from([json_name, name]))] = body
    if not _rarely(draw):
        doc[draw(st.sampled_from(["profiles"]))] = draw(profiles(names))
    return doc


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_generated_documents_agree(doc):
    expressible, _ = python_errors(doc)
    slow_ok, fast_ok = schema_verdicts(doc)
    assert slow_ok == fast_ok == (not expressible), (doc, expressible)


# -- load documents: 64-bit integers as strings ----------------------------------------------------
@lru_cache(maxsize=None)
def load_validators(name):
    doc = json.loads((ROOT / "schemas" / name).read_text())
    return jsonschema.Draft202012Validator(doc, format_checker=jsonschema.FormatChecker()), fastjsonschema.compile(doc)


def load_verdicts(doc, name="load_info.schema.json", message=("server_pb2", "LoadInfo")) -> tuple[bool, bool, bool]:
    """(Python accepts, jsonschema accepts, fastjsonschema accepts) for one LoadInfo-like document."""
    import importlib

    from openengine.validate import message_from_json

    module, cls = message
    _, errors = message_from_json(doc, getattr(importlib.import_module(f"openengine.v1.{module}"), cls))
    slow, fast = load_validators(name)
    try:
        fast(doc)
        fast_ok = True
    except fastjsonschema.JsonSchemaException:
        fast_ok = False
    return not errors, slow.is_valid(doc), fast_ok


@pytest.mark.parametrize("text, ok", [
    ("0", True), ("18446744073709551615", True), ("+18446744073709551615", True), ("00018446744073709551615", True),
    ("18446744073709551616", False), ("99999999999999999999", False), ("184467440737095516150", False),
    ("-1", False), ("-0", False), ("1_000", False), ("1e3", False), (" 5", False), ("", False), ("0x10", False),
])
def test_uint64_strings_agree(text, ok):
    assert load_verdicts({"usedKvBlocks": text}) == (ok, ok, ok)
    assert load_verdicts({"ranks": [{"used_kv_blocks": text}]}) == (ok, ok, ok)
    assert load_verdicts({"sequence": "1", "timestampUnixNanos": text}, "watch_load_response.schema.json",
                         ("load_pb2", "WatchLoadResponse")) == (ok, ok, ok)


@st.composite
def int64_strings(draw):
    value = draw(st.integers(-(2**64), 2**65) | st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63)]))
    text = str(value)
    if draw(st.booleans()):
        text = draw(st.sampled_from(["+", "0", "00", ""])) + text if value >= 0 else "-0" + text[1:]
    return text


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int64_strings(), int64_strings())
def test_generated_load_documents_agree(timestamp, number):
    doc = {"timestampUnixNanos": timestamp, "usedKvBlocks": number}
    python_ok, slow_ok, fast_ok = load_verdicts(doc)
    assert python_ok == slow_ok == fast_ok, (doc, python_ok, slow_ok, fast_ok)
