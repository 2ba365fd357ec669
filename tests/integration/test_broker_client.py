"""The Redis broker's channel keeps one client for its publishes, across a broker restart,
and so does the channel of a broker found by its Sentinels, across a failover."""

from __future__ import annotations

from pathlib import Path

import pytest

from messaging.config import Settings
from messaging.launch.embedded import EmbeddedStore
from messaging.runtime import brokerclient
from messaging.runtime.celeryconf import celery_config, queue_for
from messaging.runtime.publish import Publisher
from messaging.store import connect
from tests.sentinel import Watched
from tests.stack import free_port, wait_until

INBOX = ("inbox", "")


def _plain_client(publisher: Publisher,
                  kind: type[brokerclient.Channel] = brokerclient.Channel) -> object:
    with publisher.app.producer_or_acquire() as producer:
        channel = producer.channel
        assert isinstance(channel, kind)
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


def test_only_plain_redis_and_sentinel_brokers_use_it():
    assert brokerclient.transport_for("redis://127.0.0.1:6379/0") == brokerclient.TRANSPORT
    assert brokerclient.transport_for(
        "sentinel://127.0.0.1:26379/0;sentinel://127.0.0.1:26380/0") == (
            brokerclient.SENTINEL_TRANSPORT)
    for other in ("rediss://127.0.0.1:6380/0", "amqp://guest:guest@127.0.0.1:5672//"):
        assert brokerclient.transport_for(other) is None, other
    # Flower and the workers' consumers keep kombu's own transport.
    assert "broker_transport" not in celery_config(Settings())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sentinel_store_s_publishes_share_one_client_and_follow_a_failover(tmp_path: Path):
    watched = Watched(tmp_path / "store").start()
    # No broker of its own: the store's Sentinels, through kombu's sentinel transport.
    publisher = Publisher(Settings(redis_url=watched.url, broker_url=None))
    try:
        publisher.tickets(*INBOX, 3)
        kept = _plain_client(publisher, brokerclient.SentinelChannel)
        publisher.tickets(*INBOX, 3)
        assert _plain_client(publisher, brokerclient.SentinelChannel) is kept
        assert publisher.queue_depths()[queue_for("inbox")] == 6
        primary = watched.primary()
        assert primary is not None
        with connect.sync_client(watched.other(primary).url) as r:
            wait_until(lambda: r.llen(queue_for("inbox")) == 6,  # type: ignore[union-attr]
                       what="the tickets on the replica")
        new = watched.kill_primary()

        def published() -> bool:
            try:
                publisher.tickets(*INBOX, 1)
            except Exception:  # the old primary's connection, until the pool is new
                return False
            return True

        wait_until(published, timeout_s=30, what="a publish to the new primary")
        with connect.sync_client(new.url) as r:
            held = r.llen(queue_for("inbox"))  # type: ignore[union-attr]
        assert publisher.queue_depths()[queue_for("inbox")] == held >= 7
    finally:
        publisher.close()
        watched.stop()
