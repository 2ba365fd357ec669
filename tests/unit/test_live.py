"""Pure helpers of the live side: SSE parsing, stream ids, short-form subjects."""

from __future__ import annotations

import pytest

from messaging.client import Event, parse_events
from messaging.store.live import parse_stream_id
from messaging.web.mcp_tools import short_subject


def test_events_are_parsed_with_their_id_name_and_json_data():
    lines = [": courier events after 0-0", "retry: 1000", "", "id: 5-0", "event: message",
             'data: {"a":', "data: 1}", "", "id: 6-0", "data: plain", ""]
    assert list(parse_events(iter(lines))) == [
        Event("5-0", "message", {"a": 1}), Event("6-0", "message", "plain")]


def test_a_comment_alone_is_no_event():
    assert list(parse_events(iter([": ping", "", ": ping", ""]))) == []


@pytest.mark.parametrize(("given", "parsed"), [
    ("1795997025907-0", "1795997025907-0"), ("0", "0-0"), (" 12-3 ", "12-3"),
    ("x-1", None), ("1-", None), ("1-a", None), ("", None), ("9" * 21, None)])
def test_stream_ids_from_clients_are_normalized_or_refused(given: str, parsed: str | None):
    assert parse_stream_id(given) == parsed


@pytest.mark.parametrize(("message", "subject"), [
    ("# Review auth.py\n\nbody", "Review auth.py"),
    ("\n\n  Fix the nit  \nmore", "Fix the nit"),
    ("", "(no subject)"),
    ("x" * 100, "x" * 79 + "…"),
])
def test_the_short_form_subject_is_the_first_line(message: str, subject: str):
    assert short_subject(message) == subject
