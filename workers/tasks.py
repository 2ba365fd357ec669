"""Celery tasks: delivery (one transport, several deliveries) and the sweeper."""

from __future__ import annotations

import logging
import os

import redis
from celery.utils.log import get_task_logger

from messaging.config import get_settings
from messaging.runtime.celeryconf import DELIVER_TASK, SWEEP_TASK
from messaging.runtime.publish import Publisher
from messaging.service.subscriptions import expire_due_sync
from messaging.store.deliveries import DeliveryStore, Leased, now_ms
from messaging.store.searchindex import index_messages
from workers import transports
from workers.app import app

log: logging.Logger = get_task_logger(__name__)

LEASE_EXPIRED = "the worker's lease ran out before it recorded an outcome; whether the " \
    "receiver got the request is unknown"

_store: tuple[int, DeliveryStore] | None = None
_publisher: tuple[int, Publisher] | None = None


def store() -> DeliveryStore:
    """This process's store connection (made after fork, never shared across it)."""
    global _store
    if _store is None or _store[0] != os.getpid():
        _store = (os.getpid(), DeliveryStore.from_url(get_settings().store_url))
    return _store[1]


def publisher() -> Publisher:
    """This process's publisher, for the sweeper."""
    global _publisher
    if _publisher is None or _publisher[0] != os.getpid():
        _publisher = (os.getpid(), Publisher(get_settings()))
    return _publisher[1]


@app.task(name=DELIVER_TASK)
def deliver(project_id: str, transport: str, delivery_ids: list[str]) -> int:
    """Lease what is free of these deliveries, deliver it, record outcomes.

    A duplicate task finds the leases taken or the outcomes recorded and does
    nothing; returns how many deliveries this run leased.
    """
    carrier = transports.get(transport)
    lease_ms = int(carrier.lease_s * 1000)
    if carrier.idempotent:
        leased = store().lease(project_id, delivery_ids, lease_ms, True)
        if leased:
            carrier.deliver(store(), project_id, leased)
            index(project_id, leased)
        return len(leased)
    # One lease per request, taken just before it: a lease never runs out while
    # its delivery waits behind others in the same task.
    count = 0
    for delivery_id in delivery_ids:
        leased = store().lease(project_id, [delivery_id], lease_ms, False)
        if leased:
            carrier.deliver(store(), project_id, leased)
            index(project_id, leased)
            count += 1
    return count


def index(project_id: str, leased: list[Leased]) -> None:
    """Make dispatched messages searchable by their senders and these recipients.

    After the outcome is recorded, so search never delays a delivery; a failure
    here is logged and leaves the delivery as recorded.
    """
    viewers: dict[str, set[str]] = {}
    for lease in leased:
        viewers.setdefault(lease.message_id, set()).update((lease.agent_id, lease.sender_id))
    try:
        index_messages(store().client, project_id, viewers)
    except redis.RedisError as exc:
        log.warning("search index of %s not updated: %s", sorted(viewers), exc)


@app.task(name=SWEEP_TASK)
def sweep() -> int:
    """Publish again what was admitted but never dispatched, is due for a retry
    or a redrive, or whose idempotent worker died; record `unknown` where a
    non-idempotent worker's lease ran out.

    Returns how many deliveries were published again.
    """
    grace_ms = int(get_settings().outbox_grace_s * 1000)
    idempotent = [kind for kind, t in transports.registry().items() if t.idempotent]
    published = 0
    for project_id in store().project_ids():
        # Expired subscriptions first: their notices are due at once, so this
        # round publishes them.
        expire_due_sync(store().client, project_id, now_ms())
        actions = store().sweep(project_id, grace_ms, idempotent)
        todo = [(project_id, a.transport, a.delivery_id) for a in actions if a.action == "publish"]
        for a in actions:
            if a.action == "expired" and store().expire_lease(project_id, a.delivery_id,
                                                              LEASE_EXPIRED):
                log.warning("delivery %s: lease ran out after hand-off; outcome unknown",
                            a.delivery_id)
        if todo:
            publisher().publish_grouped(todo)
            published += len(todo)
            log.info("sweeper published %d deliveries of %s again", len(todo), project_id)
    return published
