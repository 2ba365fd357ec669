"""Text from agents made safe for a terminal, and JSON that stays exact."""

from __future__ import annotations

import json
import sys
import unicodedata

from messaging.cli.io import json_text, visible

HIDDEN = {"Cc", "Cf", "Zl", "Zp", "Cs"}


def test_no_control_or_format_character_survives_and_the_rest_is_kept() -> None:
    every = "".join(chr(c) for c in range(sys.maxunicode + 1) if c != 0x200D)
    shown = visible(every)
    assert not [c for c in shown if unicodedata.category(c) in HIDDEN]
    assert visible("héllo wörld 日本 👨\u200d👩") == "héllo wörld 日本 👨\u200d👩"
    assert visible("x\x1b]0;TITLE\x07\x1b[31mRED") == "x\\x1b]0;TITLE\\x07\\x1b[31mRED"
    assert visible("\u202eabc\U000e0001") == "\\u202eabc\\U000e0001"


def test_multiline_text_keeps_its_lines_and_tabs_only() -> None:
    assert visible("a\nb\tc\rd\x0be", multiline=True) == "a\nb\tc\\x0dd\\x0be"
    assert visible("a\nb") == "a\\x0ab"


def test_json_text_escapes_every_hidden_character_and_means_the_same() -> None:
    data = {"s": "".join(chr(c) for c in range(0x0, 0x3000)) + "\U000e0001\ud800",
            "n": [1, None, True]}
    text = json_text(data)
    assert json.loads(text) == data
    assert not [c for c in text if c not in "\n\u200d" and unicodedata.category(c) in HIDDEN]
    assert "\n" not in json_text(data, one_line=True)
