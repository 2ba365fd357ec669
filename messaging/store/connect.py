"""Connections to the store: one server, a primary under Sentinel, or a Redis Cluster,
chosen by the URL's scheme.

``redis://`` and ``rediss://`` name one server. ``redis+sentinel://`` names the
Sentinels that watch a primary and the primary's name,
``redis+sentinel://:PASSWORD@HOST:PORT,HOST:PORT/NAME[/DB]`` (the password is
the data nodes'; the Sentinels take none): the client asks them for the primary,
and after a failover finds the new one by itself. ``redis+cluster://`` and
``rediss+cluster://`` name one node of a Redis Cluster (database 0 only); the
client finds the other nodes itself and sends each command, script and
pipeline entry to the node that holds its key. Every key of a project carries
the hash tag ``{p:<project_id>}``, so each script runs on one node.
"""

from __future__ import annotations

import contextlib
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel
import redis.sentinel
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import ClusterError, RedisClusterException, TryAgainError

from messaging.config import (
    is_cluster,
    is_sentinel,
    node_url,
    sentinel_parts,
)

SENTINEL_TIMEOUT_S = 1.0
# A connection idle this long is checked with PING before it is used again.
HEALTH_CHECK_INTERVAL_S = 30
STORE_OPTIONS: dict[str, Any] = {
    "decode_responses": True,
    "health_check_interval": HEALTH_CHECK_INTERVAL_S,
}

# Connections of one asyncio client, and how long a request waits for a free one.
POOL_CONNECTIONS = 100
POOL_WAIT_S = 5.0
# Connections for blocking reads: one per project with an event stream open on
# this API process (each project's reader holds one while it waits).
WAIT_CONNECTIONS = 1000

SyncClient = redis.Redis | RedisCluster
AsyncClient = aioredis.Redis | AsyncRedisCluster

# What the client raises when the store cannot answer now: a server down or
# slow, or a cluster that lost a node, is moving a slot, or cannot be reached.
STORE_DOWN: tuple[type[Exception], ...] = (
    redis.ConnectionError, redis.TimeoutError, ClusterError, TryAgainError, RedisClusterException)


class ClusterClient(RedisCluster):
    """redis-py's cluster client, whose ``close`` also closes its connections to
    the nodes (redis-py's own leaves them open until garbage collection)."""

    def close(self) -> None:
        self.disconnect_connection_pools()  # type: ignore[no-untyped-call]
        super().close()


class WatchedPool(redis.sentinel.SentinelConnectionPool):
    """The pool of a primary found by Sentinels, whose ``close`` also closes the
    clients of the Sentinels asked (redis-py's own leaves them open)."""

    def close(self) -> None:
        super().close()
        self.sentinel_manager.close()


class AsyncWatchedPool(redis.asyncio.sentinel.SentinelConnectionPool):
    """``WatchedPool`` for asyncio clients."""

    async def aclose(self) -> None:
        await super().aclose()
        await self.sentinel_manager.aclose()


def redacted(url: str) -> str:
    """``url`` with its password masked, fit for a log line or an error message."""
    scheme, sep, rest = url.partition("://")
    creds, at, location = rest.rpartition("@")
    if not sep or not at:
        return url
    user = creds.partition(":")[0]
    return f"{scheme}://{user}:***@{location}" if user else f"{scheme}://***@{location}"


def ping(url: str, timeout_s: float) -> None:
    """Return once the store at ``url`` answers PING, on a connection of its own.

    Raises:
        redis.RedisError: it did not answer within ``timeout_s``, or refused.
    """
    # A cluster client connects as it is made.
    client = sync_client(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        client.ping()
    finally:
        client.close()


def sync_client(url: str, **options: Any) -> SyncClient:
    """A synchronous client of the store at ``url`` (workers, sweeper, tools)."""
    settings = {**STORE_OPTIONS, **options}
    if is_sentinel(url):
        sentinels, name, node = sentinel_parts(url)
        watchers = redis.sentinel.Sentinel(
            sentinels, sentinel_kwargs={"socket_timeout": SENTINEL_TIMEOUT_S})
        primary: redis.Redis = watchers.master_for(
            name, connection_pool_class=WatchedPool, **settings, **node)
        return primary
    if is_cluster(url):
        return ClusterClient.from_url(node_url(url), **settings)
    return redis.Redis.from_url(url, **settings)


def server_of(client: SyncClient, key: str) -> redis.Redis:
    """The client of the one server that holds ``key``: ``client`` itself, or on a
    Redis Cluster the client of the primary that serves the key's slot, whose
    connections go to that node only (what runs on one of them stays there)."""
    if isinstance(client, RedisCluster):
        cluster: Any = client  # redis-py leaves get_node_from_key untyped
        server: redis.Redis = cluster.get_node_from_key(key).redis_connection
        return server
    return client


def find_node_again(client: SyncClient, key: str) -> None:
    """Have a cluster client find the node of ``key``'s slot again after that node
    failed or redirected a command sent to it directly: a read of the key, routed
    as any command, follows the redirect or refreshes the client's map of the
    slots (within the client's own retries). Nothing on one server."""
    if isinstance(client, RedisCluster):
        with contextlib.suppress(redis.RedisError):  # the caller meets its own error
            client.exists(key)


def async_client(url: str, connections: int = POOL_CONNECTIONS, **options: Any) -> AsyncClient:
    """An asyncio client of the store at ``url`` (the API).

    On one server, a request that finds all ``connections`` busy waits for one
    (up to ``POOL_WAIT_S``) instead of failing: a burst of requests queues.
    """
    settings = {**STORE_OPTIONS, **options}
    if is_sentinel(url):
        sentinels, name, node = sentinel_parts(url)
        watchers = redis.asyncio.sentinel.Sentinel(
            sentinels, sentinel_kwargs={"socket_timeout": SENTINEL_TIMEOUT_S})
        async_primary: aioredis.Redis = watchers.master_for(
            name, connection_pool_class=AsyncWatchedPool, **settings, **node)
        return async_primary
    if is_cluster(url):
        return AsyncRedisCluster.from_url(node_url(url), **settings)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=connections, timeout=POOL_WAIT_S, **settings)
    return aioredis.Redis.from_pool(pool)  # closing the client closes its pool


def socket_timeout_s(client: AsyncClient, default_s: float) -> float | None:
    """The client's socket timeout in seconds (None: it waits forever; ``default_s`` when unset)."""
    kwargs = (client.connection_kwargs if isinstance(client, AsyncRedisCluster)
              else client.connection_pool.connection_kwargs)
    timeout: float | None = kwargs.get("socket_timeout", default_s)
    return timeout
