"""Durability waits on a cluster with replicas, through the API's ``Store`` (docs/
guarantees.md, Durability): the durable calls of one tick share one wait per
primary, on that primary's connection; a slot moved by a failover fails its call
as the store unavailable and the next call goes to the new primary; a primary
killed under a call answers NotDurable, never a bare error, and calls go on once
its replica is promoted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from messaging.config import Level
from messaging.store import keys
from messaging.store.connect import STORE_DOWN
from messaging.store.durability import Durability, NotDurable
from messaging.store.store import Store
from tests.cluster import ClusterNode, EmbeddedCluster
from tests.stack import free_port, wait_until

# A six-node cluster of its own, and failovers: the slow tier.
pytestmark = pytest.mark.slow

NODES = 6
WAIT_MS = 2000
# A bucket that lets twenty requests through and is kept while they are spent,
# so that a replica can be asked for it afterwards.
INTERVAL_US = 30_000_000
BURST_US = 20 * INTERVAL_US
CALLS_PER_SHARD = 4
PROJECT_TRIES = 200  # made-up project ids tried until each shard has its buckets


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    c = EmbeddedCluster(tmp_path_factory.mktemp("durable-cluster"),
                        [(free_port(), free_port()) for _ in range(NODES)], replicas=1,
                        appendfsync="always")
    c.start()
    yield c
    c.stop()


def buckets(cluster: EmbeddedCluster, per_shard: int) -> dict[int, list[str]]:
    """Rate bucket keys of made-up projects, ``per_shard`` on each shard."""
    found: dict[int, list[str]] = {shard: [] for shard in cluster.shards()}
    for n in range(PROJECT_TRIES):
        key = keys.token_rate(f"prj_{n:012x}", "durable")
        shard = cluster.shard_of(key)
        if len(found[shard]) < per_shard:
            found[shard].append(key)
    assert all(len(v) == per_shard for v in found.values()), found
    return found


def durable_take(store: Store, bucket: str) -> Any:
    """One request from ``bucket``, as a durable call of the tick it is made in."""
    return store.ticks.run(store.scripts["take_request"], [bucket], [INTERVAL_US, BURST_US],
                           durable=True)


def waits_on(node: ClusterNode) -> tuple[int, int]:
    """How many WAIT and WAITAOF ``node`` ran since its statistics were reset."""
    stats = node.ask("INFO", "commandstats") or {}
    return (int(stats.get("cmdstat_wait", {}).get("calls", 0)),
            int(stats.get("cmdstat_waitaof", {}).get("calls", 0)))


def on_replica(replica: ClusterNode, key: str) -> bool:
    """True when ``replica`` holds ``key`` (read on the replica itself)."""
    with replica.client() as r:
        r.execute_command("READONLY")
        return bool(r.exists(key))


def store_of(cluster: EmbeddedCluster, level: Level = Level.REPLICA) -> Store:
    return Store.from_url(cluster.url, Durability(level, 1, WAIT_MS))


# At `replica` a tick's pipeline on each primary ends with WAIT and WAITAOF, at
# `replica-fsync` with WAITAOF alone.
@pytest.mark.parametrize(("level", "waits"), [(Level.REPLICA, (1, 1)),
                                              (Level.REPLICA_FSYNC, (0, 1))])
def test_the_durable_calls_of_one_tick_share_one_wait_per_primary(
        cluster: EmbeddedCluster, level: Level, waits: tuple[int, int]):
    by_shard = buckets(cluster, CALLS_PER_SHARD)
    primaries = {shard: cluster.primary_of(shard) for shard in by_shard}

    async def main() -> list[Any]:
        store = store_of(cluster, level)
        try:
            for group in by_shard.values():  # the slot map, the script on every primary
                await durable_take(store, group[0])
            for node in primaries.values():
                node.ask("CONFIG", "RESETSTAT")
            return list(await asyncio.gather(*(durable_take(store, b)
                                               for group in by_shard.values() for b in group)))
        finally:
            await store.close()

    replies = asyncio.run(main())
    assert replies == [0] * len(replies)
    assert {shard: waits_on(node) for shard, node in primaries.items()} == {
        shard: waits for shard in by_shard}
    for shard, group in by_shard.items():
        replica = cluster.replica_of(shard)
        assert all(on_replica(replica, b) for b in group)


def test_a_slot_moved_by_a_failover_fails_its_call_then_the_next_reaches_the_new_primary(
        cluster: EmbeddedCluster):
    shard, [bucket] = next(iter(buckets(cluster, 1).items()))

    async def main() -> tuple[Any, Any]:
        store = store_of(cluster)
        try:
            await durable_take(store, bucket)  # the client knows the slot's primary
            old, new = cluster.primary_of(shard), cluster.replica_of(shard)
            new.ask("CLUSTER", "FAILOVER")  # a manual failover: the primary steps down
            await asyncio.to_thread(cluster.wait_promoted, shard, old)
            await asyncio.to_thread(lambda: wait_until(old.in_sync, what="the old primary "
                                                       "a replica"))
            try:
                moved: Any = await durable_take(store, bucket)
            except STORE_DOWN as exc:
                moved = exc
            for _ in range(50):  # the client finds the slot's node again meanwhile
                try:
                    return moved, await durable_take(store, bucket)
                except STORE_DOWN:
                    await asyncio.sleep(0.1)
            raise AssertionError("the durable call never reached the new primary")
        finally:
            await store.close()

    moved, after = asyncio.run(main())
    assert isinstance(moved, STORE_DOWN) and "no longer serves" in str(moved), moved
    assert after == 0
    assert on_replica(cluster.replica_of(shard), bucket)


def test_a_primary_killed_under_a_durable_call_is_not_durable_then_calls_go_on(
        cluster: EmbeddedCluster):
    shard, [bucket] = next(iter(buckets(cluster, 1).items()))
    victim = cluster.primary_of(shard)

    async def main() -> tuple[list[Any], Any]:
        store = store_of(cluster)
        try:
            await durable_take(store, bucket)
            cluster.kill(victim)
            refused = await asyncio.gather(*(durable_take(store, bucket) for _ in range(4)),
                                           return_exceptions=True)
            await asyncio.to_thread(cluster.wait_promoted, shard, victim)
            await asyncio.to_thread(cluster.restart, victim)
            await asyncio.to_thread(cluster.wait_rejoined, victim)
            for _ in range(50):
                try:
                    return refused, await durable_take(store, bucket)
                except (NotDurable, *STORE_DOWN):
                    await asyncio.sleep(0.1)
            raise AssertionError("no durable call went through after the promotion")
        finally:
            await store.close()

    try:
        refused, after = asyncio.run(main())
    finally:
        if victim.pid is None:
            cluster.restart(victim)
            cluster.wait_rejoined(victim)
    # A write that may have been made, never a bare connection error.
    assert all(isinstance(r, NotDurable) for r in refused), refused
    assert after == 0
