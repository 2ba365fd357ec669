"""``courier watch --exec``'s environment: a message's fields as its command gets them."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata

from messaging.hosts import watching

HIDDEN = {"Cc", "Cf", "Zl", "Zp", "Cs"}
# Every character that an environment cannot hold (NUL) or that a terminal acts
# on: C0, DEL, C1, a bidi override, a line separator, a lone surrogate.
HOSTILE = "".join(chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]) + "\u202e\u2028\ud800"


def test_every_field_reaches_the_command_as_one_line_of_printable_text() -> None:
    message = {"id": "msg_1", "from": f"Mallory{HOSTILE} [abc123]", "subject": f"FYI{HOSTILE}",
               "thread_id": "t\x00", "importance": "high\x1b", "delivery_id": "dlv_1"}
    env, changed = watching.environment(message)
    printed = subprocess.run(
        [sys.executable, "-c", "import os, json; print(json.dumps({k: v for k, v in "
         "os.environ.items() if k.startswith('COURIER_')}))"],
        env=env, capture_output=True, text=True, check=True).stdout
    got = json.loads(printed)
    assert set(watching.FIELDS) <= set(got) and "COURIER_TOKEN" not in got
    for var, value in got.items():
        assert not [c for c in value if unicodedata.category(c) in HIDDEN], var
    assert got["COURIER_MESSAGE_SUBJECT"].startswith("FYI\\x00\\x01")
    assert got["COURIER_MESSAGE_IMPORTANCE"] == "high\\x1b"
    assert changed == ["COURIER_MESSAGE_FROM", "COURIER_MESSAGE_SUBJECT",
                       "COURIER_MESSAGE_THREAD_ID", "COURIER_MESSAGE_IMPORTANCE"]


def test_a_field_is_cut_at_its_cap_and_a_plain_one_is_left_as_it_is() -> None:
    env, changed = watching.environment({"id": "msg_1", "subject": "\x00" * 1000})
    assert len(env["COURIER_MESSAGE_SUBJECT"]) == watching.FIELD_MAX_CHARS
    assert changed == ["COURIER_MESSAGE_SUBJECT"]
    env, changed = watching.environment({"id": "msg_1", "subject": "Review auth.py 日本"})
    assert env["COURIER_MESSAGE_SUBJECT"] == "Review auth.py 日本" and changed == []
    assert env["COURIER_MESSAGE_THREAD_ID"] == ""
