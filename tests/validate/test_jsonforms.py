"""The shared proto3 JSON forms: integer strings within a range, and Timestamp strings that name
a real date and time, checked against Python's own integers and calendar."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openengine.contractkit.jsonforms import TIMESTAMP_PATTERN, integer_pattern, matches

RANGES = [(0, 2**64 - 1), (-(2**63), 2**63 - 1), (0, 2**32 - 1), (-(2**31), 2**31 - 1), (1, 4096), (0, 1024),
          (1, 2**63 - 1), (5, 5), (-7, -3), (-5, 10), (0, 0), (100, 999), (99, 1000), (1, 2**32 - 1)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RANGES), st.integers(-(2**66), 2**66) | st.integers(-1100, 1100),
       st.sampled_from(["", "+", "0", "00"]))
def test_integer_pattern_is_exactly_the_range(bounds, value, prefix):
    lo, hi = bounds
    if value < 0:
        text = "-" + prefix.lstrip("+") + str(-value)
    else:
        text = prefix + str(value)
    assert matches(integer_pattern(lo, hi), text) == (lo <= value <= hi), (bounds, text)


@pytest.mark.parametrize("lo, hi", RANGES)
def test_integer_pattern_edges_and_bad_forms(lo, hi):
    pattern = integer_pattern(lo, hi)
    for value in (lo, hi):
        assert matches(pattern, str(value))
    for value in (lo - 1, hi + 1):
        assert not matches(pattern, str(value))
    assert matches(pattern, "-0") == (lo < 0 <= hi)
    for bad in ("", "+", "-", "1_0", "1e3", " 1", "1 ", "0x1", "1.0", "++1", "+-1"):
        assert not matches(pattern, bad), bad


def test_an_empty_range_is_an_error():
    with pytest.raises(ValueError):
        integer_pattern(3, 2)


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 10000), st.integers(0, 13), st.integers(0, 32))
def test_timestamp_pattern_accepts_exactly_the_calendar_dates(year, month, day):
    text = f"{year:04d}-{month:02d}-{day:02d}T12:30:45Z"
    try:
        datetime.date(year, month, day)
        real = year <= 9999
    except ValueError:
        real = False
    assert matches(TIMESTAMP_PATTERN, text) == real, text


@pytest.mark.parametrize("time, ok", [
    ("00:00:00Z", True), ("23:59:59.999999999Z", True), ("12:00:00+23:59", True), ("12:00:00-00:00", True),
    ("24:00:00Z", False), ("12:60:00Z", False), ("12:00:60Z", False), ("12:00:00.Z", False),
    ("12:00:00.1234567890Z", False), ("12:00:00+24:00", False), ("12:00:00z", False), ("12:00:00", False),
    ("1:2:3Z", False),
])
def test_timestamp_pattern_times_and_offsets(time, ok):
    assert matches(TIMESTAMP_PATTERN, f"2026-12-03T{time}") is ok


@pytest.mark.parametrize("text, ok", [
    ("0001-01-01T00:00:00Z", True), ("9999-12-31T23:59:59.999999999Z", True),
    ("0001-01-01T00:00:00+23:59", False), ("0001-01-01T23:00:00-01:00", False), ("9999-12-31T23:00:00-05:00", False),
    ("0001-01-02T00:00:00+23:59", True), ("9999-12-30T23:00:00-05:00", True),
])
def test_timestamp_pattern_range_edges_are_utc_only(text, ok):
    assert matches(TIMESTAMP_PATTERN, text) is ok
