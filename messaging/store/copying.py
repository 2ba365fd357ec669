"""Whole-store copies for backups: how many keys a store holds, and every key of one
server copied into another with its time to live (``DUMP``/``RESTORE``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis

from messaging.store import connect

# Keys read and written per round trip.
COPY_BATCH = 500


def key_count(url: str) -> int:
    """How many keys the store at ``url`` holds."""
    client = connect.sync_client(url)
    try:
        return int(client.dbsize())
    finally:
        client.close()


def copy_keys(source: redis.Redis, url: str) -> int:
    """Copy every key of ``source`` (with its time to live) into the store at ``url``;
    how many."""
    target = connect.sync_client(url, decode_responses=False)
    copied = 0
    try:
        for batch in _batches(source.scan_iter(count=COPY_BATCH)):
            read = source.pipeline(transaction=False)
            for key in batch:
                read.dump(key)
                read.pttl(key)
            found = read.execute()
            write = target.pipeline(transaction=False)
            for key, dumped, ttl_ms in zip(batch, found[::2], found[1::2], strict=True):
                if dumped is not None:
                    write.restore(key, max(ttl_ms, 0), dumped)
                    copied += 1
            write.execute()
    finally:
        target.close()
    return copied


def _batches(keys: Iterator[Any]) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for key in keys:
        batch.append(key)
        if len(batch) == COPY_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
