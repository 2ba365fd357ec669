"""The search index: the project's postings of terms, and what each agent may see.

A project has one sorted set per term (a word, ``*``, a sender, a topic) and
each agent one set of the messages it sent or received. A query intersects the
postings of its words and filters (and, for an agent, its own set), driven by
the smallest: its cost follows the matches, not the project's history. One
message costs one posting per term plus one entry per agent that sees it (not
one posting per term for each of them).

Admission writes no postings. The worker that dispatched a delivery puts its
message, its recipient and its sender on the project's search queue (one
round trip beside the delivery's own); a send that no dispatch will index for
its sender yet (held, waiting for a name, or sent via a subagent) is queued
for its sender by the admission script itself. An indexer works through the
queue from its head (``workers.indexer``: when and how much): an entry leaves
the queue only once its message is indexed, whoever else indexed it meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from messaging.searchtext import EVERY, QueryWord, filter_terms, message_words
from messaging.store import keys
from messaging.store.connect import AsyncClient, SyncClient
from messaging.store.failures import translated
from messaging.store.schema import MessageField, unpack_message
from messaging.store.scripts import Scripts
from messaging.types import Json

PROJECT_VIEWER = "project"
# Score = creation ms * SEQ_SLOTS + project sequence mod SEQ_SLOTS: time-ordered,
# unique per message (a thousand sends in one millisecond of one project would be
# needed to collide), exact as a double.
SEQ_SLOTS = 1000
# Words one prefix may expand to (the alphabetically first ones).
PREFIX_TERMS_MAX = 100
# Entries one page looks at before answering with what it found (and a cursor).
SCAN_MAX = 5000
SCAN_BATCH = 200
# Words one call of the pruning script looks at (it holds the store meanwhile).
PRUNE_BATCH = 500
# The highest lexical byte: closes a prefix's range of words.
LEX_TOP = b"\xff"


def search_score(created_us: int, seq: int) -> int:
    """A message's score in every posting: time order, unique, exact."""
    return created_us // 1000 * SEQ_SLOTS + seq % SEQ_SLOTS


def score_bound_ms(ms: int, *, upper: bool) -> int:
    """The score bound of a time in ms (inclusive either way)."""
    return ms * SEQ_SLOTS + (SEQ_SLOTS - 1 if upper else 0)


def _agents(viewers: Iterable[str]) -> list[str]:
    """The agents among ``viewers`` (not ``courier`` or ``human``)."""
    return sorted({v for v in viewers if v.startswith("agt_")})


def index_messages(client: SyncClient, scripts: Scripts, project_id: str,
                   viewers_by_message: dict[str, set[str]]) -> int:
    """Index each message for its viewers (idempotent); returns how many were found.

    One script call for all of them (a worker's step: a few messages): each
    posting key once, with every message of the call that has the term (the
    messages of a step share many: ``*``, a sender, common words), each agent's
    set once, and the words of all of them in the project's word list.
    """
    read = client.pipeline(transaction=False)
    mids = list(viewers_by_message)
    for mid in mids:
        read.hmget(keys.message(project_id, mid),
                   [MessageField.JSON, MessageField.CREATED_US, MessageField.SEQ])
    postings: dict[str, list[Any]] = {}  # key: score, id, score, id, ...
    words: dict[str, None] = {}
    found = 0
    for mid, (raw, created_us, seq) in zip(mids, read.execute(), strict=True):
        if not raw:
            continue  # gone (archived) before it was indexed
        found += 1
        msg = unpack_message(raw)
        own_words = message_words(msg)
        score = search_score(int(created_us), int(seq or 0))
        for key in [*(keys.search_postings(project_id, term)
                      for term in filter_terms(msg) + own_words),
                    *(keys.search_seen(project_id, agent)
                      for agent in _agents(viewers_by_message[mid]))]:
            postings.setdefault(key, []).extend((score, mid))
        words.update(dict.fromkeys(own_words))
    if found:
        args: list[Any] = [len(postings)]
        for entries in postings.values():
            args += [len(entries) // 2, *entries]
        scripts["index_message"](
            keys=[*postings, *([keys.search_words(project_id)] if words else [])],
            args=[*args, *words])
    return found


def queue_on(pipe: Any, project_id: str, dispatched: Iterable[tuple[str, str, str]],
             at_ms: int) -> int:
    """Put (message id, recipient id, sender id) of dispatched deliveries on the
    project's search queue, and the project among those with a queue, as commands
    added to a pipeline (``DeliveryStore.after_step`` sends them); how many (0:
    nothing to queue)."""
    entries = [f"{at_ms} {message_id} {agent_id} {sender_id}"
               for message_id, agent_id, sender_id in dispatched]
    if not entries:
        return 0
    pipe.rpush(keys.search_queue(project_id), *entries)
    pipe.sadd(keys.SEARCH_PENDING, project_id)
    return 2


def queued_at_ms(entry: str) -> int:
    """When a search queue entry was queued (ms)."""
    return int(entry.split(" ", 1)[0])


def peek_queue(client: SyncClient, project_id: str, count: int, transports: Sequence[str],
               rings: Sequence[str]) -> tuple[list[str], int, int]:
    """The oldest ``count`` entries of the project's search queue, how many of its
    deliveries are ready for a worker (on any of ``transports``), and how many
    projects wait in these delivery rings: one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.search_queue(project_id), 0, count - 1)
    for transport in transports:
        pipe.zcard(keys.ready(project_id, transport))
    for ring in rings:
        pipe.zcard(ring)
    head, *sizes = pipe.execute()
    ready, waiting = sizes[:len(transports)], sizes[len(transports):]
    return [str(e) for e in head], sum(int(n) for n in ready), sum(int(n) for n in waiting)


def index_queued(client: SyncClient, scripts: Scripts, project_id: str,
                 entries: list[str]) -> None:
    """Index the messages of entries read from the head of the project's search
    queue, then drop them from it (unless another indexer already did)."""
    viewers: dict[str, set[str]] = {}
    for entry in entries:
        _, message_id, *agents = entry.split(" ")
        viewers.setdefault(message_id, set()).update(agents)
    index_messages(client, scripts, project_id, viewers)
    scripts["trim_index_queue"](keys=[keys.search_queue(project_id)], args=entries)


def settle_queue(client: SyncClient, project_id: str) -> None:
    """Take a project whose search queue looked empty off the list of those with
    one; it goes back on if an entry came meanwhile."""
    client.srem(keys.SEARCH_PENDING, project_id)
    if client.llen(keys.search_queue(project_id)):
        client.sadd(keys.SEARCH_PENDING, project_id)


def pending_projects(client: SyncClient) -> list[str]:
    """The projects with entries on their search queues."""
    return sorted(str(p) for p in client.smembers(keys.SEARCH_PENDING))


def queued_projects(client: SyncClient, project_ids: Sequence[str]) -> list[str]:
    """Which of these projects have entries on their search queues (one round trip)."""
    pipe = client.pipeline(transaction=False)
    for project_id in project_ids:
        pipe.llen(keys.search_queue(project_id))
    return [p for p, n in zip(project_ids, pipe.execute() if project_ids else [], strict=True)
            if n]


def claim_queue(client: SyncClient, project_id: str, token: str, claim_ms: int) -> bool:
    """Claim the project's search queue for one indexer, for ``claim_ms`` at most."""
    return bool(client.set(keys.search_claim(project_id), token, nx=True, px=claim_ms))


def release_queue(client: SyncClient, project_id: str, token: str) -> None:
    """Give the claim back, if it is still ours.

    Not atomic: at worst another indexer's fresh claim is dropped, and two work
    through the queue at once for a while, which costs duplicate work only.
    """
    if client.get(keys.search_claim(project_id)) == token:
        client.delete(keys.search_claim(project_id))


def unindex_messages(client: SyncClient, prune_words: Any, project_id: str,
                     messages: Iterable[tuple[str, Json, Iterable[str]]]) -> None:
    """Remove (message id, message, viewers) from the index (when they leave the store):
    one ZREM per posting or agent set, however many of the messages it holds; then
    their words that no stored message carries leave the word list (``prune_words``,
    the script)."""
    members: dict[str, list[str]] = {}
    words: set[str] = set()
    for message_id, msg, viewers in messages:
        mine = message_words(msg)
        words.update(mine)
        found_by = [keys.search_postings(project_id, term) for term in filter_terms(msg) + mine]
        found_by += [keys.search_seen(project_id, agent) for agent in _agents(viewers)]
        for key in found_by:
            members.setdefault(key, []).append(message_id)
    pipe = client.pipeline(transaction=False)
    for key, ids in members.items():
        pipe.zrem(key, *ids)
    pipe.execute()
    ordered = sorted(words)
    for start in range(0, len(ordered), PRUNE_BATCH):
        some = ordered[start:start + PRUNE_BATCH]
        prune_words(keys=[keys.search_words(project_id),
                          *(keys.search_postings(project_id, w) for w in some)], args=some)


@dataclass(frozen=True)
class IndexPage:
    """Message ids of one page, newest first, and where the next page starts."""

    message_ids: list[str]
    next_score: str | None


@translated
class SearchIndex:
    """Queries of the index (asyncio, the API's side)."""

    def __init__(self, client: AsyncClient, scripts: Scripts) -> None:
        self.client = client
        self.scripts = scripts

    async def expand(self, project_id: str, words: list[QueryWord]) -> list[list[str]]:
        """The terms of each query word: itself, or the indexed words a prefix starts."""
        prefixes = [w for w in words if w.prefix]
        pipe = self.client.pipeline(transaction=False)
        for w in prefixes:
            low = w.text.encode()
            pipe.zrangebylex(keys.search_words(project_id), b"[" + low,
                             b"[" + low + LEX_TOP, start=0, num=PREFIX_TERMS_MAX)
        found = iter(await pipe.execute() if prefixes else [])
        return [[str(t) for t in next(found)] if w.prefix else [w.text] for w in words]

    async def page(self, project_id: str, viewer: str, groups: list[list[str]],
                   hi: str, lo: str, limit: int) -> IndexPage:
        """One page of the messages the viewer may see found in every group of terms
        (newest first)."""
        if any(not g for g in groups):
            return IndexPage([], None)  # a prefix that no indexed word starts
        found_in = [[keys.search_postings(project_id, t) for t in g] for g in groups]
        if viewer != PROJECT_VIEWER:
            found_in.append([keys.search_seen(project_id, viewer)])
        elif not found_in:
            found_in.append([keys.search_postings(project_id, EVERY)])
        postings = [key for g in found_in for key in g]
        args = {"sizes": [len(g) for g in found_in], "hi": hi, "lo": lo, "limit": limit,
                "scan_max": SCAN_MAX, "batch": SCAN_BATCH}
        answer = json.loads(await self.scripts["search_page"](keys=postings,
                                                           args=[json.dumps(args)]))
        found = answer["ids"] if isinstance(answer["ids"], list) else []  # cjson: {} is []
        return IndexPage([str(m) for m in found], answer["next"] or None)


class IndexQueues:
    """The projects' search queues, for the worker's indexer (synchronous client)."""

    def __init__(self, client: SyncClient, scripts: Scripts) -> None:
        self.client, self.scripts = client, scripts

    def pending(self) -> list[str]:
        """The projects with entries on their search queues."""
        return pending_projects(self.client)

    def queued(self, project_ids: Sequence[str]) -> list[str]:
        """Which of these projects have entries on their search queues."""
        return queued_projects(self.client, project_ids)

    def peek(self, project_id: str, count: int, transports: Sequence[str],
             delivery_queues: Sequence[str]) -> tuple[list[str], int, int]:
        """``peek_queue``, with the rings of these delivery queues."""
        return peek_queue(self.client, project_id, count, transports,
                          [keys.ring(queue) for queue in delivery_queues])

    def claim(self, project_id: str, token: str, claim_ms: int) -> bool:
        """``claim_queue``."""
        return claim_queue(self.client, project_id, token, claim_ms)

    def release(self, project_id: str, token: str) -> None:
        """``release_queue``."""
        release_queue(self.client, project_id, token)

    def settle(self, project_id: str) -> None:
        """``settle_queue``."""
        settle_queue(self.client, project_id)

    def index(self, project_id: str, entries: list[str]) -> None:
        """``index_queued``."""
        index_queued(self.client, self.scripts, project_id, entries)
