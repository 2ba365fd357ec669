"""How far a write must reach before Courier answers for it.

- ``local``: the write itself (the store's append-only file is fsynced as the
  server is configured: once a second by default).
- ``fsync``: the write is on the disk of the node that took it (``WAITAOF 1 0``).
- ``replica``: on that disk and on the disks of ``replicas`` replicas
  (``WAITAOF 1 N``; where the server has no WAITAOF, ``WAIT N``: in the
  replicas' memory).

One wait follows the writes of one pipeline, on the same connection (a wait
confirms the writes of its own connection only), so concurrent admissions
share it. On a Redis Cluster that connection is one of the primary that serves
the writes' slot, and each primary gets a pipeline and a wait of its own.
A wait that times out raises ``NotDurable``: the write was sent and may have
been stored, and may not survive the loss of its node.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import redis.exceptions
from redis.cluster import RedisCluster

from messaging.config import Level, Settings
from messaging.store import connect


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
        return self.replicas if self.level is Level.REPLICA else 0

    def command(self) -> tuple[Any, ...]:
        """The wait that follows a pipeline's writes."""
        return ("WAITAOF", 1, self.needed_replicas, self.timeout_ms)

    def check(self, reply: Any) -> None:
        """Raise NotDurable unless ``reply`` (the wait's) confirms the level.

        Raises:
            NotDurable: the wait timed out short of the level, or failed.
        """
        if isinstance(reply, Exception):
            raise NotDurable(self.level, f"the store refused the wait: {reply}")
        local, replicas = int(reply[0]), int(reply[1])
        if local < 1:
            raise NotDurable(self.level, f"not on the store's disk within {self.timeout_ms} ms")
        if replicas < self.needed_replicas:
            raise NotDurable(self.level, f"on {replicas} of {self.needed_replicas} replicas' "
                                         f"disks within {self.timeout_ms} ms")

    def check_wait(self, reply: Any) -> None:
        """As ``check``, for the reply of ``WAIT`` (servers without WAITAOF)."""
        if isinstance(reply, Exception):
            raise NotDurable(self.level, f"the store refused the wait: {reply}")
        if int(reply) < self.needed_replicas:
            raise NotDurable(self.level, f"on {int(reply)} of {self.needed_replicas} replicas "
                                         f"within {self.timeout_ms} ms")


def lacks_waitaof(reply: Any) -> bool:
    """True for a server's refusal of WAITAOF as an unknown command (before 7.2)."""
    return isinstance(reply, redis.exceptions.ResponseError) and "unknown command" in str(
        reply).lower()


def run_durably(client: connect.SyncClient, durability: Durability, script: Any,
                keys: list[Any], args: list[Any]) -> tuple[Any, NotDurable | None]:
    """``script``'s reply, run with the wait of ``durability`` after it on the same
    connection (a wait confirms only the writes of its own connection), and why the
    wait fell short, if it did. For the workers' synchronous client: on a cluster,
    both go to the primary that serves the keys' slot.

    Raises:
        redis.exceptions.ClusterError: that node no longer serves the slot (it moved
            in a failover): the script did not run.
        redis.exceptions.ConnectionError: the node did not answer.

    Either way the cluster client finds the slot's node again before this raises.
    """
    pipe: Any = connect.server_of(client, keys[0]).pipeline(transaction=False)
    script(keys=keys, args=args, client=pipe)
    pipe.execute_command(*durability.command())
    try:
        reply, waited = pipe.execute(raise_on_error=False)
    except redis.exceptions.RedisError:
        connect.find_node_again(client, keys[0])
        raise
    if isinstance(reply, redis.exceptions.AskError):  # MOVED or ASK
        connect.find_node_again(client, keys[0])
        raise redis.exceptions.ClusterError(
            f"the store node no longer serves the slot ({reply}): nothing was run")
    if isinstance(reply, Exception):
        raise reply
    if lacks_waitaof(waited) and durability.level is Level.REPLICA:
        return reply, NotDurable(durability.level, "the store has no WAITAOF: WAIT is kept "
                                 "for the API's admissions only")
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
