"""Logs an operator can keep: warnings and errors always, per-task lines on demand.

With ``COURIER_LOG_TASKS`` unset (``courier up`` without ``--log-tasks``), the
loggers that write a line for every Celery task (received, succeeded), every
beat tick and every HTTP request stay at WARNING; everything else logs as
configured.

Secrets stay out of every line: a webhook URL is logged as scheme, host, port
and path, without its query string (where endpoints often carry a token) or
any user and password.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

from messaging.config import Settings

# The loggers that write one INFO line per task, per schedule tick or per request.
PER_EVENT_LOGGERS = (
    "celery.worker.strategy",  # Task ... received
    "celery.app.trace",  # Task ... succeeded in ...
    "celery.beat",  # Scheduler: Sending due task ...
    "uvicorn.access",  # one line per HTTP request
    "httpx",  # HTTP Request: POST ... (one per webhook attempt)
)


# The loggers that name the URLs they request (httpx: one line per webhook attempt).
URL_LOGGERS = ("httpx",)


def without_secrets(url: str) -> str:
    """``url`` without user, password, query string or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class UrlRedactor(logging.Filter):
    """Rewrites every URL among a record's arguments to ``without_secrets``'s form."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted_arg(arg) for arg in record.args)
        return True


def _redacted_arg(arg: object) -> object:
    text = str(arg)  # httpx passes its URL objects
    return without_secrets(text) if text.startswith(("http://", "https://")) else arg


def quiet_per_event_logs(settings: Settings) -> None:
    """Raise the per-task and per-request loggers to WARNING unless asked to log them,
    and keep secrets out of the lines that name URLs."""
    level = logging.NOTSET if settings.log_tasks else logging.WARNING
    for name in PER_EVENT_LOGGERS:
        logging.getLogger(name).setLevel(level)
    for name in URL_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, UrlRedactor) for f in logger.filters):
            logger.addFilter(UrlRedactor())
