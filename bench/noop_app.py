"""The engine's limit: a Celery app with Courier's settings and tasks that do nothing.

``celery -A bench.noop_app worker -Q bench.noop`` with the Procfile's other
worker options (``bench.procs.Cluster.start_worker``). Each
task leaves one mark in the store, so the harness sees it ran: ``bench.noop``
counts itself, ``bench.stamp`` records when it ran (microseconds).
"""

from __future__ import annotations

import os
import time

from celery import Celery

from messaging.config import Settings, get_settings
from messaging.runtime.celeryconf import celery_config
from messaging.store import connect

NOOP_TASK = "bench.noop"
STAMP_TASK = "bench.stamp"
DONE_KEY = "bench:noop:done"
STAMPS_KEY = "bench:noop:ran_us"
# A queue of its own, so a no-op worker and Courier's can run side by side.
NOOP_QUEUE = "bench.noop"

app = Celery("bench-noop")
app.conf.update(celery_config(get_settings()))

_client: tuple[int, connect.SyncClient] | None = None


def client() -> connect.SyncClient:
    """This process's store connection (made after fork)."""
    global _client
    if _client is None or _client[0] != os.getpid():
        url = get_settings().store_url
        _client = (os.getpid(), connect.sync_client(url, decode_responses=False))
    return _client[1]


@app.task(name=NOOP_TASK)
def noop() -> None:
    """Count one run."""
    client().incr(DONE_KEY)


@app.task(name=STAMP_TASK)
def stamp(stamp_id: str) -> None:
    """Record when this ran."""
    client().hset(STAMPS_KEY, stamp_id, time.time_ns() // 1000)


def publisher(settings: Settings) -> Celery:
    """A Celery app publishing to the broker of ``settings``, configured as the API's."""
    out = Celery("bench-publisher", set_as_current=False)
    out.conf.update(celery_config(settings))
    return out
