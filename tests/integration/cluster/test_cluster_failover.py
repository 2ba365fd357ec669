"""Primaries of a Redis Cluster killed again and again under a stream of sends to
projects on every shard, each replaced by its replica as the cluster itself
decides: at `replica` durability every send answered 201 is there once and every
delivery completes once. With the replica held behind, at `local` the ledger sees
what a failover lost, and at `replica` the sends it would have lost are refused
instead (docs/guarantees.md, Durability). The API and the worker follow each
promotion without a restart."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from messaging.launch.embedded import EmbeddedStore
from messaging.store import connect, keys
from messaging.store.schema import DeliveryField
from tests.cluster import EmbeddedCluster
from tests.integration.conftest import Project, new_project
from tests.stack import Stack, free_port, make_stack, wait_until

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
RETRY_PAUSE_S = 0.1
# Between two sends of one sender: the stream stays within what one worker delivers
# at `replica` (a wait that no other write hurries answers within a second).
SEND_PAUSE_S = 0.1
ACCEPTED = "accepted"


@dataclass
class Ledger:
    """Every send's idempotency key with its project, and the message id of each
    answered 201 (or 200, a replay of one)."""

    sent: dict[str, str] = field(default_factory=dict)
    answered: dict[str, str] = field(default_factory=dict)
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, project_id: str) -> list[str]:
        """The message ids answered for sends of ``project_id``."""
        with self.lock:
            return [mid for key, mid in self.answered.items() if self.sent[key] == project_id]


@dataclass
class Pair:
    """A project on one shard, with the agent that sends and the one that receives."""

    project: Project
    shard: int
    sender_token: str
    bob: dict[str, Any]


class Team:
    """A stack on the cluster (a broker of its own) and a project on each shard."""

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
            self.pairs[shard] = Pair(project, shard, project.agent("Alice").row["token"],
                                     project.agent("Bob").row)
        assert len(self.pairs) == shards, "no project landed on some shard"

    def send(self, client: httpx.Client, key: str, body: str = "") -> httpx.Response | None:
        try:
            return client.post("/v1/messages", json={
                "to": ["Bob"], "subject": "Handoff", "body_md": body or key,
                "idempotency_key": key})
        except httpx.TransportError:
            return None

    def keep_sending(self, pair: Pair, ledger: Ledger, stop: threading.Event) -> None:
        """Send with a new key until ``stop``; a key not answered is sent again (as a
        client would) until it is, after ``stop`` too, for up to ``DRAIN_S``."""
        with httpx.Client(base_url=self.stack.api_url, timeout=30,
                          headers={"Authorization": f"Bearer {pair.sender_token}"}) as client:
            while not stop.is_set():
                key = uuid.uuid4().hex
                with ledger.lock:
                    ledger.sent[key] = pair.project.project_id
                self._until_answered(client, key, ledger, stop)
                time.sleep(SEND_PAUSE_S)

    def _until_answered(self, client: httpx.Client, key: str, ledger: Ledger,
                        stop: threading.Event) -> None:
        deadline = None
        while deadline is None or time.monotonic() < deadline:
            answer = self.send(client, key)
            if answer is not None and answer.status_code in (200, 201):
                with ledger.lock:
                    ledger.answered[key] = answer.json()["id"]
                return
            with ledger.lock:
                ledger.refused += 1
            if stop.is_set() and deadline is None:
                deadline = time.monotonic() + DRAIN_S
            time.sleep(RETRY_PAUSE_S)

    def stored(self, pair: Pair, message_ids: list[str]) -> set[str]:
        """The messages of ``message_ids`` the cluster has."""
        with connect.sync_client(self.cluster.url) as r:
            pipe = r.pipeline(transaction=False)
            for mid in message_ids:
                pipe.exists(keys.message(pair.project.project_id, mid))
            found = pipe.execute()
        return {mid for mid, f in zip(message_ids, found, strict=True) if f}

    def inbox(self, pair: Pair) -> list[tuple[str, str | None]]:
        """Bob's inbox as the cluster holds it: each entry's message id and outcome."""
        project_id, bob = pair.project.project_id, pair.bob["agent_id"]
        with connect.sync_client(self.cluster.url) as r:
            delivery_ids = r.zrange(keys.inbox(project_id, bob), 0, -1)
            pipe = r.pipeline(transaction=False)
            for did in delivery_ids:
                pipe.hmget(keys.delivery(project_id, did),
                           [DeliveryField.MESSAGE_ID, DeliveryField.OUTCOME])
            return [(mid, outcome) for mid, outcome in pipe.execute()]

    def due(self, pair: Pair) -> int:
        """Deliveries of the project still due: in the outbox or waiting for a retry."""
        with connect.sync_client(self.cluster.url) as r:
            return int(r.zcard(keys.due(pair.project.project_id)))

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


def accounted(team: Team, ledger: Ledger) -> dict[str, int]:
    """Every answered send in the store and in its recipient's inbox once, with its
    outcome recorded: what is lost, repeated or stuck, counted."""
    counts = Counter[str]()
    for pair in team.pairs.values():
        answered = ledger.of(pair.project.project_id)
        counts["lost"] += len(set(answered) - team.stored(pair, answered))

        def settled(p: Pair = pair, n: int = len(set(answered))) -> list[Any] | None:
            entries = team.inbox(p)
            done = len(entries) >= n and all(o == ACCEPTED for _, o in entries)
            return entries if done and team.due(p) == 0 else None

        try:
            entries = wait_until(settled, timeout_s=120, what="every delivery accepted")
        except AssertionError:
            entries = team.inbox(pair)
        in_inbox = Counter(mid for mid, _ in entries)
        counts["repeated"] += sum(n - 1 for n in in_inbox.values())
        counts["missing"] += len(set(answered) - set(in_inbox))
        counts["unanswered"] += len(set(in_inbox) - set(answered))
        counts["stuck"] += sum(1 for _, o in entries if o != ACCEPTED) + team.due(pair)
    return dict(counts)


@pytest.mark.timeout(300)  # twenty failovers of about three seconds each, and the checks
def test_at_replica_twenty_primaries_killed_lose_and_repeat_no_answered_send(
        tmp_path: Path, cluster: EmbeddedCluster):
    shards = sorted(cluster.shards())
    team = Team(tmp_path, cluster, "replica", len(shards))
    try:
        team.stack.start_worker()
        ledger, stop = Ledger(), threading.Event()
        senders = [threading.Thread(target=team.keep_sending, args=(pair, ledger, stop))
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
        repeated_ids = len(ledger.answered) - len(set(ledger.answered.values()))
        counts = accounted(team, ledger)
        print(f"replica: {sum(kills.values())} primaries killed ({dict(kills)} by shard), "
              f"{len(ledger.answered)} sends answered, {ledger.refused} refusals retried, "
              f"{counts} in {streamed_s:.0f} s of sends")
        assert len(ledger.answered) > KILLS * 2, (len(ledger.answered), ledger.refused)
        assert repeated_ids == 0  # replays share their first answer's id
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
    with httpx.Client(base_url=team.stack.api_url, timeout=30, headers={
            "Authorization": f"Bearer {pair.sender_token}"}) as client:
        def send() -> None:
            key = uuid.uuid4().hex
            answer = team.send(client, key, "x" * 1_000_000)
            assert answer is not None, "the API did not answer"
            ledger.sent[key] = pair.project.project_id
            if answer.status_code == 201:
                ledger.answered[key] = answer.json()["id"]
            else:
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


def lost(team: Team, ledger: Ledger) -> int:
    """How many answered sends the store does not have."""
    [pair] = team.pairs.values()
    answered = ledger.of(pair.project.project_id)
    return len(set(answered) - team.stored(pair, answered))


def test_at_local_the_ledger_sees_the_sends_a_failover_lost(tmp_path: Path,
                                                           cluster: EmbeddedCluster):
    team = Team(tmp_path, cluster, "local", 1)
    try:
        ledger, refusals = held_behind(team, cluster, LOCAL_SENDS)
        assert refusals == []  # the primary alone answered them
        print(f"local: {lost(team, ledger)} of {len(ledger.answered)} answered sends lost "
              "by the failover")
        assert lost(team, ledger) > 0  # the ledger sees a loss where the level allows one
    finally:
        team.close()


def test_at_replica_the_same_failover_loses_no_answered_send(tmp_path: Path,
                                                             cluster: EmbeddedCluster):
    team = Team(tmp_path, cluster, "replica", 1, durability_timeout_s=HELD_WAIT_S)
    try:
        ledger, refusals = held_behind(team, cluster, HELD_SENDS)
        # Sends the replica did not confirm are refused, as sends that may be stored.
        assert [(r["error"]["code"], r["persisted"]) for r in refusals] == [
            ("STORE_UNAVAILABLE", None)] * HELD_SENDS
        assert len(ledger.answered) == 1 and lost(team, ledger) == 0
        print(f"replica: {HELD_SENDS} sends refused while the replica was behind, "
              f"0 of {len(ledger.answered)} answered lost by the failover")
    finally:
        team.close()
