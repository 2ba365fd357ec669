"""A primary killed again and again under a stream of sends, its replica promoted by
Sentinel: at `replica` durability (the primary's disk and the replica's memory)
every send answered 201 is there once and every delivery completes once, with a
broker of its own and with the store as the broker (no COURIER_BROKER_URL: the
broker's primary dies with the store's); at `local` the ledger sees what a
failover lost, and so at `fsync` (docs/guarantees.md, Durability). The API, the worker and Flower
follow each promotion without a restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from messaging.launch.embedded import EmbeddedStore
from messaging.store import connect
from tests.failover import Inbox, Ledger, Sender, accounted, lanes_after_failover, lost
from tests.integration.conftest import new_project
from tests.sentinel import Watched, with_cont
from tests.stack import Stack, free_port, make_stack, wait_until

# Stacks, Sentinels and twenty failovers: the slow tier.
pytestmark = pytest.mark.slow

KILLS = 20
SENDERS = 6
LOCAL_SENDS = 20
# How long a sender goes on sending a key it was refused, once the kills are over: a
# refused send may have been stored, and only its replay says which message it is.
DRAIN_S = 60.0


class Team:
    """A stack on the watched store (a broker of its own, unless ``own_broker`` is
    False: then the store is the broker, through its Sentinels), a project, two
    agents: Alice sends, Bob's inbox is read from the store."""

    def __init__(self, root: Path, watched: Watched, durability: str,
                 own_broker: bool = True) -> None:
        self.broker: EmbeddedStore | None = None
        broker: dict[str, str] = {}
        if own_broker:
            self.broker = EmbeddedStore(root / "broker", port=free_port())
            self.broker.start()
            broker["broker_url"] = self.broker.url
        self.stack: Stack = make_stack(root / "stack", redis_url=watched.url,
                                       durability=durability, durability_timeout_s="3",
                                       **broker)
        self.project = new_project(self.stack)
        self.project_id = self.project.project_id
        self.sender = Sender(self.stack.api_url, self.project.agent("Alice").row["token"],
                             self.project_id)
        self.bob = self.project.agent("Bob").row
        self.inbox = Inbox(watched, self.project_id, self.bob["agent_id"])

    def close(self) -> None:
        for c in self.project.clients:
            c.close()
        self.stack.stop()
        if self.broker is not None:
            self.broker.stop()


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[Watched]:
    w = Watched(tmp_path / "store").start()
    yield w
    w.stop()


@pytest.mark.timeout(300)  # twenty failovers, the senders' drain and the checks
@pytest.mark.parametrize("own_broker", [True, False], ids=["own-broker", "store-as-broker"])
def test_at_replica_twenty_failovers_lose_and_repeat_no_answered_send(
        tmp_path: Path, watched: Watched, own_broker: bool):
    team = Team(tmp_path, watched, "replica", own_broker)
    try:
        team.stack.start_worker()
        ledger, stop = Ledger(), threading.Event()
        senders = [threading.Thread(target=team.sender.keep_sending, args=(ledger, stop),
                                    kwargs={"drain_s": DRAIN_S})
                   for _ in range(SENDERS)]
        for t in senders:
            t.start()
        rng = random.Random(47)
        try:
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.3, 1.5))  # a random moment of the stream
                watched.kill_primary()
            time.sleep(2)
        finally:
            stop.set()
            for t in senders:
                t.join(60)
        answered = list(ledger.answered.values())
        assert len(answered) > KILLS * 2, (len(answered), ledger.refused)
        assert ledger.repeated_ids() == 0  # replays share their first answer's id
        # Every answered send is in the store, every delivery completes, and Bob's
        # inbox holds each message once: as the store holds it, and as the API lists it.
        counts = accounted([team.inbox], ledger)
        assert counts == {"lost": 0, "repeated": 0, "missing": 0, "unanswered": 0, "stuck": 0}, (
            counts, len(answered), ledger.refused)
        with team.stack.client(team.bob["token"]) as bob:
            seen = [m["id"] for m in bob.iter_inbox(limit=500)]
        assert sorted(seen) == sorted(set(answered)), (len(seen), len(set(answered)))
        print(f"replica: {len(answered)} sends answered over {KILLS} failovers, "
              f"{ledger.refused} refusals retried, {counts}")
    finally:
        team.close()


# `fsync` waits for the primary's disk alone: a failover loses what `local` loses.
@pytest.mark.parametrize("level", ["local", "fsync"])
def test_below_replica_the_ledger_sees_the_sends_a_failover_lost(
        tmp_path: Path, watched: Watched, level: str):
    team = Team(tmp_path, watched, level)
    try:
        primary = watched.primary()
        assert primary is not None
        replica = watched.other(primary)
        ledger = Ledger()
        # The replica falls behind (stopped; sends of 1 MB, more than the sockets
        # between the two buffer), the primary answers sends it alone has.
        os.kill(replica.pid or 0, signal.SIGSTOP)
        try:
            with team.sender.client() as client:
                for _ in range(LOCAL_SENDS):
                    key = uuid.uuid4().hex
                    answer = team.sender.send(client, key, "x" * 1_000_000)
                    assert answer is not None and answer.status_code == 201, answer
                    ledger.note(key, team.project_id, answer)
            os.kill(primary.pid or 0, signal.SIGKILL)
        finally:
            with_cont(replica)
        wait_until(lambda: watched.primary() is replica and watched.is_primary(replica),
                   timeout_s=30, what="the lagging replica promoted")
        found = lost(team.inbox, ledger)
        print(f"{level}: {found} of {len(ledger.answered)} answered sends lost by the failover")
        assert found > 0  # the ledger sees a loss where the level allows one
    finally:
        team.close()


def test_flower_lists_a_lane_made_after_a_failover_without_a_restart(
        tmp_path: Path, watched: Watched):
    # The store is Flower's broker too: its broker's primary dies with the store's.
    team = Team(tmp_path, watched, "local", own_broker=False)
    try:
        # kill_primary returns once the replica is promoted.
        listed = lanes_after_failover(team.stack, watched.kill_primary)
        print(f"Flower after a failover lists {listed}")
    finally:
        team.close()


def open_sockets() -> int:
    """How many sockets this process holds open."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own, closed by now
            found += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return found


def test_a_closed_client_of_a_watched_store_leaves_no_connection_open(watched: Watched):
    """A client asks the Sentinels for the primary, then talks to it: closed, it
    closes its connections to both, the synchronous client and the asyncio one."""
    before = open_sockets()
    with connect.sync_client(watched.url) as r:
        assert r.ping()
        assert open_sockets() > before + 1  # a Sentinel asked, and the primary

    async def ping() -> None:
        client = connect.async_client(watched.url)
        try:
            assert await client.ping()
        finally:
            await client.aclose()

    asyncio.run(ping())
    assert open_sockets() == before
