"""kombu's Redis transport, keeping one client per channel for its plain commands.

kombu's Redis channel makes a new ``redis.Redis`` for each command it sends
outside its consumer (a publish, a queue's length): with redis-py 8 that
object builds a table of some 170 reply handlers each time, a large share of
the CPU each Celery task's publish costs the API. This channel
makes that client once and keeps it while its connection pool lives (kombu
replaces the pool after a connection failure, and the client with it). What
the client sends, and over which connections, is unchanged.

Used by the publishers of tickets (``messaging.runtime.publish``), for
``redis://`` brokers only: TLS, Sentinel and AMQP brokers keep kombu's own
transports, and so do the workers' consumers and Flower (which knows brokers
by the scheme of kombu's own transports).
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


TRANSPORT = f"{__name__}:SharedClientTransport"


def transport_for(broker_url: str) -> str | None:
    """The transport a publisher uses for ``broker_url``: this one for plain Redis,
    else None (kombu's own, by the URL's scheme)."""
    return TRANSPORT if broker_url.startswith("redis://") else None
