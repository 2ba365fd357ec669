"""Search: the messages a caller may see, by words, topic, sender and time, newest first."""

from __future__ import annotations

from datetime import datetime

from messaging.errors import invalid
from messaging.models import LABEL_RE, SearchQuery
from messaging.searchtext import QUERY_WORDS_MAX, parse_query, sender_term, snippet, topic_term
from messaging.service.caller import Caller
from messaging.service.reading import visible
from messaging.store.searchindex import PROJECT_VIEWER, score_bound_ms
from messaging.store.store import Store
from messaging.types import Json

CURSOR_DIGITS_MAX = 20


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _bounds(q: SearchQuery) -> tuple[str, str]:
    """The (upper, lower) score bounds of a page: cursor, until, since."""
    hi = "+inf" if q.until is None else str(score_bound_ms(_ms(q.until), upper=True))
    if q.cursor:
        # ASCII only: str.isdigit() also takes "²" or "١٢", which the store refuses as a score.
        if not (q.cursor.isascii() and q.cursor.isdigit()) or len(q.cursor) > CURSOR_DIGITS_MAX:
            raise invalid("cursor", "pass back a next_cursor this API returned")
        if hi == "+inf" or int(q.cursor) <= int(hi):
            hi = f"({q.cursor}"
    lo = "-inf" if q.since is None else str(score_bound_ms(_ms(q.since), upper=False))
    return hi, lo


async def search(store: Store, caller: Caller, q: SearchQuery) -> Json:
    """A page of what the calling agent sent or received, newest first."""
    project_id, agent_id = caller.require_agent()
    return await _search(store, caller, project_id, agent_id, q)


async def search_project(store: Store, caller: Caller, project_id: str, q: SearchQuery) -> Json:
    """A page of every message of the project (its token), newest first."""
    caller.require_project(project_id)
    return await _search(store, caller, project_id, PROJECT_VIEWER, q)


async def _search(store: Store, caller: Caller, project_id: str, viewer: str,
                  q: SearchQuery) -> Json:
    words = parse_query(q.q)
    if len(words) > QUERY_WORDS_MAX:
        raise invalid("q", f"at most {QUERY_WORDS_MAX} words")
    hi, lo = _bounds(q)
    groups = await store.search.expand(project_id, words)
    if q.topic is not None:
        groups.append([topic_term(q.topic)])
    exact_from = None
    if q.sender is not None:
        # A name, or an exact address `Name [ref]` (as ``from`` shows it): the index
        # knows names; the address is then checked on what the name found.
        found = LABEL_RE.match(q.sender)
        exact_from = q.sender if found else None
        groups.append([sender_term(found.group("name") if found else q.sender)])
    page = await store.search.page(project_id, viewer, groups, hi, lo, q.limit)
    records = await store.get_messages(project_id, page.message_ids)
    items = []
    for record in records:
        view = visible(caller, record) if record else None
        if view is not None and exact_from in (None, view["from"]):
            view["snippet"] = snippet(view.get("body_md") or "", words)
            items.append(view)
    return {"messages": items, "next_cursor": page.next_score}
