"""SequenceStops: when a sequence must end on a stop condition and what of its text is sent
(REQ-CORE-013)."""

from __future__ import annotations

import pytest

from openengine.serve import SequenceStops
from openengine.v1 import generation_pb2


def feed(stops: SequenceStops, pieces) -> tuple[str, str | None, int]:
    """Feed one token per piece until a stop: (text sent, stop reason, tokens fed)."""
    sent = ""
    for count, piece in enumerate(pieces, 1):
        text, stop = stops.add(count, piece)
        sent += text
        if stop is not None:
            return sent, stop, count
    return sent + stops.rest(), None, len(pieces)


@pytest.mark.parametrize("include, sent", [(False, "one tw"), (True, "one two!")])
def test_a_stop_string_split_across_tokens_ends_the_sequence_where_it_completes(include, sent):
    stops = SequenceStops(generation_pb2.SamplingParams(stop=["o!", "xyz"], include_stop_in_output=include))
    assert feed(stops, ["one", " tw", "o", "!", " three"]) == (sent, "o!", 4)


def test_text_that_may_begin_a_stop_string_is_held_back_only_while_it_may():
    stops = SequenceStops(generation_pb2.SamplingParams(stop=["abc"]))
    assert stops.add(1, "xa") == ("x", None)
    assert stops.add(2, "b") == ("", None)
    assert stops.add(3, "d") == ("abd", None)
    assert stops.rest() == ""


def test_nothing_after_a_match_is_sent_even_at_the_end():
    stops = SequenceStops(generation_pb2.SamplingParams(stop=["b"]))
    assert feed(stops, ["a", "bc"]) == ("a", "b", 2)
    assert stops.rest() == ""


def test_stop_token_ids_and_eos_end_the_sequence_at_that_token_unless_eos_is_ignored():
    sampling = generation_pb2.SamplingParams(stop_token_ids=[7])
    assert SequenceStops(sampling, eos_token_id=2).add(7, "x") == ("x", "7")
    assert SequenceStops(sampling, eos_token_id=2).add(2, "") == ("", "")
    sampling.ignore_eos = True
    assert SequenceStops(sampling, eos_token_id=2).add(2, "") == ("", None)
    assert SequenceStops(sampling, eos_token_id=2).add(7, "") == ("", "7")


def test_no_stop_before_min_tokens_and_a_match_completed_before_it_is_not_found_later():
    sampling = generation_pb2.SamplingParams(stop=["a"], stop_token_ids=[9], min_tokens=3)
    stops = SequenceStops(sampling)
    assert [stops.add(9, "a"), stops.add(9, "b")] == [("a", None), ("b", None)]
    assert stops.add(5, "c") == ("c", None)
    assert stops.add(5, "xa") == ("x", "a")
