"""SequenceStops: when a sequence must end on a stop condition and what of its text is sent
(REQ-CORE-013)."""

from __future__ import annotations

import pytest

from openengine.serve import SequenceStops
from openengine.v1 import generation_pb2


def options(stop_texts=(), stop_token_ids=(), **fields) -> generation_pb2.StoppingOptions:
    conditions = [generation_pb2.StopCondition(stop_text=t) for t in stop_texts]
    conditions += [generation_pb2.StopCondition(stop_token_id=t) for t in stop_token_ids]
    return generation_pb2.StoppingOptions(conditions=conditions, **fields)


def matched(stop) -> str | int | None:
    return None if stop is None else getattr(stop, stop.WhichOneof("match"))


def feed(stops: SequenceStops, pieces) -> tuple[str, str | None, int]:
    """Feed one token per piece until a stop: (text sent, what matched, tokens fed)."""
    sent = ""
    for count, piece in enumerate(pieces, 1):
        text, stop = stops.add(count, piece)
        sent += text
        if stop is not None:
            return sent, matched(stop), count
    return sent + stops.rest(), None, len(pieces)


@pytest.mark.parametrize("include, sent", [(False, "one tw"), (True, "one two!")])
def test_a_stop_string_split_across_tokens_ends_the_sequence_where_it_completes(include, sent):
    stops = SequenceStops(options(["o!", "xyz"], include_stop_in_output=include))
    assert feed(stops, ["one", " tw", "o", "!", " three"]) == (sent, "o!", 4)


def test_text_that_may_begin_a_stop_string_is_held_back_only_while_it_may():
    stops = SequenceStops(options(["abc"]))
    assert stops.add(1, "xa") == ("x", None)
    assert stops.add(2, "b") == ("", None)
    assert stops.add(3, "d") == ("abd", None)
    assert stops.rest() == ""


def test_nothing_after_a_match_is_sent_even_at_the_end():
    stops = SequenceStops(options(["b"]))
    assert feed(stops, ["a", "bc"]) == ("a", "b", 2)
    assert stops.rest() == ""


def test_stop_token_ids_and_eos_end_the_sequence_at_that_token_unless_eos_is_ignored():
    def first(stopping, token, text):
        sent, stop = SequenceStops(stopping, eos_token_id=2).add(token, text)
        return sent, matched(stop)

    stopping = options(stop_token_ids=[7])
    assert first(stopping, 7, "x") == ("", 7)
    assert first(options(stop_token_ids=[7], include_stop_in_output=True), 7, "x") == ("x", 7)
    assert first(stopping, 2, "</s>") == ("", 2)
    stopping.ignore_eos = True
    assert first(stopping, 2, "") == ("", None)
    assert first(stopping, 7, "") == ("", 7)


def test_no_stop_before_min_tokens_and_a_match_completed_before_it_is_not_found_later():
    stops = SequenceStops(options(["a"], [9], min_tokens=3))
    assert [stops.add(9, "a"), stops.add(9, "b")] == [("a", None), ("b", None)]
    assert stops.add(5, "c") == ("c", None)
    text, stop = stops.add(5, "xa")
    assert (text, matched(stop)) == ("x", "a")
