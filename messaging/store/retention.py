"""The store's side of retention (synchronous, for the sweeper): candidates, removal.

Every stored message sits in the project's retention index (``keys.retention``)
scored by when the sweeper should look at it: its admission time, then the
newest activity the sweeper saw. A round reads only the entries whose score
has passed the cutoff, so its cost follows what is due, never the history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from redis.lock import Lock

from messaging.store import connect, keys
from messaging.store.connect import SyncClient
from messaging.store.deliveries import clock_us
from messaging.store.schema import DeliveryField, MessageField, senders, unpack_message
from messaging.store.scripts import scripts_for
from messaging.store.searchindex import unindex_messages
from messaging.types import Json

# Held by one sweeper per project while it archives and removes.
LOCK_TIMEOUT_S = 300
SECONDS_PER_DAY = 86_400
US_SUFFIX = "_us"


@dataclass
class Stored:
    """One candidate message as stored: its hash and its deliveries' hashes."""

    message_id: str
    record: Json | None
    pairs: list[tuple[str, str]] = field(default_factory=list)  # (delivery id, agent id)
    deliveries: list[Json] = field(default_factory=list)  # {} where one is gone


def final(delivery: Json) -> bool:
    """True when nothing more will happen to this delivery by itself.

    An outcome is recorded and no redrive or lease is under way, or it was
    declined. Held, pending and retrying deliveries have no outcome yet.
    """
    if delivery.get("declined_us"):
        return True
    leased = delivery.get(DeliveryField.LEASE_UNTIL_MS) not in (None, "", "0")
    redriven = delivery.get(DeliveryField.REDRIVE) == "1"
    return bool(delivery.get(DeliveryField.OUTCOME)) and not redriven and not leased


def newest_us(stored: Stored) -> int:
    """The newest activity of a message: its admission, any ``*_us`` time of a delivery."""
    times = [int(stored.record[MessageField.CREATED_US])] if stored.record else [0]
    for d in stored.deliveries:
        times += [int(v) for k, v in d.items() if k.endswith(US_SUFFIX) and str(v).isdigit()]
    return max(times)


def tombstone(day: str, viewers: Iterable[str]) -> str:
    """What the hash of removed ids keeps for one id: its archive day, then the
    agents that could see it (the only agents told it was archived)."""
    return " ".join([day, *sorted(set(viewers) - {""})])


def read_tombstone(value: str) -> tuple[str, frozenset[str]]:
    """The archive day and the agents that could see a removed id."""
    day, *viewers = value.split(" ")
    return day, frozenset(viewers)


def _tombstones(stored: Stored, day: str) -> tuple[str, list[str]]:
    """The tombstones of a message and of each of its deliveries: its sender (and the
    subagent it came via) sees them all, each recipient its own unless the message
    was withheld from it (declined: it never saw it)."""
    record = stored.record or {}
    sent_by = sorted(senders(unpack_message(record[MessageField.JSON]))) if record else []
    withheld = set(json.loads(record.get(MessageField.WITHHELD) or "[]"))
    seen_by = [a for _, a in stored.pairs if a not in withheld]
    return (tombstone(day, [*sent_by, *seen_by]),
            [tombstone(day, sent_by + ([a] if a in seen_by else [])) for _, a in stored.pairs])


def archived_ttl_s(retention_s: float) -> int:
    """How long a hash of removed ids answers 410 after its last removal: the
    retention period again."""
    return max(1, int(retention_s) + 1)


def archived_bucket_s(retention_s: float) -> int:
    """How long one hash gathers removed ids: the retention period, at most a day.

    Each hash expires a retention period after its last removal, so the ids kept
    for 410 answers are those of one to two retention periods, whatever the rate.
    """
    return max(1, min(SECONDS_PER_DAY, int(retention_s)))


def archived_buckets(now_s: float, retention_s: float) -> list[str]:
    """The hashes of removed ids that may still answer, newest (the one removals
    go to now) first: ``YYYY-MM-DD`` for a day's, ``YYYY-MM-DDTHHMMSS`` (UTC, its
    start) for a shorter one."""
    size = archived_bucket_s(retention_s)
    form = "%Y-%m-%d" if size == SECONDS_PER_DAY else "%Y-%m-%dT%H%M%S"
    start = int(now_s) // size * size
    return [datetime.fromtimestamp(start - i * size, tz=UTC).strftime(form)
            for i in range(int(retention_s) // size + 2)]


class RetentionStore:
    """Typed retention operations on one synchronous client."""

    def __init__(self, client: SyncClient) -> None:
        self.client = client
        self.scripts = scripts_for(client)

    @classmethod
    def from_url(cls, url: str) -> RetentionStore:
        """Retention's store on new connections to ``url``."""
        return cls(connect.sync_client(url))

    def project_ids(self) -> list[str]:
        """Every project, in order."""
        return sorted(str(p) for p in self.client.smembers(keys.PROJECTS))

    def clock_us(self, project_id: str | None = None) -> int:
        """The store's time (us) on the node of the project's keys (of the project
        list with None): retention's cut-offs follow it, not the host's clock."""
        return clock_us(self.scripts, keys.PROJECTS if project_id is None
                        else keys.project(project_id))

    def lock(self, project_id: str) -> Lock:
        """The project's retention lock (not yet taken)."""
        lock: Lock = self.client.lock(keys.retention_lock(project_id), timeout=LOCK_TIMEOUT_S,
                                      blocking=False)
        return lock

    def due(self, project_id: str, cutoff_ms: int, count: int) -> list[str]:
        """Up to ``count`` message ids whose retention score is at or before the cutoff."""
        return [str(m) for m in self.client.zrangebyscore(
            keys.retention(project_id), "-inf", cutoff_ms, start=0, num=count)]

    def load(self, project_id: str, message_ids: list[str]) -> list[Stored]:
        """Each message's hash and its deliveries' hashes, in two round trips."""
        pipe = self.client.pipeline(transaction=False)
        for mid in message_ids:
            pipe.hgetall(keys.message(project_id, mid))
        records = [dict(r) if r else None for r in pipe.execute()]
        pairs = [[(str(d), str(a)) for d, a in json.loads(r[MessageField.DELIVERIES])] if r else []
                 for r in records]
        for delivery_ids in pairs:
            for did, _ in delivery_ids:
                pipe.hgetall(keys.delivery(project_id, did))
        found = iter(pipe.execute())
        out = []
        for mid, record, delivery_ids in zip(message_ids, records, pairs, strict=True):
            out.append(Stored(mid, record, delivery_ids,
                              [dict(next(found)) for _ in delivery_ids]))
        return out

    def forget(self, project_id: str, message_ids: list[str]) -> None:
        """Take ids of messages no longer stored out of the index."""
        if message_ids:
            self.client.zrem(keys.retention(project_id), *message_ids)

    def later(self, project_id: str, scores_ms: dict[str, int]) -> None:
        """Look at these messages again at these times (only those still indexed)."""
        if scores_ms:
            self.client.zadd(keys.retention(project_id), scores_ms, xx=True)

    def remove(self, project_id: str, doomed: list[tuple[Stored, str]], cutoff_us: int,
               now_ms: int, retention_s: float) -> list[str]:
        """Remove archived (message, archive day) pairs still final and old; their ids
        (kept a while for 410 answers, see ``archived_buckets``)."""
        if not doomed:
            return []
        script_keys = [keys.retention(project_id), keys.due(project_id),
                       keys.archived(project_id,
                                      archived_buckets(now_ms / 1000, retention_s)[0])]
        layout = []
        for stored, day in doomed:
            msg = unpack_message(stored.record[MessageField.JSON]) if stored.record else {}
            streams = sorted(({msg.get("sender_id", "")} | {a for _, a in stored.pairs}) - {""})
            script_keys += [keys.message(project_id, stored.message_id),
                            keys.thread(project_id, msg.get("thread_id", stored.message_id))]
            for did, agent_id in stored.pairs:
                script_keys += [keys.delivery(project_id, did), keys.inbox(project_id, agent_id)]
            script_keys += [keys.events(project_id, a) for a in streams]
            message_tomb, delivery_tombs = _tombstones(stored, day)
            layout.append([stored.message_id, message_tomb, len(stored.pairs), len(streams),
                           delivery_tombs])
        args = {"cutoff_us": str(cutoff_us), "now_ms": now_ms,
                "archived_ttl_s": archived_ttl_s(retention_s), "messages": layout}
        out = self.scripts["remove_messages"](keys=script_keys, args=[json.dumps(args)])
        removed = [str(m) for m in out]
        # Off the search index too, and their words that nothing stored carries now.
        gone = []
        for stored, _ in doomed:
            if stored.message_id in removed and stored.record:
                msg = unpack_message(stored.record[MessageField.JSON])
                gone.append((stored.message_id, msg, [*senders(msg),
                                                      *(a for _, a in stored.pairs)]))
        unindex_messages(self.client, self.scripts["prune_words"], project_id, gone)
        return removed
