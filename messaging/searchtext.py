"""Search text: terms of a message, words of a query, snippets (pure, no I/O).

Terms are words (``\\w+``) folded to lower case without accents, so "Écrit"
and "ecrit" are one term. Filters are terms too, spelled with a ``:`` that no
word can hold: ``t:<topic>``, ``f:<sender name>``, and ``*`` on every message.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

WORD_RE = re.compile(r"\w+")
# Longer words are cut to this length, in the index and in queries alike.
TERM_MAX_CHARS = 40
# Words past this many distinct ones in one message are not indexed.
TERMS_PER_MESSAGE_MAX = 2000
# Words a query may hold (each is one more set to intersect).
QUERY_WORDS_MAX = 8
PREFIX_MARK = "*"
EVERY = "*"
SNIPPET_BEFORE_CHARS = 40
SNIPPET_CHARS = 160
ELLIPSIS = "…"


def fold(text: str) -> str:
    """Lower case, accents removed, compatibility forms unified."""
    if text.isascii():
        return text.lower()  # nothing to decompose: the common case, kept cheap
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def words(text: str) -> list[str]:
    """The folded words of a text, in order, repeats kept."""
    return [w[:TERM_MAX_CHARS] for w in WORD_RE.findall(fold(text))]


def topic_term(topic: str) -> str:
    """The term every message of a topic carries."""
    return f"t:{topic}"


def sender_term(name: str) -> str:
    """The term every message from a sender name carries."""
    return f"f:{fold(name)}"


def message_words(msg: dict[str, Any]) -> list[str]:
    """The distinct words of a message's subject and body (capped), first seen first."""
    seen: dict[str, None] = {}
    for w in words(f"{msg.get('subject') or ''}\n{msg.get('body_md') or ''}"):
        if w not in seen:
            seen[w] = None
            if len(seen) == TERMS_PER_MESSAGE_MAX:
                break
    return list(seen)


def filter_terms(msg: dict[str, Any]) -> list[str]:
    """The terms of a message that are not words: ``*``, its sender, its topic."""
    terms = [EVERY, sender_term(str(msg.get("sender_name") or msg.get("from") or ""))]
    if msg.get("topic"):
        terms.append(topic_term(str(msg["topic"])))
    return terms


def message_terms(msg: dict[str, Any]) -> list[str]:
    """Every term a message is found by: its words, its topic, its sender, ``*``."""
    return filter_terms(msg) + message_words(msg)


@dataclass(frozen=True)
class QueryWord:
    """One word of a query: a whole word, or a prefix (``auth*``)."""

    text: str
    prefix: bool

    def matches(self, word: str) -> bool:
        """True when a folded word is this one (or starts with it, for a prefix)."""
        return word.startswith(self.text) if self.prefix else word == self.text


def parse_query(q: str) -> list[QueryWord]:
    """The words of ``q``; ``auth*`` is a prefix, any other punctuation separates words."""
    out: list[QueryWord] = []
    for chunk in q.split():
        parts = words(chunk)
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            prefix = last and chunk.rstrip().endswith(PREFIX_MARK)
            word = QueryWord(part, prefix)
            if word not in out:
                out.append(word)
    return out


def snippet(body: str, query: list[QueryWord]) -> str:
    """A short plain-text window of ``body`` around the first matching word."""
    start = 0
    for m in WORD_RE.finditer(body):
        folded = fold(m.group())[:TERM_MAX_CHARS]
        if any(w.matches(folded) for w in query):
            start = max(0, m.start() - SNIPPET_BEFORE_CHARS)
            break
    if start:
        space = body.find(" ", start)
        start = space + 1 if 0 <= space < start + SNIPPET_BEFORE_CHARS // 2 else start
    window = " ".join(body[start : start + SNIPPET_CHARS + SNIPPET_BEFORE_CHARS].split())
    cut = window[:SNIPPET_CHARS]
    if len(window) > SNIPPET_CHARS:
        cut = cut.rsplit(" ", 1)[0] + ELLIPSIS
    return (ELLIPSIS if start else "") + cut
