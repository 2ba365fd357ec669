"""The data version check each server process makes as it starts (``store/version.py``).

The check runs at once when the store answers. When it does not answer yet (a
Procfile runner starts the store beside everything else), a thread checks
until it does. Data newer than this code knows stops the process, with a
message naming both versions; so does a newer release migrating the data
while the process runs (the thread reads the version every few seconds).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from messaging.store import version
from messaging.store.connect import STORE_DOWN

RETRY_INTERVAL_S = 1.0
# How often a running process reads the version again (a newer release may migrate).
WATCH_INTERVAL_S = 5.0
PROBE_TIMEOUT_S = 2.0


def check_once(url: str) -> int | None:
    """Bring the store at ``url`` to the current data version; the version it had.

    Raises:
        DataVersionError: the store's data is newer than this code knows.
    """
    return version.ensure_current_at(url, socket_timeout=PROBE_TIMEOUT_S,
                                     socket_connect_timeout=PROBE_TIMEOUT_S)


def refusal(process: str, exc: version.DataVersionError, starting: bool = True) -> str:
    """The one line a process says as it refuses to start, or stops."""
    return f"courier {process} {'cannot start' if starting else 'stops'}: {exc}"


def _report(process: str, found: int | None) -> None:
    if found is not None and found != version.CURRENT:
        print(f"courier {process}: migrated the store's data from version {found} to"
              f" {version.CURRENT}", file=sys.stderr, flush=True)


def check_at_start(url: str, process: str) -> None:
    """Check the store's data version now (or once the store answers), then keep watching it.

    Exits the process (status 1) when the data is newer than this code knows;
    stops it (SIGTERM to itself) when a newer release migrates the data later.
    """
    checked = False
    try:
        _report(process, check_once(url))
        checked = True
    except version.DataVersionError as exc:
        print(refusal(process, exc), file=sys.stderr, flush=True)
        # Nothing has started yet; an exception here would reach the operator as a
        # framework's traceback (uvicorn's, Celery's) around this one line.
        os._exit(1)
    except STORE_DOWN:
        pass  # the watcher checks as soon as the store answers
    threading.Thread(target=_watch, args=(url, process, checked), daemon=True,
                     name="courier-data-version").start()


def _newer_than_known(url: str) -> None:
    """Raise DataVersionError when the store's data is now newer than this code knows."""
    version.known_version(url, socket_timeout=PROBE_TIMEOUT_S,
                          socket_connect_timeout=PROBE_TIMEOUT_S)


def _watch(url: str, process: str, checked: bool) -> None:
    """Check once the store answers, then watch the version: a newer release's
    migration stops this process rather than let it read a layout it does not know."""
    while True:
        time.sleep(WATCH_INTERVAL_S if checked else RETRY_INTERVAL_S)
        try:
            if checked:
                _newer_than_known(url)
            else:
                _report(process, check_once(url))
                checked = True
        except version.DataVersionError as exc:
            print(refusal(process, exc, starting=not checked), file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)  # the process's own orderly stop
            return
        except STORE_DOWN:
            continue
