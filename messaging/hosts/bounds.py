"""What every host hook shares: its deadline, its error, and its work run within the
deadline, so that a host never waits on Courier for long."""

from __future__ import annotations

import threading
from collections.abc import Callable

HOOK_DEADLINE_S = 2.0


class HookError(Exception):
    """Why a hook did nothing this time (said on stderr; the host goes on)."""


def bounded(work: Callable[[], None], deadline_s: float, url: str) -> str | None:
    """Run ``work`` for at most ``deadline_s``; why it did nothing, if it did not (its
    HookError, or the deadline passing)."""
    failed: list[str] = []

    def run() -> None:
        try:
            work()
        except HookError as e:
            failed.append(str(e))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        return f"Courier at {url} did not answer within {deadline_s:g} s"
    return failed[0] if failed else None
