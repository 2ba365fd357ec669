"""The workers' side of the store (synchronous): leases, outcomes, the sweeper."""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from messaging.store import keys
from messaging.store.scripts import Scripts
from messaging.timefmt import now_us

SWEEP_BATCH = 500


@dataclass(frozen=True)
class Leased:
    """A delivery this worker holds, with its fencing token."""

    delivery_id: str
    fence: int
    agent_id: str
    message_id: str
    attempt: int


@dataclass(frozen=True)
class SweepAction:
    """What the sweeper does with one overdue delivery."""

    delivery_id: str
    transport: str
    action: str  # "publish" or "expired"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class DeliveryStore:
    """Typed operations for workers and the sweeper; every key comes from ``keys``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.scripts = Scripts(client)

    @classmethod
    def from_url(cls, url: str) -> DeliveryStore:
        """A store on a new connection pool for ``url``."""
        return cls(redis.Redis.from_url(url, decode_responses=True, health_check_interval=30))

    def lease(
        self, project_id: str, delivery_ids: list[str], lease_ms: int, idempotent: bool
    ) -> list[Leased]:
        """Take the dispatch lease of each free delivery; the rest are someone else's."""
        raw = self.scripts.lease_deliveries(
            keys=[keys.due(project_id)] + [keys.delivery(project_id, d) for d in delivery_ids],
            args=[str(_now_ms()), str(now_us()), str(lease_ms), "1" if idempotent else "0"],
        )
        out = []
        for i in range(0, len(raw), 5):
            index, fence, agent_id, message_id, attempt = raw[i : i + 5]
            out.append(Leased(delivery_ids[int(index) - 2], int(fence), agent_id, message_id,
                              int(attempt)))
        return out

    def deliver_inbox(self, project_id: str, leased: list[Leased]) -> int:
        """Put leased deliveries in their inboxes and record ``accepted``; returns how many."""
        if not leased:
            return 0
        script_keys = [keys.seq(project_id), keys.due(project_id)]
        for lease in leased:
            script_keys += [keys.delivery(project_id, lease.delivery_id),
                            keys.inbox(project_id, lease.agent_id)]
        fences = [str(lease.fence) for lease in leased]
        return int(self.scripts.deliver_inbox(keys=script_keys, args=[str(now_us()), *fences]))

    def project_ids(self) -> list[str]:
        """Every project (the sweeper's round)."""
        return sorted(self.client.smembers(keys.PROJECTS))

    def sweep(self, project_id: str, grace_ms: int) -> list[SweepAction]:
        """Overdue deliveries of one project and what to do with each."""
        now = _now_ms()
        dids = self.client.zrangebyscore(keys.due(project_id), "-inf", now, start=0,
                                         num=SWEEP_BATCH)
        if not dids:
            return []
        raw = self.scripts.sweep_due(
            keys=[keys.due(project_id)] + [keys.delivery(project_id, d) for d in dids],
            args=[str(now), str(grace_ms)],
        )
        return [SweepAction(*raw[i : i + 3]) for i in range(0, len(raw), 3)]
