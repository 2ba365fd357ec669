"""Deployment policy per transport kind: queues, worker processes, prefetch, lease, retries,
requests under way at once.

None of it is a transport's nature: the operator sets it per kind in
``COURIER_TRANSPORT_POLICY``. What is left out comes from the kind's defaults:
inbox and webhook from their own settings, as they always did; any other kind
from ``DEFAULT``, never from a ``webhook_*`` setting.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from messaging.config import Settings

# Waits between attempts that failed before hand-off, for a kind with no schedule of its own.
DEFAULT_RETRY_SCHEDULE_S = (1.0, 5.0, 30.0, 300.0, 1800.0)


@dataclass(frozen=True)
class Policy:
    """How one transport kind is deployed."""

    # The kind's Celery worker: processes, and tickets each reserves ahead
    # (1: a slow task holds no other back).
    concurrency: int = 2
    prefetch: int = 1
    # How long a worker owns a delivery once leased.
    lease_s: float = 30.0
    # Waits before each retry of a delivery that failed before hand-off; past the last, failed.
    retry_schedule_s: tuple[float, ...] = DEFAULT_RETRY_SCHEDULE_S
    # Requests under way at once, across every worker, of one project and to one
    # recipient's endpoint (0: no cap). Only for transports that are not idempotent
    # and carry several at once (their requests wait on a receiver).
    in_flight_per_project: int = 0
    in_flight_per_endpoint: int = 0


DEFAULT = Policy()


def queue(kind: str, lane: str = "") -> str:
    """The queue of one transport kind's deliveries (on a lane, the lane's)."""
    return f"deliver.{kind}.{lane}" if lane else f"deliver.{kind}"


def _builtin(kind: str, settings: Settings) -> Policy:
    if kind == "inbox":
        # Its retries come from crashes after hand-off: the same waits webhooks use.
        return replace(DEFAULT, lease_s=settings.inbox_lease_s,
                       retry_schedule_s=tuple(settings.retry_schedule_s))
    if kind == "webhook":
        lease_s = settings.webhook_timeout_s + settings.webhook_lease_margin_s
        return replace(DEFAULT, lease_s=lease_s, retry_schedule_s=tuple(settings.retry_schedule_s),
                       in_flight_per_project=settings.webhook_in_flight_per_project,
                       in_flight_per_endpoint=settings.webhook_in_flight_per_endpoint)
    return DEFAULT


def policy(kind: str, settings: Settings) -> Policy:
    """The policy of one transport kind under these settings."""
    out = _builtin(kind, settings)
    chosen = settings.transport_policy.get(kind)
    if chosen is not None:
        given = chosen.model_dump(exclude_none=True)
        if "retry_schedule_s" in given:
            given["retry_schedule_s"] = tuple(given["retry_schedule_s"])
        out = replace(out, **given)
    if settings.worker_concurrency is not None:
        out = replace(out, concurrency=settings.worker_concurrency)
    return out

