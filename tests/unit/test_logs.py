"""Which log records count as a lost store or broker connection."""

from __future__ import annotations

import logging
import sys

import httpx
import redis.exceptions
from kombu.exceptions import OperationalError

from messaging.runtime import logs
from messaging.runtime.logs import connection_error, json_line


def _record(name: str, msg: str, exc: BaseException | None = None) -> logging.LogRecord:
    info = None
    if exc is not None:
        try:
            raise exc
        except BaseException:
            info = sys.exc_info()
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, info)


def test_store_and_broker_errors_count_wherever_they_are_in_the_chain() -> None:
    wrapped = OperationalError("Timeout reading from socket")
    wrapped.__context__ = redis.exceptions.TimeoutError("Timeout reading from socket")
    assert connection_error(_record("celery.beat", "Message Error", wrapped))
    assert connection_error(_record("messaging.x", "boom",
                                    redis.exceptions.ConnectionError("refused")))
    assert connection_error(_record("celery.worker.consumer.consumer",
                                    "consumer: Cannot connect to redis://:**@h:1/0: refused"))


def test_other_failures_are_no_outage() -> None:
    refused = httpx.ConnectError("All connection attempts failed")
    refused.__context__ = ConnectionRefusedError(111, "Connection refused")
    assert connection_error(_record("workers.transports.webhook", "webhook failed",
                                    refused)) is None
    assert connection_error(_record("celery.app.trace", "Task raised ValueError",
                                    ValueError("x"))) is None
    assert connection_error(_record("messaging.x", "Cannot connect to the party")) is None


def test_a_plain_line_becomes_a_json_line_and_a_json_line_stays() -> None:
    line = json_line("courier", "API:    http://127.0.0.1:8787")
    assert line.startswith("{") and '"process": "courier"' in line and '"ts": ' in line
    assert json_line("api", '{"event": "x"}') == '{"event": "x"}'


def test_a_task_failure_from_a_lost_store_becomes_the_lost_line_without_its_traceback() -> None:
    try:
        raise redis.exceptions.TimeoutError("Timeout reading from socket")
    except redis.exceptions.TimeoutError:
        exc_info = sys.exc_info()
    # As Celery writes a task failure: the traceback again in its extra data.
    record = logging.LogRecord("celery.app.trace", logging.ERROR, __file__, 1,
                               "Task %(name)s raised unexpected", None, exc_info)
    record.data = {"traceback": "Traceback (most recent call last): ..."}
    outage = logs.Outage(probe=lambda: None, interval_s=0.01)
    assert outage.filter(record)
    assert record.levelname == "WARNING" and record.exc_info is None
    assert "data" not in record.__dict__
    assert "lost the connection" in record.getMessage()


def test_a_process_that_stops_during_an_outage_says_why() -> None:
    def still_down() -> None:
        raise redis.exceptions.ConnectionError("refused")

    outage = logs.Outage(probe=still_down, interval_s=60)
    lost = redis.exceptions.ConnectionError("Error 111 connecting")
    assert outage.filter(_record("celery.worker.consumer.consumer", "Connection lost", lost))
    assert not outage.filter(_record("kombu.connection", "retrying", lost))
    dying = _record("celery.worker", "Unrecoverable error: %r", lost)
    dying.levelno, dying.levelname = logging.CRITICAL, "CRITICAL"
    dying.args = (lost,)
    assert outage.filter(dying)
    assert dying.exc_info is not None and dying.getMessage().startswith("Unrecoverable error")
