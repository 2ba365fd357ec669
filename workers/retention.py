"""The retention task: beat runs it on its own schedule, beside the sweeper."""

from __future__ import annotations

import logging
import os

import redis.exceptions
from celery.utils.log import get_task_logger

from messaging.config import get_settings
from messaging.runtime.celeryconf import RETENTION_TASK
from messaging.service import archive
from messaging.service.retention import sweep_project
from messaging.store.retention import RetentionStore
from workers.app import app

log: logging.Logger = get_task_logger(__name__)

US_PER_S = 1_000_000

_store: tuple[int, RetentionStore] | None = None


def store() -> RetentionStore:
    """This process's retention store (made after fork, never shared across it)."""
    global _store
    if _store is None or _store[0] != os.getpid():
        _store = (os.getpid(), RetentionStore.from_url(get_settings().store_url))
    return _store[1]


def retain() -> int:
    """Archive and remove every project's final messages past the retention period, and
    delete archive days past COURIER_ARCHIVE_KEEP_DAYS.

    Every cut-off is the store's clock's (``RetentionStore.clock_us``), not this host's.

    Returns how many messages were removed.
    """
    settings = get_settings()
    expired = archive.expire(settings.archive_root, settings.archive_keep_days,
                             store().clock_us() / US_PER_S)
    if expired:
        log.info("retention deleted %d archive days older than %g days", len(expired),
                 settings.archive_keep_days)
    if settings.retention_s <= 0:
        return 0
    removed = 0
    for project_id in store().project_ids():
        try:
            done = sweep_project(store(), settings.archive_root, project_id,
                                 settings.retention_s, store().clock_us(project_id))
        except redis.exceptions.OutOfMemoryError:
            log.warning("retention in %s: the store is full; will try again", project_id)
            continue
        removed += done.removed
        if done.removed:
            log.info("retention archived and removed %d messages of %s", done.removed,
                     project_id)
    return removed


# No task events: Flower's bounded history is kept for deliveries.
retain_task = app.task(name=RETENTION_TASK, send_events=False)(retain)
