"""Requests per second per key (token hash, client address): token buckets per process."""

from __future__ import annotations

import math
import time
from collections import OrderedDict

from messaging.errors import CourierError

# Buckets kept at most; the least recently used are forgotten first.
MAX_KEYS_TRACKED = 50_000


class RateLimiter:
    """Allows ``rate_per_s`` requests per key per second, bursts of one second's worth."""

    def __init__(self, rate_per_s: float, what: str) -> None:
        self.rate = rate_per_s
        self.what = what
        self.capacity = max(rate_per_s, 1.0)
        self.buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _level(self, key: str, now: float) -> float:
        level, last = self.buckets.get(key, (self.capacity, now))
        return min(self.capacity, level + (now - last) * self.rate)

    def check(self, key: str) -> None:
        """Take one request from the key's bucket.

        Raises:
            CourierError: RATE_LIMITED, with Retry-After, when the bucket is empty.
        """
        if self.rate <= 0:
            return
        now = time.monotonic()
        level = self._level(key, now)
        self.buckets.pop(key, None)
        if level < 1.0:
            self.buckets[key] = (level, now)
            raise self.refusal(level)
        self.buckets[key] = (level - 1.0, now)
        if len(self.buckets) > MAX_KEYS_TRACKED:
            self.buckets.popitem(last=False)

    def refusal(self, level: float = 0.0) -> CourierError:
        """The 429 of an empty bucket."""
        wait_s = max(1, math.ceil((1.0 - level) / self.rate))
        return CourierError(
            "RATE_LIMITED", f"more than {self.rate:g} requests per second from this {self.what}",
            {"retry_after_s": wait_s}, headers={"Retry-After": str(wait_s)},
        )
