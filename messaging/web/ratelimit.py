"""Requests per second per key (a token, a client address), counted in the store.

Every API process, on every machine, spends from the same bucket
(``take_request.lua``), so a client's rate is the same however many
processes serve it and whichever one each connection lands on. A bucket
holds one second's worth of requests (at least one).
"""

from __future__ import annotations

import math
import time

from messaging.errors import CourierError
from messaging.store.admission import RateCharge
from messaging.store.facts import Lru
from messaging.store.store import Store

US_PER_S = 1_000_000
# Buckets this process found empty lately, kept until they have room again.
EMPTY_KEPT = 10_000


class RateLimiter:
    """Allows ``rate_per_s`` requests per bucket per second, bursts of one second's worth."""

    def __init__(self, store: Store, rate_per_s: float, what: str) -> None:
        self.store, self.rate, self.what = store, rate_per_s, what
        self.interval_us = math.ceil(US_PER_S / rate_per_s) if rate_per_s > 0 else 0
        self.burst_us = math.ceil(max(rate_per_s, 1.0) * self.interval_us)
        # bucket -> when (monotonic s) it has room again, as the store last said
        self.empty: Lru[str, float] = Lru(EMPTY_KEPT)

    async def check(self, bucket: str) -> None:
        """Take one request from the bucket (``Store.token_bucket``, ``Store.address_bucket``).

        Raises:
            CourierError: RATE_LIMITED, with Retry-After, when the bucket is empty.
        """
        await self.spend(self.charge(bucket))

    def charge(self, bucket: str) -> RateCharge | None:
        """One request charged to the bucket, for ``spend`` or the script serving the
        request to spend (None when there is no limit)."""
        if self.rate <= 0:
            return None
        return RateCharge(bucket, self.interval_us, self.burst_us)

    async def spend(self, charge: RateCharge | None) -> None:
        """Take the charged request from its bucket.

        Raises:
            CourierError: RATE_LIMITED, with Retry-After, when the bucket is empty.
        """
        if charge is None:
            return
        wait_us = await self.store.take_request(charge.bucket, charge.interval_us,
                                                charge.burst_us)
        if wait_us > 0:
            raise self.emptied(charge.bucket, wait_us)

    def emptied(self, bucket: str, wait_us: int) -> CourierError:
        """The 429 of a bucket the store found empty, remembered until it has room."""
        self.empty.put(bucket, time.monotonic() + wait_us / US_PER_S)
        return self.refusal(wait_us)

    def known_empty(self, bucket: str) -> bool:
        """True while the bucket is empty as far as this process last heard."""
        until = self.empty.get(bucket)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        self.empty.drop(bucket)
        return False

    def refusal(self, wait_us: int) -> CourierError:
        """The 429 of an empty bucket, ``wait_us`` from room for one more."""
        wait_s = max(1, math.ceil(wait_us / US_PER_S))
        return CourierError(
            "RATE_LIMITED", f"more than {self.rate:g} requests per second from this {self.what}",
            {"retry_after_s": wait_s}, headers={"Retry-After": str(wait_s)},
        )
