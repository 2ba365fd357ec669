"""A primary killed again and again under a stream of sends, its replica promoted by
Sentinel: at `replica` durability every send answered 201 is there once and every
delivery completes once; at `local` the ledger sees what a failover lost
(docs/guarantees.md, Durability). The API and the worker follow each promotion
without a restart."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from messaging.client import CourierAPIError
from messaging.launch.embedded import EmbeddedStore
from messaging.store import connect, keys
from tests.integration.conftest import new_project
from tests.sentinel import Watched, with_cont
from tests.stack import Stack, free_port, make_stack, wait_until

# Stacks, Sentinels and twenty failovers: the slow tier.
pytestmark = pytest.mark.slow

KILLS = 20
SENDERS = 6
LOCAL_SENDS = 20


@dataclass
class Ledger:
    """Every send's idempotency key, and the message id of each answered 201 (or 200,
    a replay of one)."""

    answered: dict[str, str] = field(default_factory=dict)
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Team:
    """A stack on the watched store (a broker of its own), a project, two agents."""

    def __init__(self, root: Path, watched: Watched, durability: str) -> None:
        self.broker = EmbeddedStore(root / "broker", port=free_port())
        self.broker.start()
        self.stack: Stack = make_stack(root / "stack", redis_url=watched.url,
                                       broker_url=self.broker.url, durability=durability,
                                       durability_timeout_s="3")
        self.project = new_project(self.stack)
        self.project_id = self.project.project_id
        self.token = self.project.agent("Alice").row["token"]
        self.bob = self.project.agent("Bob").row
        self.watched = watched

    def send(self, client: httpx.Client, key: str, body: str = "") -> httpx.Response | None:
        try:
            return client.post("/v1/messages", json={
                "to": ["Bob"], "subject": "Handoff", "body_md": body or key,
                "idempotency_key": key})
        except httpx.TransportError:
            return None

    def keep_sending(self, ledger: Ledger, stop: threading.Event) -> None:
        """Send with a new key until ``stop``; a key not answered is sent again (as a
        client would) until it is."""
        with httpx.Client(base_url=self.stack.api_url, timeout=30,
                          headers={"Authorization": f"Bearer {self.token}"}) as client:
            while not stop.is_set():
                key = uuid.uuid4().hex
                while not stop.is_set():
                    answer = self.send(client, key)
                    if answer is not None and answer.status_code in (200, 201):
                        with ledger.lock:
                            ledger.answered[key] = answer.json()["id"]
                        break
                    with ledger.lock:
                        ledger.refused += 1
                    time.sleep(0.1)

    def stored(self, message_ids: list[str]) -> set[str]:
        """The messages of ``message_ids`` the primary has, asked again while the
        Sentinels have not all settled on a primary yet."""
        def ask() -> set[str] | None:
            try:
                with connect.sync_client(self.watched.url) as r:
                    pipe = r.pipeline(transaction=False)
                    for mid in message_ids:
                        pipe.exists(keys.message(self.project_id, mid))
                    found = pipe.execute()
            except connect.STORE_DOWN:
                return None
            return {mid for mid, f in zip(message_ids, found, strict=True) if f}

        found: set[str] = wait_until(lambda: (r := ask()) is not None and (r,), timeout_s=30,
                                     what="the primary, as the Sentinels say")[0]
        return found

    def inbox(self) -> list[str]:
        """Bob's inbox as the primary holds it (empty while none is settled on)."""
        try:
            with connect.sync_client(self.watched.url) as r:
                return list(r.zrange(keys.inbox(self.project_id, self.bob["agent_id"]), 0, -1))
        except connect.STORE_DOWN:
            return []

    def close(self) -> None:
        for c in self.project.clients:
            c.close()
        self.stack.stop()
        self.broker.stop()


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[Watched]:
    w = Watched(tmp_path / "store").start()
    yield w
    w.stop()


def test_at_replica_twenty_failovers_lose_and_repeat_no_answered_send(
        tmp_path: Path, watched: Watched):
    team = Team(tmp_path, watched, "replica")
    try:
        team.stack.start_worker()
        ledger, stop = Ledger(), threading.Event()
        senders = [threading.Thread(target=team.keep_sending, args=(ledger, stop))
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
        # Every answered send is in the store, once per key (replays share an id).
        assert team.stored(answered) == set(answered)
        assert len(set(answered)) == len(ledger.answered)
        # Every delivery completes, and Bob's inbox holds each message once.
        with team.stack.client(team.bob["token"]) as bob:
            def all_in() -> bool:
                return len(team.inbox()) >= len(answered)
            wait_until(all_in, timeout_s=120, what="every delivery in the inbox")
            seen = [m["id"] for m in bob.iter_inbox(limit=500)]
        assert sorted(seen) == sorted(set(answered)), (len(seen), len(set(answered)))
        print(f"replica: {len(answered)} sends answered over {KILLS} failovers, "
              f"{ledger.refused} refusals retried, 0 lost, 0 repeated")
    finally:
        team.close()


def test_at_local_the_ledger_sees_the_sends_a_failover_lost(tmp_path: Path, watched: Watched):
    team = Team(tmp_path, watched, "local")
    try:
        primary = watched.primary()
        assert primary is not None
        replica = watched.other(primary)
        ledger = Ledger()
        # The replica falls behind (stopped; sends of 1 MB, more than the sockets
        # between the two buffer), the primary answers sends it alone has.
        os.kill(replica.pid or 0, signal.SIGSTOP)
        try:
            with httpx.Client(base_url=team.stack.api_url, timeout=30,
                              headers={"Authorization": f"Bearer {team.token}"}) as client:
                for _ in range(LOCAL_SENDS):
                    key = uuid.uuid4().hex
                    answer = team.send(client, key, "x" * 1_000_000)
                    assert answer is not None and answer.status_code == 201, answer
                    ledger.answered[key] = answer.json()["id"]
            os.kill(primary.pid or 0, signal.SIGKILL)
        finally:
            with_cont(replica)
        wait_until(lambda: watched.primary() is replica and watched.is_primary(replica),
                   timeout_s=30, what="the lagging replica promoted")
        answered = list(ledger.answered.values())
        lost = len(set(answered) - team.stored(answered))
        print(f"local: {lost} of {len(answered)} answered sends lost by the failover")
        assert lost > 0  # the ledger sees a loss where the level allows one
    finally:
        team.close()


def test_flower_lists_a_lane_made_after_a_failover_without_a_restart(
        tmp_path: Path, watched: Watched):
    team = Team(tmp_path, watched, "local")
    try:
        _, url = team.stack.start_flower(["-m", "messaging.launch.flower"])
        other = new_project(team.stack)
        with team.stack.client(team.stack.operator_token) as op, httpx.Client(
                base_url=url, timeout=10, auth=("operator", team.stack.operator_token)) as http:
            def listed() -> set[str]:
                answer = http.get("/api/queues/length")
                return {q["name"] for q in answer.json()["active_queues"]} if (
                    answer.status_code == 200) else set()

            op.set_lane(team.project_id, "before")
            wait_until(lambda: "deliver.inbox.before" in listed(), timeout_s=30,
                       what="Flower listing the first lane")
            watched.kill_primary()  # returns once the replica is promoted
            wait_until(lambda: _set_lane(op, other.project_id, "after"), timeout_s=30,
                       what="a lane set on the new primary")
            found = wait_until(lambda: (names := listed()) >= {
                "deliver.inbox.before", "deliver.inbox.after"} and names, timeout_s=30,
                what="Flower listing the lane the new primary holds")
        print(f"Flower after a failover lists {sorted(n for n in found if '.inbox.' in n)}")
    finally:
        team.close()


def _set_lane(op: Any, project_id: str, lane: str) -> bool:
    """Put the project on the lane; False while the API still refuses (503)."""
    try:
        op.set_lane(project_id, lane)
    except (CourierAPIError, httpx.HTTPError):
        return False
    return True
