"""The layout version of the data in the store, and the migrations that bring older data forward.

Every server process brings the store to ``CURRENT`` as it starts
(``ensure_current``): a new store is stamped with it; older data is migrated
one version at a time under a lock, so that processes starting together
migrate it once; data newer than this code knows is refused, naming both
versions, so that no process ever reads a layout it does not know.

Versions:
    1  written before the store recorded its version (no version key)
    2  the same layout as 1, with its version recorded
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from messaging.store import connect, keys
from messaging.store.connect import SyncClient

CURRENT = 2
UNVERSIONED = 1
# How long a migration may hold the lock, and how long another process waits for it.
MIGRATION_LOCK_S = 300.0
POLL_INTERVAL_S = 0.1


class DataVersionError(RuntimeError):
    """The store holds data of a newer layout than this code knows."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"the store holds data version {found}, newer than data version {known} that this"
            f" Courier knows: run a Courier release that knows data version {found}"
            " (a newer release never writes data an older one can read)")
        self.found = found
        self.known = known


def _record_version(client: SyncClient) -> None:
    """1 -> 2: the layout is the same; recording the version is the whole step."""


# The step from version n to n + 1, by n. Each step must be safe to run again
# (a process may die between a step and recording its version).
MIGRATIONS: dict[int, Callable[[SyncClient], None]] = {1: _record_version}


def stored_version(client: SyncClient) -> int | None:
    """The data's version: the recorded one, 1 for data written before that, None
    for a store with no Courier data."""
    raw = client.get(keys.DATA_VERSION)
    if raw is not None:
        return int(raw)
    return UNVERSIONED if client.exists(keys.PROJECTS) else None


def ensure_current(client: SyncClient, wait_s: float = MIGRATION_LOCK_S) -> int | None:
    """Bring the store's data to ``CURRENT``; the version it had (None: no data yet).

    Raises:
        DataVersionError: the data is newer than ``CURRENT``.
        TimeoutError: another process held the migration lock for ``wait_s``.
    """
    first = found = stored_version(client)
    deadline = time.monotonic() + wait_s
    while found != CURRENT:
        if found is not None and found > CURRENT:
            raise DataVersionError(found, CURRENT)
        if found is None:
            client.set(keys.DATA_VERSION, CURRENT, nx=True)  # a new store: nothing to migrate
        elif client.set(keys.MIGRATION_LOCK, holder := secrets.token_hex(8), nx=True,
                        px=int(MIGRATION_LOCK_S * 1000)):
            try:
                _migrate(client, found)
            finally:
                if client.get(keys.MIGRATION_LOCK) == holder:
                    client.delete(keys.MIGRATION_LOCK)
        elif time.monotonic() >= deadline:
            raise TimeoutError(f"another process has been migrating the store's data for"
                               f" {wait_s:g} s ({keys.MIGRATION_LOCK} is held)")
        else:
            time.sleep(POLL_INTERVAL_S)
        found = stored_version(client)
    return first


def _migrate(client: SyncClient, version: int) -> None:
    """Run every step from ``version`` to ``CURRENT``, recording each as it is done."""
    while version < CURRENT:
        MIGRATIONS[version](client)
        version += 1
        client.set(keys.DATA_VERSION, version)


def ensure_current_at(url: str, **client_options: float) -> int | None:
    """``ensure_current`` on a connection of its own to the store at ``url``.

    Raises:
        DataVersionError: the store's data is newer than this code knows.
    """
    client = connect.sync_client(url, **client_options)
    try:
        return ensure_current(client)
    finally:
        client.close()


def known_version(url: str, **client_options: float) -> int | None:
    """The data version of the store at ``url`` (None: empty).

    Raises:
        DataVersionError: the data is newer than this code knows.
    """
    client = connect.sync_client(url, **client_options)
    try:
        found = stored_version(client)
    finally:
        client.close()
    if found is not None and found > CURRENT:
        raise DataVersionError(found, CURRENT)
    return found
