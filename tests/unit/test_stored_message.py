"""A message's JSON as the store keeps it: defaults left out, every field read back."""

from __future__ import annotations

from typing import Any

import orjson

from messaging import ids
from messaging.store.schema import (
    pack_message,
    senders,
    unpack_message,
    with_sender,
    without_sender,
)

PID = "prj_0123456789ab"


def plain(mid: str) -> dict[str, Any]:
    return {
        "id": mid, "project_id": PID, "thread_id": mid, "revision": 1,
        "from": "Alice [0f7f62]", "sender_name": "Alice",
        "sender_id": "agt_0123456789abcdef0123456789ab",
        "sender_location": {"project_key": "/srv/app", "bound_source": None},
        "to": ["Bob"], "cc": [], "bcc": [], "subject": "Handoff", "body_md": "# Done\n",
        "topic": None, "importance": "normal", "ack_required": False,
        "delivery_policy": "checked", "resource_notice": None, "summary": None,
        "in_reply_to": None, "probe": False,
    }


def test_a_plain_message_is_stored_without_its_defaults_and_read_back_whole() -> None:
    msg = plain(ids.new_message_id(PID))
    stored = pack_message(msg)
    assert orjson.loads(stored) == {
        "id": msg["id"], "from": "Alice [0f7f62]", "sender_name": "Alice",
        "sender_id": msg["sender_id"],
        "sender_location": {"project_key": "/srv/app"}, "to": ["Bob"],
        "subject": "Handoff", "body_md": "# Done\n"}
    back = unpack_message(stored)
    assert back == msg
    assert list(back) == list(msg)  # the order answers had


def test_fields_away_from_their_defaults_are_kept() -> None:
    mid = ids.new_message_id(PID)
    msg = {**plain(mid), "thread_id": ids.new_message_id(PID), "revision": 2,
           "sender_location": {"project_key": "/srv/app",
                               "bound_source": {"kind": "t3", "thread_id": "th-1"}},
           "cc": ["Carol"], "bcc": ["Dan"], "topic": "auth", "importance": "high",
           "ack_required": True, "delivery_policy": "best_effort",
           "resource_notice": {"resource": "db", "state": "busy"}, "summary": "short",
           "in_reply_to": ids.new_message_id(PID), "probe": True}
    # Only its project, which its id says, is left out.
    assert orjson.loads(pack_message(msg)) == {k: v for k, v in msg.items() if k != "project_id"}
    assert unpack_message(pack_message(msg)) == msg


def test_falsy_values_that_are_not_the_default_are_kept() -> None:
    msg = {**plain(ids.new_message_id(PID)), "topic": "", "summary": "", "revision": 0}
    stored = orjson.loads(pack_message(msg))
    assert (stored["topic"], stored["summary"], stored["revision"]) == ("", "", 0)
    assert unpack_message(pack_message(msg)) == msg


def test_fields_of_other_kinds_of_message_follow_as_stored() -> None:
    # An idle notice carries a field of its own; an id from elsewhere keeps its project.
    msg = {**plain("msg_notanid"), "idle_notice": {"state": "idle", "target": "Bob"}}
    stored = orjson.loads(pack_message(msg))
    assert stored["project_id"] == PID and "thread_id" not in stored
    back = unpack_message(pack_message(msg))
    assert back == msg and list(back)[-1] == "idle_notice"


def test_read_back_defaults_are_fresh_lists() -> None:
    stored = pack_message(plain(ids.new_message_id(PID)))
    first = unpack_message(stored)
    first["cc"].append("Mallory")
    assert unpack_message(stored)["cc"] == []


def test_admission_puts_the_sender_fields_first_and_they_read_back_in_place() -> None:
    msg = {**plain(ids.new_message_id(PID)), "via": "Sub [91c2de]",
           "via_id": "agt_0123456789abcdef0123456789ac"}
    head = orjson.dumps({k: msg[k] for k in ("from", "sender_name", "sender_id", "via",
                                             "via_id")}).decode()
    stored = with_sender(head, pack_message(without_sender(msg)))
    assert stored.startswith('{"from":"Alice [0f7f62]"')
    assert unpack_message(stored) == unpack_message(pack_message(msg))
    assert list(unpack_message(stored))[4:9] == ["from", "sender_name", "sender_id", "via",
                                                 "via_id"]
    assert senders(unpack_message(stored)) == {msg["sender_id"], msg["via_id"]}


def test_a_message_stored_before_sender_names_reads_its_name_from_from() -> None:
    msg = {k: v for k, v in plain(ids.new_message_id(PID)).items() if k != "sender_name"}
    back = unpack_message(pack_message({**msg, "from": "Alice"}))
    assert (back["from"], back["sender_name"]) == ("Alice", "Alice")
