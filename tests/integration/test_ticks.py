"""Group commit: the script calls of one event-loop tick share one pipeline, and
its durable calls one wait; the waits of concurrent ticks overlap.

On a store of its own (killed in the last test), through the API's ``Store``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.exceptions

from messaging.config import Level
from messaging.errors import Unavailable
from messaging.launch.embedded import EmbeddedStore
from messaging.store.connect import STORE_DOWN
from messaging.store.durability import Durability, NotDurable
from messaging.store.store import Store
from tests.stack import free_port

SECOND_US = 1_000_000
# A wait that cannot be met (the store never fsyncs) runs this long.
SHORT_WAIT_MS = 600


@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    server = EmbeddedStore(tmp_path / "store", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _run(server: EmbeddedStore, calls: int, bucket: str, burst: int) -> tuple[list[object], int]:
    """``calls`` rate checks made at once; each one's reply (or error) and how many
    connections the API's client opened for them."""

    async def main() -> tuple[list[object], int]:
        store = Store.from_url(server.url)
        try:
            replies = await asyncio.gather(
                *(store.take_request(bucket, SECOND_US // burst, SECOND_US) for _ in range(calls)),
                return_exceptions=True)
            with redis.Redis.from_url(server.url) as admin:
                opened = sum(1 for c in admin.client_list() if c.get("lib-name") == "redis-py"
                             and c["cmd"] != "client|list")
            return list(replies), opened
        finally:
            await store.close()

    return asyncio.run(main())


def test_calls_made_together_go_in_one_pipeline_each_answered_in_order(own_store: EmbeddedStore):
    replies, opened = _run(own_store, 40, "bucket:a", burst=10)
    # One bucket of 10 a second: the first ten calls, in the order made, get through.
    assert [r == 0 for r in replies] == [True] * 10 + [False] * 30
    assert all(isinstance(r, int) and r > 0 for r in replies[10:])
    # Sent one by one, 40 concurrent calls open a connection each.
    assert opened == 1


def waitaofs(server: EmbeddedStore) -> int:
    """How many WAITAOF the store ran since its statistics were reset."""
    with redis.Redis.from_url(server.url) as admin:
        stats = admin.info("commandstats")
    return int(stats.get("cmdstat_waitaof", {}).get("calls", 0))


def durable_takes(store: Store, bucket: str, calls: int) -> list[asyncio.Future[object]]:
    """``calls`` durable rate checks, made in this tick."""
    return [asyncio.ensure_future(store.ticks.run(
        store.scripts["take_request"], [bucket], [1, SECOND_US], durable=True))
        for _ in range(calls)]


def test_the_durable_calls_of_one_tick_share_one_wait(own_store: EmbeddedStore):
    async def main() -> list[object]:
        store = Store.from_url(own_store.url, Durability(Level.FSYNC, timeout_ms=5000))
        try:
            await asyncio.gather(*durable_takes(store, "bucket:d", 1))  # scripts loaded
            with redis.Redis.from_url(own_store.url) as admin:
                admin.config_resetstat()
            return list(await asyncio.gather(*durable_takes(store, "bucket:d", 40)))
        finally:
            await store.close()

    assert asyncio.run(main()) == [0] * 40
    assert waitaofs(own_store) == 1


def test_the_waits_of_concurrent_ticks_overlap(own_store: EmbeddedStore):
    """Three ticks, each sent while the waits of those before still run: together
    they take about one wait, not three."""
    with redis.Redis.from_url(own_store.url) as admin:
        admin.config_set("appendfsync", "no")  # every wait runs its whole time out

    async def main() -> tuple[list[object], float]:
        store = Store.from_url(own_store.url, Durability(Level.FSYNC, timeout_ms=SHORT_WAIT_MS))
        try:
            await asyncio.gather(*durable_takes(store, "bucket:o", 1), return_exceptions=True)
            with redis.Redis.from_url(own_store.url) as admin:
                admin.config_resetstat()
            loop = asyncio.get_running_loop()
            started, calls = loop.time(), []
            for _ in range(3):
                calls += durable_takes(store, "bucket:o", 4)
                await asyncio.sleep(0.05)  # the tick's pipeline is on its way
            replies = await asyncio.gather(*calls, return_exceptions=True)
            return list(replies), loop.time() - started
        finally:
            await store.close()

    replies, took_s = asyncio.run(main())
    assert all(isinstance(r, NotDurable) for r in replies), replies
    assert waitaofs(own_store) == 3  # a wait per tick
    assert took_s < 2 * SHORT_WAIT_MS / 1000, took_s  # one after another: 1.8 s


def test_an_error_reply_reaches_its_own_caller_only(own_store: EmbeddedStore):
    with redis.Redis.from_url(own_store.url) as admin:
        admin.hset("bucket:wrong", "not", "a string")

    async def main() -> list[object]:
        store = Store.from_url(own_store.url)
        try:
            return list(await asyncio.gather(
                store.take_request("bucket:b", 1, SECOND_US),
                store.take_request("bucket:wrong", 1, SECOND_US),
                store.take_request("bucket:c", 1, SECOND_US),
                return_exceptions=True))
        finally:
            await store.close()

    ok_before, wrong, ok_after = asyncio.run(main())
    assert ok_before == 0 and ok_after == 0
    assert isinstance(wrong, redis.exceptions.ResponseError) and "WRONGTYPE" in str(wrong)


def test_a_store_that_forgot_its_scripts_loads_them_for_the_batch(own_store: EmbeddedStore):
    with redis.Redis.from_url(own_store.url) as admin:
        admin.script_flush()
    replies, _ = _run(own_store, 5, "bucket:d", burst=10)
    assert replies == [0] * 5


def test_a_store_that_dies_under_a_batch_fails_each_caller_and_none_hangs(
        own_store: EmbeddedStore):
    async def main() -> list[object]:
        store = Store.from_url(own_store.url)
        try:
            await store.take_request("bucket:e", 1, SECOND_US)  # connected, scripts loaded
            assert own_store.pid is not None
            os.kill(own_store.pid, signal.SIGKILL)
            # The batch itself (the store's boundary makes these Courier's 503s).
            script = store.scripts["take_request"]
            return list(await asyncio.wait_for(asyncio.gather(
                *(store.ticks.run(script, ["bucket:e"], [1, SECOND_US]) for _ in range(8)),
                return_exceptions=True), timeout=30))
        finally:
            await store.close()

    replies = asyncio.run(main())
    assert len(replies) == 8
    assert all(isinstance(r, STORE_DOWN) for r in replies), replies


def test_the_store_s_methods_answer_a_dead_store_as_courier_s_503(own_store: EmbeddedStore):
    async def main() -> BaseException | None:
        store = Store.from_url(own_store.url)
        try:
            await store.take_request("bucket:f", 1, SECOND_US)
            assert own_store.pid is not None
            os.kill(own_store.pid, signal.SIGKILL)
            try:
                await asyncio.wait_for(store.take_request("bucket:f", 1, SECOND_US), 30)
            except Exception as exc:
                return exc
            return None
        finally:
            await store.close()

    failed = asyncio.run(main())
    assert isinstance(failed, Unavailable) and failed.code == "STORE_UNAVAILABLE", failed
    assert isinstance(failed.__cause__, STORE_DOWN)
