"""Requests per second per token, a token bucket in each API process."""

from __future__ import annotations

import math
import time
from collections import OrderedDict

from messaging import ids
from messaging.errors import CourierError

# Buckets kept at most; the least recently used are forgotten first.
MAX_TOKENS_TRACKED = 50_000


class RateLimiter:
    """Allows ``rate_per_s`` requests per token per second, bursts of one second's worth."""

    def __init__(self, rate_per_s: float) -> None:
        self.rate = rate_per_s
        self.capacity = max(rate_per_s, 1.0)
        self.buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def check(self, token: str) -> None:
        """Take one request from the token's bucket.

        Raises:
            CourierError: RATE_LIMITED, with Retry-After, when the bucket is empty.
        """
        if self.rate <= 0:
            return
        key = ids.token_hash(token)
        now = time.monotonic()
        level, last = self.buckets.pop(key, (self.capacity, now))
        level = min(self.capacity, level + (now - last) * self.rate)
        if level < 1.0:
            self.buckets[key] = (level, now)
            wait_s = math.ceil((1.0 - level) / self.rate)
            raise CourierError(
                "RATE_LIMITED", f"more than {self.rate:g} requests per second from this token",
                {"retry_after_s": wait_s}, headers={"Retry-After": str(wait_s)},
            )
        self.buckets[key] = (level - 1.0, now)
        if len(self.buckets) > MAX_TOKENS_TRACKED:
            self.buckets.popitem(last=False)
