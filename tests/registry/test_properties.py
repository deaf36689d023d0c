"""Property tests: whatever the input, the loader raises nothing but `SourceError`, and the rules
raise nothing at all on any input the loader accepts."""

from __future__ import annotations

import copy
import io
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from ruamel.yaml import YAML

from oespec.check import run_rules
from oespec.registry import SourceError, load_registry, load_registry_text, parse_text, read_file

# Property tests over many generated inputs (the fast lane leaves them out).
pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[1] / "data" / "registry"
FULL = (DATA / "valid" / "full" / "profiles.yaml").read_text()
MINIMAL = (DATA / "valid" / "minimal" / "profiles.yaml").read_text()
FULL_DATA = YAML(typ="safe").load(FULL)

# Hypothesis's own default count: the inputs are small and each costs a parse or a small check.
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# A whole-registry example costs a dump, a full load and a check (about 0.1 CPU-s): 40 per run, each
# up to four mutations of the full fixture. Every run draws others, and the example database
# replays a failure it found first on the next run.
REGISTRY_SETTINGS = settings(SETTINGS, max_examples=40)

# Words that make random documents reach deep into the resolver and the rules.
VOCABULARY = [
    "registry", "profiles", "revision", "package", "name", "version", "mandatory", "scope", "roles",
    "summary", "description", "history", "changes", "rpcs", "request", "response", "streaming",
    "since", "messages", "capability", "field", "number", "message", "limits", "type", "default",
    "minimum", "maximum", "unit", "values", "enum", "requires", "profile", "incompatible_with",
    "when", "limit", "equals", "not_equals", "at_least", "at_most", "contains", "reason", "deprecated",
    "1.0", "1.1", "2.0", "0.1", "1.10", ">= 1.0", "< 1.0", ">= 2.0, < 1.0", "== 1.0",
    "openengine.core", "openengine.kv", "openengine.tasks", "openengine.load", "acme.turbo",
    "openengine.core.speculative_decoding", "openengine.core.guided_decoding_modes",
    "openengine.v1", "openengine.v1.Inference/Generate", "acme.v1.Turbo/Boost", "GenerateRequest",
    "uint32", "uint64", "int32", "double", "string", "bool", "enum", "repeated enum", "repeated uint32",
    "engine", "model", "role", "prefill", "decode", "unary", "server", "bidi", "json_schema", "regex",
    "unspecified", "GenerationCapabilities", "Capabilities", "generation", "",
]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.sampled_from(VOCABULARY),
    st.sampled_from([0, 1, 2, 10, 11, 19000, 2**32, 2**64, -1]),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(VOCABULARY) | st.text(max_size=6), children, max_size=5),
    ),
    max_leaves=40,
)


def _dump(data) -> str:
    out = io.StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.dump(data, out)
    return out.getvalue()


def _check(text: str) -> None:
    """Load and check `text`; a `SourceError` is the one allowed failure of the loader."""
    try:
        resolved = load_registry_text(text)
    except SourceError as err:
        assert err.loc.line >= 0 and err.message
        return
    for d in run_rules(resolved):
        assert d.rule_id.startswith("OE") and d.line >= 0


@SETTINGS
@given(st.text())
def test_parse_text_raises_only_source_error(text):
    try:
        parse_text(text)
    except SourceError:
        pass


@SETTINGS
@given(st.binary())
def test_read_file_raises_only_source_error(data):
    fd, name = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        try:
            read_file(name)
        except SourceError as err:
            assert err.path == name
    finally:
        os.unlink(name)


yaml_punctuation = st.sampled_from(list(":-?[]{},&*!|>'\"%@`#\t\n ") + ["\x00", "\ufeff", "\u2028", "<<", "---", "..."])


@SETTINGS
@given(st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=2),
                          yaml_punctuation | st.text(max_size=3)), min_size=1, max_size=6))
def test_text_mutations_of_a_valid_registry_never_crash(edits):
    text = list(MINIMAL)
    for position, kind, piece in edits:
        at = position % (len(text) + 1)
        if kind == 0:
            text[at:at] = list(piece)
        elif kind == 1:
            del text[at:at + len(piece) + 1]
        else:
            text[at:at + 1] = list(piece)
    _check("".join(text))


@SETTINGS
@given(documents)
def test_random_documents_never_crash(data):
    _check(_dump(data))


@SETTINGS
@given(st.dictionaries(st.sampled_from(VOCABULARY), documents, max_size=4))
def test_random_registry_headers_never_crash(profile):
    _check(_dump({"registry": {"revision": 1, "package": "openengine.v1"}, "profiles": [profile]}))


def _paths(node, prefix=()):
    """Every path into a plain YAML tree."""
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _paths(child, prefix + (index,))


ALL_PATHS = [p for p in _paths(FULL_DATA) if p]


def _mutate(data, path, operation, value):
    *parents, last = path
    container = data
    for step in parents:
        container = container[step]
    if operation == "replace":
        container[last] = value
    elif operation == "delete":
        del container[last]
    elif operation == "duplicate" and isinstance(container, list):
        container.insert(last, copy.deepcopy(container[last]))
    elif operation == "insert" and isinstance(container, dict):
        container[str(value)] = copy.deepcopy(container[last])


@REGISTRY_SETTINGS
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(["replace", "delete", "duplicate", "insert"]),
                          documents), min_size=1, max_size=4))
def test_mutations_of_a_valid_registry_never_crash(mutations):
    data = copy.deepcopy(FULL_DATA)
    for path, operation, value in mutations:
        try:
            _mutate(data, path, operation, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or reshaped this path
    _check(_dump(data))


@REGISTRY_SETTINGS
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(VOCABULARY + [0, 1, 2, 19000, 2**40, -5, True, [], ["1.0"]])),
                min_size=1, max_size=3))
def test_plausible_value_swaps_pass_the_schema_and_never_crash(swaps):
    """Values from the registry's own vocabulary often keep the document schema-valid, so the rules
    run on odd but well-typed registries (unknown names, reversed ranges, clashing numbers)."""
    data = copy.deepcopy(FULL_DATA)
    for path, value in swaps:
        try:
            _mutate(data, path, "replace", copy.deepcopy(value))
        except (KeyError, IndexError, TypeError):
            continue
    _check(_dump(data))


def test_the_full_fixture_reaches_the_rules():
    # Guard for the property tests above: their base document must itself load into a model.
    assert load_registry(DATA / "valid" / "full" / "profiles.yaml").registry is not None
