"""COURIER_DURABILITY against a real primary and a real replica (docs/guarantees.md,
Durability), at `replica` (the replica's memory) and at `replica-fsync` (its
disk): a send is answered 201 only once its level holds; a replica that stops
answering turns the send into a 503 that says it may have been stored, and a
retry with the same idempotency key replays it, once the replica has the send."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from messaging.launch.embedded import EmbeddedStore
from messaging.store import connect, keys
from tests.integration.conftest import new_project
from tests.sentinel import follow
from tests.stack import STORE, Stack, free_port, make_stack, wait_until

# Each test starts a stack and a replica of its own: the slow tier.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(STORE == "cluster", reason=(
    "these tests start one primary and its replica of their own; on a cluster, "
    "tests/integration/cluster/test_cluster_durability.py tests the waits"))]

WAIT_S = 2.0


class Replicated:
    """A stack whose store has one replica, which a test may stop and start."""

    def __init__(self, root: Path, durability: str) -> None:
        self.level = durability
        self.stack: Stack = make_stack(root, durability=durability,
                                       durability_timeout_s=str(WAIT_S))
        # A replica that fsyncs each write acknowledges at once (everysec: within 1 s).
        self.replica = EmbeddedStore(root / "replica", port=free_port(), appendfsync="always")
        self.replica.start()
        follow(self.replica, self.stack.store, self.stack.store.password)
        wait_until(lambda: self.replica_info()["master_link_status"] == "up",
                   what="the replica in sync")
        self.project = new_project(self.stack)
        self.project_id = self.project.project_id
        alice = self.project.agent("Alice")
        self.alice_id, self.alice_token = alice.id, alice.row["token"]
        self.project.agent("Bob")
        self.alice = self.http()

    def http(self) -> httpx.Client:
        """A client of the API as Alice, on connections of its own."""
        return httpx.Client(base_url=self.stack.api_url, timeout=30,
                            headers={"Authorization": f"Bearer {self.alice_token}"})

    def replica_info(self) -> dict[str, str]:
        with connect.sync_client(self.replica.url) as r:
            info: dict[str, str] = r.info("replication")  # type: ignore[union-attr,assignment]
        return {k: str(v) for k, v in info.items()}

    def on_replica(self, message_id: str) -> bool:
        with connect.sync_client(self.replica.url) as r:
            return bool(r.exists(keys.message(self.project_id, message_id)))  # type: ignore[union-attr]

    def idempotency_record(self, key: str) -> dict[str, Any] | None:
        """Alice's record of a send's idempotency key, as the primary holds it."""
        with self.stack.redis() as r:
            raw = r.get(keys.idempotency(self.project_id, self.alice_id, "send", key))
        return json.loads(raw) if raw else None  # type: ignore[arg-type]

    def send(self, via: httpx.Client | None = None, **fields: str) -> httpx.Response:
        return (via or self.alice).post("/v1/messages", json={
            "to": ["Bob"], "subject": "Handoff", "body_md": "Take it.", **fields})

    def stop_replica(self) -> None:
        os.kill(self.replica.pid or 0, signal.SIGSTOP)

    def start_replica(self) -> None:
        os.kill(self.replica.pid or 0, signal.SIGCONT)

    def close(self) -> None:
        self.start_replica()
        self.alice.close()
        for c in self.project.clients:
            c.close()
        self.replica.stop()
        self.stack.stop()


@pytest.fixture(scope="module", params=["replica", "replica-fsync"])
def replica_level(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    r = Replicated(tmp_path_factory.mktemp(f"{request.param}-level"), request.param)
    yield r
    r.close()


@pytest.fixture(scope="module")
def local_level(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    r = Replicated(tmp_path_factory.mktemp("local-level"), "local")
    yield r
    r.close()


def test_at_replica_a_201_means_the_replica_has_the_send(replica_level: Replicated):
    for _ in range(5):
        answer = replica_level.send()
        assert answer.status_code == 201, answer.text
        assert replica_level.on_replica(answer.json()["id"])


def test_a_replica_that_stops_answering_makes_the_send_a_503_that_a_retry_replays(
        replica_level: Replicated):
    key = uuid.uuid4().hex
    replica_level.stop_replica()
    try:
        started = time.monotonic()
        answer = replica_level.send(idempotency_key=key)
        took_s = time.monotonic() - started
    finally:
        replica_level.start_replica()
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["error"]["code"] == "STORE_UNAVAILABLE" and body["persisted"] is None
    assert "may have been stored" in body["error"]["message"]
    assert "idempotency_key" in body["error"]["message"]
    assert body["error"]["details"]["durability"] == replica_level.level
    assert WAIT_S <= took_s < WAIT_S + 2, took_s
    wait_until(lambda: replica_level.replica_info()["master_link_status"] == "up",
               what="the replica back")
    again = replica_level.send(idempotency_key=key)
    assert again.status_code == 200, again.text  # a replay
    assert again.json()["idempotent_replay"] is True
    assert replica_level.on_replica(again.json()["id"])


def test_a_replay_is_answered_only_once_the_replica_has_the_send_it_replays(
        replica_level: Replicated):
    """The replay finds the record and admits nothing, but it is not answered 200 while
    the admission it replays waits, on another store connection, for the replica."""
    key = uuid.uuid4().hex
    replica_level.stop_replica()
    try:
        with ThreadPoolExecutor(1) as pool, replica_level.http() as fresh:
            first = pool.submit(replica_level.send, idempotency_key=key)
            record = wait_until(lambda: replica_level.idempotency_record(key),
                                what="the first send admitted on the primary")
            started = time.monotonic()
            again = replica_level.send(fresh, idempotency_key=key)
            took_s = time.monotonic() - started
            answer = first.result()
    finally:
        replica_level.start_replica()
    assert answer.status_code == 503, answer.text
    assert again.status_code == 503, again.text  # not a 200: the replica lacks the send
    body = again.json()
    assert body["error"]["code"] == "STORE_UNAVAILABLE" and body["persisted"] is None
    assert "may have been stored" in body["error"]["message"]
    assert took_s >= WAIT_S, took_s
    wait_until(lambda: replica_level.replica_info()["master_link_status"] == "up",
               what="the replica back")
    replayed = replica_level.send(idempotency_key=key)
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["idempotent_replay"] is True
    assert replayed.json()["id"] == record["message_id"]
    assert replica_level.on_replica(record["message_id"])


def test_at_local_a_send_is_answered_without_the_replica(local_level: Replicated):
    local_level.stop_replica()
    try:
        answer = local_level.send()
        assert answer.status_code == 201, answer.text
        # The answer left before the replica had it: a failover now would lose it.
        assert answer.elapsed.total_seconds() < WAIT_S
    finally:
        local_level.start_replica()
    wait_until(lambda: local_level.on_replica(answer.json()["id"]), what="the copy, later")
