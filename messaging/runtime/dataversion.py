"""The data version check each server process makes as it starts (``store/version.py``).

The check runs at once when the store answers. When it does not answer yet (a
Procfile runner starts the store beside everything else), a thread checks
until it does. Data newer than this code knows stops the process, with a
message naming both versions.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from messaging.store import connect, version
from messaging.store.connect import STORE_DOWN

RETRY_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0


def check_once(url: str) -> int | None:
    """Bring the store at ``url`` to the current data version; the version it had.

    Raises:
        DataVersionError: the store's data is newer than this code knows.
    """
    client = connect.sync_client(url, socket_timeout=PROBE_TIMEOUT_S,
                                 socket_connect_timeout=PROBE_TIMEOUT_S)
    try:
        return version.ensure_current(client)
    finally:
        client.close()


def refusal(process: str, exc: version.DataVersionError) -> str:
    """The one line a process says as it refuses to start."""
    return f"courier {process} cannot start: {exc}"


def _report(process: str, found: int | None) -> None:
    if found is not None and found != version.CURRENT:
        print(f"courier {process}: migrated the store's data from version {found} to"
              f" {version.CURRENT}", file=sys.stderr, flush=True)


def check_at_start(url: str, process: str) -> None:
    """Check the store's data version now, or in a thread until the store answers.

    Exits the process (status 1) when the data is newer than this code knows.
    """
    try:
        _report(process, check_once(url))
    except version.DataVersionError as exc:
        print(refusal(process, exc), file=sys.stderr, flush=True)
        # Nothing has started yet; an exception here would reach the operator as a
        # framework's traceback (uvicorn's, Celery's) around this one line.
        os._exit(1)
    except STORE_DOWN:
        threading.Thread(target=_check_when_up, args=(url, process), daemon=True,
                         name="courier-data-version").start()


def _check_when_up(url: str, process: str) -> None:
    """Retry the check until the store answers; stop this process on newer data."""
    while True:
        time.sleep(RETRY_INTERVAL_S)
        try:
            _report(process, check_once(url))
        except version.DataVersionError as exc:
            print(refusal(process, exc), file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)  # the process's own orderly stop
        except STORE_DOWN:
            continue
        return
