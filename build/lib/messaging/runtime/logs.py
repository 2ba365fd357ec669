"""Logs an operator can keep: warnings and errors always, per-task lines on demand.

With ``COURIER_LOG_TASKS`` unset (``courier up`` without ``--log-tasks``), the
loggers that write a line for every Celery task (received, succeeded), every
beat tick and every HTTP request stay at WARNING; everything else logs as
configured.
"""

from __future__ import annotations

import logging

from messaging.config import Settings

# The loggers that write one INFO line per task, per schedule tick or per request.
PER_EVENT_LOGGERS = (
    "celery.worker.strategy",  # Task ... received
    "celery.app.trace",  # Task ... succeeded in ...
    "celery.beat",  # Scheduler: Sending due task ...
    "uvicorn.access",  # one line per HTTP request
)


def quiet_per_event_logs(settings: Settings) -> None:
    """Raise the per-task and per-request loggers to WARNING unless asked to log them."""
    level = logging.NOTSET if settings.log_tasks else logging.WARNING
    for name in PER_EVENT_LOGGERS:
        logging.getLogger(name).setLevel(level)
