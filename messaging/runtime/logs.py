"""Logs an operator can keep: one format, one line per outage, per-task lines on demand.

Every server process (API, workers, beat, Flower, the store wrapper) calls
``setup`` once its own library has set up logging. With
``COURIER_LOG_FORMAT=json`` each handler then writes one JSON object per line
(python-json-logger): ``ts``, ``level``, ``process``, ``event``, ``logger``
and the record's own fields (an access line's ``client``, ``method``,
``path``, ``status``; a traceback as ``exc_info``). With ``text`` (the
default) each library keeps its own format.

In both formats a lost store or broker connection is one line, not a
traceback per retry: the first record caused by a connection error becomes
``lost the connection to the store or broker: <why>``, later ones are held
back, and a probe pings the store (and broker) every second until they
answer, then writes one ``connection back`` line naming how long it took and
how many lines were held back. A CRITICAL record is never held back: a
process that stops says why, outage or not.

With ``COURIER_LOG_TASKS`` unset (``courier up`` without ``--log-tasks``), the
loggers that write a line for every Celery task (received, succeeded), every
beat tick and every HTTP request stay at WARNING.

Secrets stay out of every line: a webhook URL is logged as scheme, host, port
and path, without its query string (where endpoints often carry a token) or
any user and password.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO
from urllib.parse import urlsplit, urlunsplit

import redis.exceptions
from kombu.connection import Connection
from kombu.exceptions import OperationalError
from pythonjsonlogger.json import JsonFormatter
from redis.exceptions import RedisClusterException

from messaging.config import Settings
from messaging.store import connect

# The loggers that write one INFO line per task, per schedule tick or per request.
PER_EVENT_LOGGERS = (
    "celery.worker.strategy",  # Task ... received
    "celery.app.trace",  # Task ... succeeded in ...
    "celery.beat",  # Scheduler: Sending due task ...
    "uvicorn.access",  # one line per HTTP request
    "httpx",  # HTTP Request: POST ... (one per webhook attempt)
)
JSON = "json"
JSON_FIELDS = "%(levelname)s %(name)s %(message)s"
JSON_NAMES = {"levelname": "level", "name": "logger", "message": "event"}
ACCESS_LOGGER = "uvicorn.access"
ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")
# Exceptions that mean "the store or broker does not answer", wherever they surface
# (not the builtin ConnectionError: a webhook receiver that refuses is no outage).
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, RedisClusterException,
    OperationalError)
# What Celery, kombu and Flower say, without an exception, while a connection is down.
CONNECTION_WORDS = ("Cannot connect to", "Connection to broker lost", "Connection error",
                    "Failed to capture events", "connection refused", "Timeout reading",
                    "after connection restart")
CONNECTION_LOGGERS = ("celery", "kombu", "flower")
# What Celery says once it has reconnected: the "back" line has said it already.
RECONNECTED_WORDS = ("Connected to",)
RECONNECTED_WINDOW_S = 60.0
# Set on the records this module writes about an outage, so no filter holds them back.
OUTAGE_ATTR = "courier_outage"
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 1.0

log = logging.getLogger("courier.outage")


# The loggers that name the URLs they request (httpx: one line per webhook attempt).
URL_LOGGERS = ("httpx",)


def without_secrets(url: str) -> str:
    """``url`` without user, password, query string or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    try:
        port = parts.port
    except ValueError:  # several hosts (Sentinels): only the first one's name
        port = None
    if port is not None:
        netloc += f":{port}"
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


def json_formatter(process: str) -> logging.Formatter:
    """One JSON object per line: ``ts``, ``level``, ``process``, ``event``, fields."""
    return JsonFormatter(JSON_FIELDS, rename_fields=JSON_NAMES, static_fields={"process": process},
                         timestamp="ts", json_ensure_ascii=False)


def json_line(process: str, text: str, logger: str = "courier") -> str:
    """``text`` as one JSON log line of ``process`` (a line that is one already stays)."""
    if text.startswith("{"):
        return text
    record = logging.makeLogRecord({"name": logger, "levelno": logging.INFO,
                                    "levelname": "INFO", "msg": text})
    return json_formatter(process).format(record)


def json_say(process: str, logger: str) -> Callable[..., None]:
    """A stand-in for a library's signal-safe ``say(msg, file)``: one JSON line, written
    with one ``os.write`` and no logging lock, as a signal handler may."""
    formatter = json_formatter(process)

    def say(msg: str, f: IO[str] | None = sys.__stderr__) -> None:
        record = logging.makeLogRecord({"name": logger, "levelno": logging.WARNING,
                                        "levelname": "WARNING", "msg": msg})
        os.write((f or sys.stderr).fileno(), (formatter.format(record) + "\n").encode())

    return say


class AccessFields(logging.Filter):
    """Gives uvicorn's access lines their parts as fields (it passes them as arguments)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Copy the arguments to named fields; never drops a record."""
        args = record.args
        if isinstance(args, tuple) and len(args) == len(ACCESS_FIELDS):
            for name, value in zip(ACCESS_FIELDS, args, strict=True):
                setattr(record, name, value)
        return True


def connection_error(record: logging.LogRecord) -> str | None:
    """Why ``record`` was written, if it is about a store or broker that does not answer."""
    exc = record.exc_info[1] if record.exc_info else None
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, CONNECTION_ERRORS):
            return f"{type(exc).__name__}: {exc}"
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    if record.name.startswith(CONNECTION_LOGGERS):
        text = _message(record)
        if any(words in text for words in CONNECTION_WORDS):
            return text.splitlines()[0]
    return None


def _message(record: logging.LogRecord) -> str:
    """The record's message, or its bare format if its arguments do not fit."""
    try:
        return record.getMessage()
    except (TypeError, ValueError):
        return str(record.msg)


class Outage(logging.Filter):
    """One line when the connection is lost, one when it is back; nothing in between.

    One per process, on every handler, so its state is the process's.
    """

    def __init__(self, probe: Callable[[], None],
                 interval_s: float = PROBE_INTERVAL_S) -> None:
        super().__init__()
        self._probe = probe
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._since: float | None = None
        self._back_at = -RECONNECTED_WINDOW_S
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """Turn the first connection error into the "lost" line; hold back the rest."""
        if getattr(record, OUTAGE_ATTR, None) or record.levelno >= logging.CRITICAL:
            return True  # a process that stops says why, outage or not
        reason = connection_error(record)
        if reason is None:
            return not self._reconnected(record)
        with self._lock:
            if self._since is not None:
                self._held += 1
                return False
            self._since, self._held = time.monotonic(), 0
        record.msg = "lost the connection to the store or broker (%s); one line when it is back"
        record.args = (reason,)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        # Celery's task-failure record carries the traceback again as extra data.
        record.__dict__.pop("data", None)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        setattr(record, OUTAGE_ATTR, "lost")
        threading.Thread(target=self._wait_for_it, name="courier-outage", daemon=True).start()
        return True

    def _reconnected(self, record: logging.LogRecord) -> bool:
        """True for a library's own "connected" line during or just after an outage."""
        if not record.name.startswith(CONNECTION_LOGGERS):
            return False
        recent = self._since is not None or (
            time.monotonic() - self._back_at < RECONNECTED_WINDOW_S)
        return recent and _message(record).startswith(RECONNECTED_WORDS)

    def _wait_for_it(self) -> None:
        """Probe until the store and broker answer, then write the one "back" line."""
        while True:
            time.sleep(self._interval_s)
            try:
                self._probe()
            except Exception:  # noqa: BLE001 - any failure means: not back yet
                continue
            break
        with self._lock:
            since, held, self._since = self._since or time.monotonic(), self._held, None
            self._back_at = time.monotonic()
        log.warning("connection to the store and broker back after %.1f s (%d lines held back)",
                    time.monotonic() - since, held,
                    extra={OUTAGE_ATTR: "back", "down_s": round(time.monotonic() - since, 1),
                           "held_back": held})


def probe(settings: Settings) -> Callable[[], None]:
    """A check that raises unless the store and the broker answer."""

    def check() -> None:
        connect.ping(settings.store_url, PROBE_TIMEOUT_S)
        broker = settings.broker_url
        if broker and broker != settings.store_url:
            # kombu ships no type for its connection's constructor.
            with Connection(broker, connect_timeout=PROBE_TIMEOUT_S) as conn:  # type: ignore[no-untyped-call]
                conn.ensure_connection(max_retries=1)

    return check


def _handlers() -> Iterator[logging.Handler]:
    """Every handler of this process's loggers, the root's included, once each."""
    seen: set[int] = set()
    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict
                                      .values() if isinstance(logger, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if id(handler) not in seen:
                seen.add(id(handler))
                yield handler


_outage: Outage | None = None


def setup(process: str, settings: Settings) -> None:
    """Give every handler of this process the deployment's format and the outage filter.

    Called once the process's own library (uvicorn, Celery, Tornado) has set up
    its handlers; a process with none gets one on stderr.
    """
    global _outage
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
    if _outage is None:
        _outage = Outage(probe(settings))
    json = settings.log_format == JSON
    if json and not any(isinstance(f, AccessFields)
                        for f in logging.getLogger(ACCESS_LOGGER).filters):
        logging.getLogger(ACCESS_LOGGER).addFilter(AccessFields())
    for handler in _handlers():
        if json:
            handler.setFormatter(json_formatter(process))
        if _outage not in handler.filters:
            handler.addFilter(_outage)
    quiet_per_event_logs(settings)
