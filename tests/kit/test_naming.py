"""One naming algorithm for what the generators write and the runtime reads back."""

from __future__ import annotations

import pytest

from openengine.contractkit.naming import (
    enum_spelling, enum_value_name, enum_value_prefix, snake_case, streaming_shape, streams_from_client,
    streams_from_server, upper_snake_case,
)
from openengine.contract import catalogue


@pytest.mark.parametrize(("name", "words"), [
    ("GuidedDecodingMode", "GUIDED_DECODING_MODE"),
    ("GPUKind", "GPU_KIND"),            # an acronym stays one word
    ("KVTransfer", "KV_TRANSFER"),
    ("HTTP2Proxy", "HTTP2_PROXY"),
    ("Kv", "KV"),
    ("Role", "ROLE"),
    ("TaskFamily", "TASK_FAMILY"),
])
def test_words_of_a_camel_case_name(name, words):
    assert upper_snake_case(name) == words
    assert snake_case(name) == words.lower()


def test_enum_values_round_trip_through_their_spelling():
    assert enum_value_prefix("GPUKind") == "GPU_KIND_"
    assert enum_value_name("GPUKind", "h100") == "GPU_KIND_H100"
    assert enum_spelling("GPUKind", "GPU_KIND_H100") == "h100"
    assert enum_value_name("PauseMode", "unspecified") == "PAUSE_MODE_UNSPECIFIED"


def test_the_runtime_reads_the_spellings_the_generator_wrote():
    """Every enum limit of the compiled contract maps back to registry spellings without a leftover
    prefix, which is what a mismatched naming algorithm would leave."""
    enum_limits = [lim for p in catalogue().profiles for lim in p.limits if lim.enum is not None]
    assert enum_limits
    for lim in enum_limits:
        spellings = lim.enum_spellings()
        assert spellings and all(s == s.lower() and not s.startswith(snake_case(lim.enum.name)) for s in spellings)


@pytest.mark.parametrize(("client", "server", "shape"), [
    (False, False, "unary"), (False, True, "server"), (True, False, "client"), (True, True, "bidi")])
def test_streaming_shape_both_ways(client, server, shape):
    assert streaming_shape(client, server) == shape
    assert (streams_from_client(shape), streams_from_server(shape)) == (client, server)
