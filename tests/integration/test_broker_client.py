"""The Redis broker's channel keeps one client for its publishes, across a broker restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from messaging.config import Settings
from messaging.launch.embedded import EmbeddedStore
from messaging.runtime import brokerclient
from messaging.runtime.celeryconf import celery_config, queue_for
from messaging.runtime.publish import Publisher
from tests.stack import free_port

INBOX = ("inbox", "")


def _plain_client(publisher: Publisher) -> object:
    with publisher.app.producer_or_acquire() as producer:
        channel = producer.channel
        assert isinstance(channel, brokerclient.Channel)
        return channel._plain_client


@pytest.mark.timeout(60)
def test_publishes_share_one_client_and_survive_a_broker_restart(tmp_path: Path):
    broker = EmbeddedStore(tmp_path / "broker", port=free_port())
    broker.start()
    publisher = Publisher(Settings(redis_url=broker.url, broker_url=broker.url))
    try:
        publisher.tickets(*INBOX, 3)
        kept = _plain_client(publisher)
        assert kept is not None
        publisher.tickets(*INBOX, 3)
        assert _plain_client(publisher) is kept
        assert publisher.queue_depths()[queue_for("inbox")] == 6

        broker.stop()
        with pytest.raises(Exception):  # noqa: B017 - whatever the broker's client raises
            publisher.tickets(*INBOX, 1)
        broker.start()  # AOF: the six tickets are still there
        publisher.tickets(*INBOX, 2)
        assert publisher.queue_depths()[queue_for("inbox")] == 8
    finally:
        publisher.close()
        broker.stop()


def test_only_plain_redis_brokers_use_it():
    assert brokerclient.transport_for("redis://127.0.0.1:6379/0") == brokerclient.TRANSPORT
    for other in ("rediss://127.0.0.1:6380/0", "amqp://guest:guest@127.0.0.1:5672//",
                  "sentinel://127.0.0.1:26379/0"):
        assert brokerclient.transport_for(other) is None, other
    # Flower and the workers' consumers keep kombu's own transport.
    assert "broker_transport" not in celery_config(Settings())
