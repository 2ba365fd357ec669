"""Celery settings shared by the API (which publishes) and the workers.

Kept here, not in ``workers``, because the API publishes tasks by name and
must not import worker code. Queues come from each installed kind's policy
(``messaging.transports.policy``), batch sizes from its transport's declaration,
read without starting it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kombu.entity import Exchange, Queue

from messaging import transports
from messaging.config import Settings
from messaging.transports import policy

DELIVER_TASK = "courier.deliver"
SWEEP_TASK = "courier.sweep"
RETENTION_TASK = "courier.retention"
SWEEP_QUEUE = "courier.sweep"

# A task may run at most this long; the webhook timeout sits well inside it.
TASK_TIME_LIMIT_S = 300
# The Redis transport re-delivers an unacked task after this long. It must
# exceed the hard time limit, or a slow task would run twice at once.
VISIBILITY_TIMEOUT_S = 2 * TASK_TIME_LIMIT_S
# Publishing gives up quickly: the outbox keeps what was not published.
PUBLISH_TIMEOUT_S = 2.0


def queue_for(transport: str, lane: str = "") -> str:
    """The queue of one transport's deliveries (on a lane, the lane's)."""
    return policy.queue(transport, lane)


def batch_size(transport: str) -> int:
    """Deliveries per task of one transport."""
    return transports.installed()[transport].batch_size


def transport_kinds() -> list[str]:
    """Every installed transport's kind."""
    return list(transports.installed())


def delivery_queues() -> list[str]:
    """The shared delivery queue of every installed transport."""
    return [policy.queue(kind) for kind in transports.installed()]


def courier_queues(lanes: Iterable[str]) -> list[str]:
    """Every delivery queue, those of the given lanes included, and the sweeper's."""
    names = delivery_queues()
    for lane in lanes:
        names += [queue_for(kind, lane) for kind in transport_kinds()]
    return [*names, SWEEP_QUEUE]


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery configuration of this deployment."""
    names = [*delivery_queues(), SWEEP_QUEUE]
    queues = [Queue(name, Exchange(name, type="direct"), routing_key=name) for name in names]
    transport_options: dict[str, Any] = {
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        "socket_timeout": PUBLISH_TIMEOUT_S,
        "socket_connect_timeout": PUBLISH_TIMEOUT_S,
    }
    if settings.broker_master_name is not None:  # kombu's sentinel transport
        transport_options["master_name"] = settings.broker_master_name
    return {
        "broker_url": settings.celery_broker_url,
        "broker_connection_timeout": PUBLISH_TIMEOUT_S,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": transport_options,
        "task_queues": queues,
        "task_default_queue": SWEEP_QUEUE,
        "task_routes": {SWEEP_TASK: {"queue": SWEEP_QUEUE},
                        RETENTION_TASK: {"queue": SWEEP_QUEUE}},
        "task_serializer": "json",
        "accept_content": ["json"],
        # Outcomes live in Courier's store, never in a result backend.
        "task_ignore_result": True,
        "result_backend": None,
        # A task is acknowledged after it ran, and put back if its process died:
        # the dispatch lease makes a second run harmless.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_time_limit": TASK_TIME_LIMIT_S,
        "task_soft_time_limit": TASK_TIME_LIMIT_S - 30,
        "task_publish_retry": False,
        "worker_prefetch_multiplier": 1,
        # Workers send task events for Flower (-E); a "sent" event per publish
        # would cost the API a second broker write per task for little.
        "worker_send_task_events": True,
        "task_send_sent_event": False,
        "beat_schedule": {
            "sweep": {"task": SWEEP_TASK, "schedule": settings.sweep_interval_s},
            "retention": {"task": RETENTION_TASK, "schedule": settings.retention_interval_s},
        },
    }
