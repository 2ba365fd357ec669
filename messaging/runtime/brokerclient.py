"""kombu's Redis transport, keeping one client per channel for its plain commands.

kombu's Redis channel makes a new ``redis.Redis`` for each command it sends
outside its consumer (a publish, a queue's length): with redis-py 8 that
object builds a table of some 170 reply handlers each time, a large share of
the CPU each Celery task's publish costs the API. This channel
makes that client once and keeps it while its connection pool lives (kombu
replaces the pool after a connection failure, and the client with it). What
the client sends, and over which connections, is unchanged.

Used by the publishers of tickets (``messaging.runtime.publish``), for
``redis://`` brokers and for brokers found by their Sentinels (``sentinel://``,
kombu's sentinel transport, whose channel finds the primary through them and
whose pool follows a failover: the kept client is made again with each new
pool). TLS and AMQP brokers keep kombu's own transports, and so do the workers'
consumers and Flower (which knows brokers by the scheme of kombu's own
transports).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    """A Redis channel whose plain commands share one client."""

    _plain_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """The given client, else this channel's own (made again with a new pool)."""
        if client:
            yield client
            return
        kept = self._plain_client
        if kept is None or kept.connection_pool is not self.pool:
            kept = self._plain_client = self._create_client()  # type: ignore[no-untyped-call]
        yield kept


class SharedClientTransport(kombu_redis.Transport):
    """kombu's Redis transport with ``Channel``."""

    Channel = Channel


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """kombu's Sentinel channel whose plain commands share one client."""


class SharedClientSentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Sentinel transport with ``SentinelChannel``."""

    Channel = SentinelChannel


TRANSPORT = f"{__name__}:SharedClientTransport"
SENTINEL_TRANSPORT = f"{__name__}:SharedClientSentinelTransport"


def transport_for(broker_url: str) -> str | None:
    """The transport a publisher uses for ``broker_url``: one of these for plain
    Redis and for Sentinels, else None (kombu's own, by the URL's scheme)."""
    if broker_url.startswith("redis://"):
        return TRANSPORT
    return SENTINEL_TRANSPORT if broker_url.startswith("sentinel://") else None
