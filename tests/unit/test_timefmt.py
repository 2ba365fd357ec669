"""Time on the wire: RFC 3339 UTC with microseconds, exact to the microsecond."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from messaging.timefmt import now_us, rfc3339

WIRE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# From the first microsecond after the epoch to the last one of year 9999.
MICROS = st.integers(1, (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - EPOCH)
                     // timedelta(microseconds=1))


def parse(text: str) -> int:
    """An RFC 3339 UTC time back to microseconds since the epoch."""
    dt = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (dt - EPOCH) // timedelta(microseconds=1)


@given(MICROS)
@example(1)
@example(1_000_000)
def test_a_time_is_rfc3339_utc_with_six_fraction_digits_and_z(us: int):
    assert WIRE.fullmatch(rfc3339(us) or "")


@given(MICROS)
@example(1_796_421_665_123_456)
@example(1_796_421_665_000_001)
def test_a_time_comes_back_to_the_same_microsecond(us: int):
    text = rfc3339(us)
    assert text is not None and parse(text) == us


@given(MICROS)
def test_a_time_stored_as_a_decimal_string_reads_the_same(us: int):
    assert rfc3339(str(us)) == rfc3339(us)


def test_a_known_time_reads_as_api_md_shows_it():
    us = parse("2026-11-29T22:01:05.123456Z")
    assert rfc3339(us) == "2026-11-29T22:01:05.123456Z"


@pytest.mark.parametrize("missing", [None, "", 0, "0"])
def test_a_missing_time_is_none(missing: int | str | None):
    assert rfc3339(missing) is None


def test_now_is_microseconds_since_the_epoch():
    before = time.time_ns() // 1000
    now = now_us()
    assert before <= now <= time.time_ns() // 1000
