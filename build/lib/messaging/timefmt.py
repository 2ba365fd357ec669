"""Time in Courier: integer microseconds in the store, RFC 3339 UTC on the wire."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_us() -> int:
    """Wall-clock time in microseconds since the epoch."""
    return time.time_ns() // 1000


def rfc3339(us: int | str | None) -> str | None:
    """Microseconds to ``2026-11-29T22:01:05.123456Z``; None and 0 stay None."""
    if us is None or us == "" or int(us) == 0:
        return None
    whole, micro = divmod(int(us), 1_000_000)
    dt = datetime.fromtimestamp(whole, tz=UTC).replace(microsecond=micro)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
