"""How far a write must reach before Courier answers for it, each level named by
what it survives (docs/guarantees.md, Durability):

- ``local``: the write itself (the store's append-only file is fsynced as the
  server is configured: once a second by default).
- ``fsync``: the write is on the disk of the node that took it (``WAITAOF 1 0``).
- ``replica``: on that disk and in the memory of ``replicas`` replicas
  (``WAITAOF 1 0``, then ``WAIT N``), as Kafka's ``acks=all``: the death of
  either machine loses nothing answered.
- ``replica-fsync``: on that disk and on the disks of ``replicas`` replicas
  (``WAITAOF 1 N``), which waits for the replicas' fsync and their report of it.

The waits follow the writes of one pipeline, on the same connection (a wait
confirms the writes of its own connection only), so concurrent admissions
share them. At ``replica`` the disk's wait goes first: a client blocked in
``WAITAOF`` has the primary fsync its file and ask its replicas for their
offsets at once, so the ``WAIT`` that follows finds their answer there (the
other order measured slower: the replicas are asked only once ``WAIT``
blocks). On a Redis Cluster that
connection is one of the primary that serves the writes' slot, and each primary
gets a pipeline and waits of its own. A wait that times out raises
``NotDurable``: the write was sent and may have been stored, and may not
survive the loss of its node. A server without WAITAOF (before Redis 7.2)
keeps no level but ``local``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.exceptions
from redis.cluster import RedisCluster

from messaging.config import Level, Settings
from messaging.store import connect

# The levels that wait for replicas.
REPLICATED = (Level.REPLICA, Level.REPLICA_FSYNC)
NO_WAITAOF = ("the store has no WAITAOF (it came with Redis 7.2): no level but local "
              "can be kept")


class NotDurable(Exception):
    """A write the store did not confirm at the level asked for, within the wait."""

    def __init__(self, level: Level, reason: str) -> None:
        super().__init__(reason)
        self.level, self.reason = level, reason


@dataclass(frozen=True)
class Durability:
    """A level, the replicas it needs, and how long a write may wait for them."""

    level: Level = Level.LOCAL
    replicas: int = 1
    timeout_ms: int = 5000

    @classmethod
    def of(cls, settings: Settings) -> Durability:
        """What a write waits for before it is answered (``COURIER_DURABILITY``)."""
        return cls(settings.durability, settings.durability_replicas,
                   int(settings.durability_timeout_s * 1000))

    @property
    def waits(self) -> bool:
        return self.level is not Level.LOCAL

    @property
    def needed_replicas(self) -> int:
        """Replicas a write must reach: in memory at ``replica``, on disk at
        ``replica-fsync``; none at the other levels."""
        return self.replicas if self.level in REPLICATED else 0

    def commands(self) -> list[tuple[Any, ...]]:
        """The waits that follow a pipeline's writes, in order (none at ``local``)."""
        if self.level is Level.FSYNC:
            return [("WAITAOF", 1, 0, self.timeout_ms)]
        if self.level is Level.REPLICA:
            return [("WAITAOF", 1, 0, self.timeout_ms),
                    ("WAIT", self.replicas, self.timeout_ms)]
        if self.level is Level.REPLICA_FSYNC:
            return [("WAITAOF", 1, self.replicas, self.timeout_ms)]
        return []

    def check(self, replies: Sequence[Any]) -> None:
        """Raise NotDurable unless ``replies`` (the waits', in the order of
        ``commands``) confirm the level.

        Raises:
            NotDurable: a wait timed out short of the level, or failed.
        """
        for command, reply in zip(self.commands(), replies, strict=True):
            if lacks_waitaof(reply):
                raise NotDurable(self.level, NO_WAITAOF)
            if isinstance(reply, Exception):
                raise NotDurable(self.level, f"the store refused the wait: {reply}")
            if command[0] == "WAIT":
                if int(reply) < self.replicas:
                    raise NotDurable(self.level, f"in the memory of {int(reply)} of "
                                     f"{self.replicas} replicas within {self.timeout_ms} ms")
                continue
            local, replicas = int(reply[0]), int(reply[1])
            if local < 1:
                raise NotDurable(self.level,
                                 f"not on the store's disk within {self.timeout_ms} ms")
            if replicas < command[2]:
                raise NotDurable(self.level, f"on {replicas} of {command[2]} replicas' "
                                             f"disks within {self.timeout_ms} ms")


def lacks_waitaof(reply: Any) -> bool:
    """True for a server's refusal of WAITAOF as an unknown command (before 7.2)."""
    return isinstance(reply, redis.exceptions.ResponseError) and "unknown command" in str(
        reply).lower()


def run_durably(client: connect.SyncClient, durability: Durability, script: Any,
                keys: list[Any], args: list[Any]) -> tuple[Any, NotDurable | None]:
    """``script``'s reply, run with the waits of ``durability`` after it on the same
    connection (a wait confirms only the writes of its own connection), and why the
    waits fell short, if they did. For the workers' synchronous client: on a
    cluster, all go to the primary that serves the keys' slot.

    Raises:
        redis.exceptions.ClusterError: that node no longer serves the slot (it moved
            in a failover): the script did not run.
        redis.exceptions.ConnectionError: the node did not answer.

    Either way the cluster client finds the slot's node again before this raises.
    """
    pipe: Any = connect.server_of(client, keys[0]).pipeline(transaction=False)
    script(keys=keys, args=args, client=pipe)
    for command in durability.commands():
        pipe.execute_command(*command)
    try:
        reply, *waited = pipe.execute(raise_on_error=False)
    except redis.exceptions.RedisError:
        connect.find_node_again(client, keys[0])
        raise
    if isinstance(reply, redis.exceptions.AskError):  # MOVED or ASK
        connect.find_node_again(client, keys[0])
        raise redis.exceptions.ClusterError(
            f"the store node no longer serves the slot ({reply}): nothing was run")
    if isinstance(reply, Exception):
        raise reply
    try:
        durability.check(waited)
    except NotDurable as e:
        return reply, e
    return reply, None


def shortfalls(url: str, durability: Durability, timeout_s: float = 2.0) -> list[str]:
    """What keeps every write to the store at ``url``, as it is configured now, short
    of ``durability``'s level: a sentence for each primary with no append-only file,
    one it never fsyncs (``appendfsync no``: a wait never counts it), or fewer
    replicas connected than the level waits for.

    Empty when the level waits for nothing, when each primary can reach it, and
    when the store does not say (it does not answer, or refuses CONFIG): what it
    does not say, this does not guess.
    """
    if not durability.waits:
        return []
    found: list[str] = []
    with contextlib.suppress(redis.exceptions.RedisError, OSError):
        client = connect.sync_client(url, socket_timeout=timeout_s,
                                     socket_connect_timeout=timeout_s)
        try:
            for name, server in _primaries(url, client):
                found += _shortfalls_of(name, server, durability)
        finally:
            client.close()
    return found


def _primaries(url: str, client: connect.SyncClient) -> list[tuple[str, redis.Redis]]:
    """Each primary's name and client: on one server, its URL and ``client`` itself."""
    if isinstance(client, RedisCluster):
        cluster: Any = client  # redis-py leaves its nodes untyped
        return [(node.name, node.redis_connection) for node in cluster.get_primaries()]
    return [(connect.redacted(url), client)]


def _shortfalls_of(name: str, server: redis.Redis, durability: Durability) -> list[str]:
    try:
        config = server.config_get("append*")
    except redis.exceptions.ResponseError:
        config = {}  # CONFIG renamed or refused: nothing known of the file
    level = f"COURIER_DURABILITY={durability.level.value}"
    short = ("so no write reaches that level: every send is answered 503 "
             "STORE_UNAVAILABLE, and workers log each outcome recorded short of it")
    out = []
    if config.get("appendonly") == "no":
        out.append(f"{level}: the store at {name} keeps no append-only file "
                   f"(appendonly no), {short}")
    elif config.get("appendfsync") == "no":
        out.append(f"{level}: the store at {name} never fsyncs its append-only file "
                   f"(appendfsync no), {short}")
    if durability.needed_replicas:
        connected = int(server.info("replication").get("connected_slaves", 0))
        if connected < durability.needed_replicas:
            out.append(f"{level}: the store at {name} has {connected} replicas connected of "
                       f"the {durability.needed_replicas} each write waits for, {short} "
                       "until enough are")
    return out
