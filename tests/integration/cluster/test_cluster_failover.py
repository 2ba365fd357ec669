"""Primaries of a Redis Cluster killed again and again under a stream of sends to
projects on every shard, each replaced by its replica as the cluster itself
decides: at `replica` durability every send answered 201 is there once and every
delivery completes once. With the replica held behind, at `local` the ledger sees
what a failover lost, and at `replica` and `replica-fsync` the sends it would have
lost are refused instead (docs/guarantees.md, Durability). The API, the worker and Flower follow
each promotion without a restart."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from messaging.launch.embedded import EmbeddedStore
from messaging.store import keys
from tests.cluster import EmbeddedCluster
from tests.failover import Inbox, Ledger, Sender, accounted, lanes_after_failover, lost
from tests.integration.conftest import Project, new_project
from tests.stack import Stack, free_port, make_stack

# A six-node cluster, a stack and twenty failovers: the slow tier.
pytestmark = pytest.mark.slow

KILLS = 20
SENDERS_PER_PROJECT = 2
LOCAL_SENDS = 20
# Sends made while the replica is stopped at `replica`, and how long each may wait.
HELD_SENDS = 3
HELD_WAIT_S = "1"
NODES = 6  # three primaries, each with one replica
PROJECT_TRIES = 40  # projects made until each shard has one
# After the stream stops, how long a sender keeps retrying the send it has under way.
DRAIN_S = 60.0
# Between two sends of one sender: the stream stays within what one worker delivers
# at `replica` (a wait that no other write hurries answers within a second).
SEND_PAUSE_S = 0.1


@dataclass
class Pair:
    """A project on one shard, with the agent that sends and the inbox it sends to."""

    project: Project
    shard: int
    sender: Sender
    inbox: Inbox


class Team:
    """A stack on the cluster (a broker of its own) and a project on each of
    ``shards`` shards."""

    def __init__(self, root: Path, cluster: EmbeddedCluster, durability: str,
                 shards: int, durability_timeout_s: str = "3") -> None:
        self.cluster = cluster
        self.broker = EmbeddedStore(root / "broker", port=free_port())
        self.broker.start()
        # The node store make_stack starts is left unused: the stack stores into the cluster.
        self.stack: Stack = make_stack(root / "stack", store_kind="node",
                                       redis_url=cluster.url, broker_url=self.broker.url,
                                       durability=durability,
                                       durability_timeout_s=durability_timeout_s)
        self.pairs: dict[int, Pair] = {}
        for _ in range(PROJECT_TRIES):
            if len(self.pairs) == shards:
                break
            project = new_project(self.stack)
            shard = cluster.shard_of(keys.project(project.project_id))
            if shard in self.pairs:
                continue
            self.pairs[shard] = self.pair(project, shard)
        assert len(self.pairs) == shards, "no project landed on some shard"

    def pair(self, project: Project, shard: int) -> Pair:
        """Alice and Bob of ``project``: Alice sends, Bob's inbox is read from the cluster."""
        sender = Sender(self.stack.api_url, project.agent("Alice").row["token"],
                        project.project_id)
        bob = project.agent("Bob").row["agent_id"]
        return Pair(project, shard, sender, Inbox(self.cluster, project.project_id, bob))

    def close(self) -> None:
        for pair in self.pairs.values():
            for c in pair.project.clients:
                c.close()
        self.stack.stop()
        self.broker.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    # Nodes that fsync each write: a replica confirms a write to its disk at once.
    c = EmbeddedCluster(tmp_path / "cluster", [(free_port(), free_port()) for _ in range(NODES)],
                        replicas=1, appendfsync="always")
    c.start()
    yield c
    c.stop()


def fail_over(cluster: EmbeddedCluster, shard: int) -> None:
    """Kill ``shard``'s primary, wait for its replica's promotion, start the killed
    node again and wait until it is the new primary's replica, in sync."""
    victim = cluster.primary_of(shard)
    cluster.kill(victim)
    cluster.wait_promoted(shard, victim)
    cluster.restart(victim)
    cluster.wait_rejoined(victim)


@pytest.mark.timeout(300)  # twenty failovers of about three seconds each, and the checks
def test_at_replica_twenty_primaries_killed_lose_and_repeat_no_answered_send(
        tmp_path: Path, cluster: EmbeddedCluster):
    shards = sorted(cluster.shards())
    team = Team(tmp_path, cluster, "replica", len(shards))
    try:
        team.stack.start_worker()
        ledger, stop = Ledger(), threading.Event()
        senders = [threading.Thread(target=pair.sender.keep_sending, args=(ledger, stop),
                                    kwargs={"pause_s": SEND_PAUSE_S, "drain_s": DRAIN_S})
                   for pair in team.pairs.values() for _ in range(SENDERS_PER_PROJECT)]
        started = time.monotonic()
        for t in senders:
            t.start()
        rng, kills = random.Random(53), Counter[int]()
        try:
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.3, 1.5))  # a random moment of the stream
                shard = rng.choice(shards)
                fail_over(cluster, shard)
                kills[shard] += 1
            time.sleep(2)
        finally:
            stop.set()
            for t in senders:
                t.join(DRAIN_S + 30)
        streamed_s = time.monotonic() - started
        assert ledger.sent.keys() == ledger.answered.keys()  # every send was answered
        counts = accounted([pair.inbox for pair in team.pairs.values()], ledger)
        print(f"replica: {sum(kills.values())} primaries killed ({dict(kills)} by shard), "
              f"{len(ledger.answered)} sends answered, {ledger.refused} refusals retried, "
              f"{counts} in {streamed_s:.0f} s of sends")
        assert len(ledger.answered) > KILLS * 2, (len(ledger.answered), ledger.refused)
        assert ledger.repeated_ids() == 0  # replays share their first answer's id
        assert counts == {"lost": 0, "repeated": 0, "missing": 0, "unanswered": 0, "stuck": 0}
        assert len(kills) == len(shards)  # every shard failed over at least once
    finally:
        team.close()


def held_behind(team: Team, cluster: EmbeddedCluster, sends: int) -> tuple[Ledger, list[Any]]:
    """Send once with the project's replica in sync, then ``sends`` times with it
    stopped (sends of 1 MB, more than the sockets between the two buffer), kill
    the primary and let the replica, behind, be promoted. The ledger of what was
    answered, and the refusals of the sends made while the replica was stopped."""
    [pair] = team.pairs.values()
    primary, replica = cluster.primary_of(pair.shard), cluster.replica_of(pair.shard)
    ledger, refusals = Ledger(), []
    with pair.sender.client() as client:
        def send() -> None:
            key = uuid.uuid4().hex
            answer = pair.sender.send(client, key, "x" * 1_000_000)
            assert answer is not None, "the API did not answer"
            if not ledger.note(key, pair.project.project_id, answer):
                refusals.append(answer.json())

        send()
        os.kill(replica.pid or 0, signal.SIGSTOP)
        try:
            for _ in range(sends):
                send()
            cluster.kill(primary)
        finally:
            os.kill(replica.pid or 0, signal.SIGCONT)
    assert cluster.wait_promoted(pair.shard, primary) is replica
    return ledger, refusals


def test_at_local_the_ledger_sees_the_sends_a_failover_lost(tmp_path: Path,
                                                           cluster: EmbeddedCluster):
    team = Team(tmp_path, cluster, "local", 1)
    try:
        ledger, refusals = held_behind(team, cluster, LOCAL_SENDS)
        assert refusals == []  # the primary alone answered them
        [pair] = team.pairs.values()
        print(f"local: {lost(pair.inbox, ledger)} of {len(ledger.answered)} answered sends "
              "lost by the failover")
        assert lost(pair.inbox, ledger) > 0  # the ledger sees a loss where the level allows one
    finally:
        team.close()


@pytest.mark.parametrize("level", ["replica", "replica-fsync"])
def test_at_replica_the_same_failover_loses_no_answered_send(
        tmp_path: Path, cluster: EmbeddedCluster, level: str):
    team = Team(tmp_path, cluster, level, 1, durability_timeout_s=HELD_WAIT_S)
    try:
        ledger, refusals = held_behind(team, cluster, HELD_SENDS)
        # Sends the replica did not confirm are refused, as sends that may be stored.
        assert [(r["error"]["code"], r["persisted"]) for r in refusals] == [
            ("STORE_UNAVAILABLE", None)] * HELD_SENDS
        [pair] = team.pairs.values()
        assert len(ledger.answered) == 1 and lost(pair.inbox, ledger) == 0
        print(f"{level}: {HELD_SENDS} sends refused while the replica was behind, "
              f"0 of {len(ledger.answered)} answered lost by the failover")
    finally:
        team.close()


def test_flower_lists_a_lane_set_after_the_lanes_primary_fails_over_without_a_restart(
        tmp_path: Path, cluster: EmbeddedCluster):
    # The set of lanes is one key: one shard holds it, and that shard's primary is killed.
    slot = key_slot(keys.LANES.encode())
    shard = cluster.shard_of(keys.LANES)
    team = Team(tmp_path, cluster, "local", 0)
    ports: dict[str, int] = {}

    def fail_over_the_lanes() -> None:
        primary = cluster.primary_of(shard)
        # At `local` the first lane must reach the replica before the primary dies.
        cluster.wait_copied(shard)
        cluster.kill(primary)
        ports["killed"] = primary.port
        ports["promoted"] = cluster.wait_promoted(shard, primary).port

    try:
        listed = lanes_after_failover(team.stack, fail_over_the_lanes)
        print(f"Flower, after the failover of slot {slot}'s primary ({ports}), lists {listed}")
    finally:
        team.close()
