"""Retention: archive the messages that are final and old, then remove them.

A message goes when every delivery is final (an outcome recorded, or
declined) and its newest activity (admission, any stage, read, ack) is older
than ``COURIER_RETENTION_DAYS``. It is written to the archive and flushed
first; the removal script then checks it once more and removes it with its
deliveries, inbox and thread entries and events. A delivery that is not
final keeps its message, whatever its age, and is looked at again a
retention period later. Rounds work in bounded batches, each one short store
call, so admission never waits on them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from messaging import ids
from messaging.config import Settings
from messaging.errors import CourierError, not_found
from messaging.service import archive
from messaging.service.caller import Caller
from messaging.service.views import delivery_view, message_view
from messaging.store.retention import (
    RetentionStore,
    Stored,
    archived_buckets,
    final,
    newest_us,
    read_tombstone,
)
from messaging.store.store import Store
from messaging.timefmt import rfc3339
from messaging.types import Json

# Messages looked at per store call, and how long one project's round may go on.
BATCH = 200
ROUND_BUDGET_S = 20.0
US_PER_MS = 1000
US_PER_S = 1_000_000


@dataclass(frozen=True)
class Round:
    """What one project's round did."""

    removed: int
    looked_at: int


def archive_line(stored: Stored, archived_us: int) -> Json:
    """One message as the archive keeps it: the sender's view with its deliveries."""
    line: Json = message_view(stored.record or {}, full=True)
    line["deliveries"] = [delivery_view(d) for d in stored.deliveries if d]
    line["archived_ts"] = rfc3339(archived_us)
    return line


def _batch(rstore: RetentionStore, root: Path, project_id: str, retention_s: float,
           now: int) -> tuple[int, int]:
    """One batch: (messages looked at, messages removed)."""
    cutoff_us = now - int(retention_s * US_PER_S)
    due = rstore.due(project_id, cutoff_us // US_PER_MS, BATCH)
    if not due:
        return 0, 0
    later: dict[str, int] = {}
    gone, doomed = [], []
    for stored in rstore.load(project_id, due):
        if stored.record is None:
            gone.append(stored.message_id)
        elif not all(final(d) for d in stored.deliveries if d):
            later[stored.message_id] = now // US_PER_MS  # again a retention period from now
        elif (newest := newest_us(stored)) >= cutoff_us:
            later[stored.message_id] = newest // US_PER_MS
        else:
            doomed.append(stored)
    by_day: dict[str, list[Stored]] = defaultdict(list)
    for stored in doomed:
        by_day[archive.day_of(int((stored.record or {})["created_us"]))].append(stored)
    for day, group in sorted(by_day.items()):
        archive.append(root, project_id, day, [archive_line(s, now) for s in group])
    removed = rstore.remove(
        project_id, [(s, archive.day_of(int((s.record or {})["created_us"]))) for s in doomed],
        cutoff_us, now // US_PER_MS, retention_s)
    rstore.forget(project_id, gone)
    rstore.later(project_id, later)
    return len(due), len(removed)


def sweep_project(rstore: RetentionStore, root: Path, project_id: str, retention_s: float,
                  now_us: int) -> Round:
    """Archive and remove what is due in one project, batch by batch, within a time budget.

    Another sweeper already on this project makes this one skip it.
    """
    lock = rstore.lock(project_id)
    if not lock.acquire():
        return Round(0, 0)
    looked = removed = 0
    deadline = time.monotonic() + ROUND_BUDGET_S
    try:
        while time.monotonic() < deadline:
            seen, gone = _batch(rstore, root, project_id, retention_s, now_us)
            looked, removed = looked + seen, removed + gone
            if seen < BATCH:
                break
    finally:
        lock.release()
    return Round(removed, looked)


async def missing(store: Store, settings: Settings, caller: Caller, project_id: str,
                  some_id: str, what: str) -> CourierError:
    """The error for an id not in the store: 410 ARCHIVED when retention removed it
    and the caller could see it (the project's token, its sender, a recipient it
    was not withheld from); 404 to everyone else, as for an id that never was."""
    retention_s = settings.retention_s
    if retention_s > 0 and ids.project_of(some_id) == project_id:
        found = await store.archived(project_id, some_id,
                                     archived_buckets(time.time(), retention_s))
        if found is not None:
            day, viewers = read_tombstone(found)
            if caller.sees_project(project_id) or caller.agent_id in viewers:
                return CourierError(
                    "ARCHIVED", f"this {what} was archived and removed from the store",
                    {"archive_day": day, "project_id": project_id})
    return not_found(what)
