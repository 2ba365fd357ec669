"""Time in Courier: integer microseconds in the store, RFC 3339 UTC on the wire."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache


def now_us() -> int:
    """Wall-clock time in microseconds since the epoch."""
    return time.time_ns() // 1000


def rfc3339(us: int | str | None) -> str | None:
    """Microseconds to ``2026-11-29T22:01:05.123456Z``; None and 0 stay None."""
    if us is None or us == "" or int(us) == 0:
        return None
    whole, micro = divmod(int(us), 1_000_000)
    return f"{_second(whole)}.{micro:06d}Z"


@lru_cache(maxsize=256)
def _second(whole: int) -> str:
    """``2026-11-29T22:01:05`` of a second since the epoch (answers of one moment
    name the same few seconds)."""
    return datetime.fromtimestamp(whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_ts(ts: str | None) -> float | None:
    """An RFC 3339 timestamp of Courier's (``...Z``) as seconds since the epoch; None
    for None or a string that is not one."""
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
