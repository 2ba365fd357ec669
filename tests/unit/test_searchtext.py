"""Search text: folding, terms, query words and snippets (no server)."""

from __future__ import annotations

from messaging.searchtext import (
    TERM_MAX_CHARS,
    QueryWord,
    fold,
    message_terms,
    parse_query,
    snippet,
)


def test_folding_drops_case_and_accents():
    assert fold("Écrit DÉJÀ Straße") == "ecrit deja strasse"


def test_a_message_carries_its_words_topic_sender_and_every():
    terms = message_terms({"from": "Alice", "topic": "ops", "subject": "Deploy plan",
                           "body_md": "**Deploy** at 10:30, the plan."})
    assert terms == ["*", "f:alice", "t:ops", "deploy", "plan", "at", "10", "30", "the"]


def test_long_words_are_cut_alike_in_index_and_query():
    word = "x" * (TERM_MAX_CHARS + 10)
    assert message_terms({"from": "A", "subject": word})[-1] == "x" * TERM_MAX_CHARS
    assert parse_query(word) == [QueryWord("x" * TERM_MAX_CHARS, False)]


def test_a_trailing_star_makes_a_prefix_and_punctuation_splits():
    assert parse_query("Auth* café-menu auth*") == [
        QueryWord("auth", True), QueryWord("cafe", False), QueryWord("menu", False)]
    assert parse_query("  ") == []


def test_a_snippet_is_a_short_window_around_the_first_match():
    body = "word " * 100 + "the Needle here " + "tail " * 100
    cut = snippet(body, [QueryWord("needle", False)])
    assert "Needle" in cut and cut.startswith("…") and cut.endswith("…")
    assert len(cut) <= 170
    assert snippet("short body", [QueryWord("zzz", False)]) == "short body"
