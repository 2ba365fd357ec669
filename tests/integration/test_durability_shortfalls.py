"""A store that cannot keep writes at COURIER_DURABILITY's level is named at start
(docs/guarantees.md, Durability): no append-only file, one never fsynced, too few
replicas. Each sentence is checked against what the store then does, on real
servers: the API and a worker started on such a store say it, and a send is
answered as the sentence says. A store that never fsyncs is also how the
``fsync`` level's short wait is tested end to end (the replica level's pauses
its replica: test_durability.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from messaging.config import Level
from messaging.launch.embedded import EmbeddedStore
from messaging.store import connect
from messaging.store.durability import Durability, NotDurable, shortfalls
from tests.cluster import EmbeddedCluster
from tests.integration.conftest import Project, open_project
from tests.stack import Stack, free_port, make_stack, wait_until

# Each test starts servers of its own.
pytestmark = pytest.mark.slow

FSYNC = Durability(Level.FSYNC, timeout_ms=300)
REPLICA = Durability(Level.REPLICA, replicas=1, timeout_ms=300)
REPLICA_FSYNC = Durability(Level.REPLICA_FSYNC, replicas=1, timeout_ms=300)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(tmp_path / "store", port=free_port())
    s.start()
    yield s
    s.stop()


def configure(store: EmbeddedStore, **config: str) -> None:
    with connect.sync_client(store.url) as r:
        for name, value in config.items():
            r.config_set(name, value)


def wait_is_short(store: EmbeddedStore, durability: Durability) -> str:
    """Why a write followed by the level's wait fell short (it must)."""
    with connect.sync_client(store.url) as r:
        pipe = r.pipeline(transaction=False)
        pipe.set("probe", "1")
        for command in durability.commands():
            pipe.execute_command(*command)
        _, *waited = pipe.execute(raise_on_error=False)
    with pytest.raises(NotDurable) as short:
        durability.check(waited)
    return short.value.reason


def test_a_store_that_keeps_its_file_on_disk_has_no_shortfall(store: EmbeddedStore):
    assert shortfalls(store.url, FSYNC) == []
    configure(store, appendfsync="always")
    assert shortfalls(store.url, FSYNC) == []


def test_a_level_that_waits_for_nothing_has_no_shortfall(store: EmbeddedStore):
    configure(store, appendonly="no")
    assert shortfalls(store.url, Durability(Level.LOCAL)) == []


def test_a_store_that_never_fsyncs_is_named_and_its_waits_run_out(store: EmbeddedStore):
    configure(store, appendfsync="no")
    [said] = shortfalls(store.url, FSYNC)
    assert "COURIER_DURABILITY=fsync" in said and "(appendfsync no)" in said
    assert connect.redacted(store.url) in said and store.password not in said
    for _ in range(3):
        assert "not on the store's disk within 300 ms" in wait_is_short(store, FSYNC)


def test_a_store_without_its_file_is_named_and_refuses_the_wait(store: EmbeddedStore):
    configure(store, appendonly="no")
    [said] = shortfalls(store.url, FSYNC)
    assert "(appendonly no)" in said
    assert "the store refused the wait" in wait_is_short(store, FSYNC)


@pytest.mark.parametrize(("durability", "short"), [
    (REPLICA, "in the memory of 0 of 1 replicas within 300 ms"),
    (REPLICA_FSYNC, "on 0 of 1 replicas' disks within 300 ms")])
def test_too_few_replicas_are_named_and_the_wait_runs_out(
        store: EmbeddedStore, durability: Durability, short: str):
    [said] = shortfalls(store.url, durability)
    assert f"COURIER_DURABILITY={durability.level.value}:" in said
    assert "has 0 replicas connected of the 1 each write waits for" in said
    assert short in wait_is_short(store, durability)


def test_at_replica_a_primary_without_its_file_is_named_and_refuses_the_wait(
        store: EmbeddedStore):
    """``replica`` waits for the primary's disk too, not the replicas' memory alone."""
    configure(store, appendonly="no")
    said = shortfalls(store.url, REPLICA)
    assert any("(appendonly no)" in s for s in said), said
    assert "the store refused the wait" in wait_is_short(store, REPLICA)


def test_a_store_that_does_not_answer_is_not_guessed_at(store: EmbeddedStore):
    url = store.url
    store.stop()
    assert shortfalls(url, FSYNC, timeout_s=0.5) == []


def test_each_primary_of_a_cluster_is_named(tmp_path: Path):
    cluster = EmbeddedCluster(tmp_path / "cluster", [(free_port(), free_port())
                                                     for _ in range(3)], appendfsync="no")
    cluster.start()
    try:
        said = shortfalls(cluster.url, FSYNC)
        assert sorted(s.split(" the store at ")[1].split(" ")[0] for s in said) == sorted(
            f"127.0.0.1:{n.port}" for n in cluster.nodes)
        assert all("(appendfsync no)" in s for s in said)
    finally:
        cluster.stop()


def test_the_api_and_a_worker_say_it_at_start_and_a_send_is_answered_as_said(
        tmp_path: Path):
    stack = make_stack(tmp_path, store_kind="node")
    try:
        configure(stack.store, appendfsync="no")  # type: ignore[arg-type]
        fsync = {"COURIER_DURABILITY": "fsync", "COURIER_DURABILITY_TIMEOUT_S": "1.5"}
        api, url = stack.start_api(env=fsync)
        worker = stack.start_worker(beat=False, env=fsync)
        for proc in (api, worker):
            wait_until(lambda p=proc: "(appendfsync no)" in p.log.read_text(errors="replace"),
                       10, what=f"the {proc.name}'s line on the store")
        with open_project(stack) as project:
            check_a_send_as_said(stack, url, project)
    finally:
        stack.stop()


def check_a_send_as_said(stack: Stack, url: str, project: Project) -> None:
    """A send is answered 503, persisted unknown, while the store never fsyncs; once
    it does again (set right, no restart), the send's retry replays it."""
    alice = project.agent("Alice")
    project.agent("Bob")
    with httpx.Client(base_url=url, timeout=10,
                      headers={"Authorization": f"Bearer {alice.row['token']}"}) as http:
        def send(key: str) -> httpx.Response:
            return http.post("/v1/messages", json={
                "to": ["Bob"], "subject": "Handoff", "body_md": "Take it.",
                "idempotency_key": key})

        short = send("k1")
        assert short.status_code == 503, short.text
        assert short.json()["persisted"] is None
        assert short.json()["error"]["code"] == "STORE_UNAVAILABLE"
        assert short.json()["error"]["details"]["durability"] == "fsync"

        configure(stack.store, appendfsync="everysec")  # type: ignore[arg-type]
        replayed = wait_until(lambda: (r := send("k1")).status_code != 503 and r, 15,
                              what="the retry answered")
        assert replayed.status_code == 200, replayed.text
        assert replayed.json()["idempotent_replay"] is True
        assert send("k2").status_code == 201
