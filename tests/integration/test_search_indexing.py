"""When search indexing runs: after dispatch, and only while no delivery waits.

A stack with no delivery worker (``quiet``), so that mail sent on the shared
queue waits there, and the indexer (``workers.indexer``) called directly on the real store;
the last test starts a worker with its sweeper.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import httpx
import pytest

from messaging import transports
from messaging.client import CourierClient
from messaging.runtime.celeryconf import delivery_queues
from messaging.store import keys
from messaging.store.deliveries import DeliveryStore, now_ms
from messaging.store.searchindex import index_queued
from tests.integration.conftest import Agent, Project
from tests.stack import Stack, wait_until
from workers.indexer import index_pending

LAG_MAX_S = 60.0
PARKED = "parked"  # a lane no worker serves


# The clients a test made, closed with its stack.
MADE: list[CourierClient] = []


@pytest.fixture(autouse=True)
def _close_made() -> Iterator[None]:
    """The clients a test made are closed after it."""
    yield
    while MADE:
        MADE.pop().close()


def new_project(stack: Stack) -> Project:
    key = f"/srv/{uuid.uuid4().hex}"
    with stack.operator() as op:
        p = op.create_project(key)
    project = Project(stack, p["project_id"], key, p["token"])
    MADE.append(project.admin)
    return project


def agent(project: Project, name: str, **fields: str) -> Agent:
    a = project.agent(name, **fields)
    MADE.append(a.api)
    return a


def sent(sender: Agent, to: Agent, subject: str) -> tuple[str, str, str]:
    """Send; the (message, recipient, sender) a worker queues once it dispatched it."""
    answer = sender.api.send(to.row["name"], subject, f"About {subject}.")
    return answer["id"], to.row["agent_id"], sender.row["agent_id"]


def subjects(a: Agent, q: str) -> list[str]:
    return [m["subject"] for m in a.api.search(q)["messages"]]


def unindexed(stack: Stack) -> float:
    """What /metrics says waits for the search index."""
    text = httpx.get(stack.api_url + "/metrics", timeout=10).text
    found = re.search(r"^courier_search_unindexed (\S+)$", text, re.M)
    assert found, "no courier_search_unindexed in /metrics"
    return float(found[1])


def index(store: DeliveryStore, lag_max_s: float = LAG_MAX_S, overdue_budget: int = 100,
          projects: list[str] | None = None) -> int:
    return index_pending(store, delivery_queues(), list(transports.installed()), lag_max_s,
                         overdue_budget, projects)


def test_nothing_is_indexed_while_a_project_waits_on_the_shared_queue(
        quiet: Stack, store: DeliveryStore):
    project = new_project(quiet)
    alice, bob = agent(project, "Alice"), agent(project, "Bob")
    store.after_step(project.project_id, [sent(alice, bob, "Alpha")], now_ms(), None)
    assert store.ring_size("deliver.inbox") >= 1  # no worker: Alice's mail waits there

    assert index(store) == 0
    assert subjects(alice, "alpha") == []
    assert store.client.llen(keys.search_queue(project.project_id)) == 1
    assert unindexed(quiet) == 1


@pytest.mark.slow
def test_entries_older_than_the_lag_are_indexed_up_to_the_budget_even_then(
        quiet: Stack, store: DeliveryStore):
    project = new_project(quiet)
    alice, bob = agent(project, "Alice"), agent(project, "Bob")
    entries = [sent(alice, bob, subject) for subject in ("Red", "Green", "Blue")]
    store.after_step(project.project_id, entries, now_ms() - 2_000, None)

    assert index(store, lag_max_s=1.0, overdue_budget=2) == 2
    assert subjects(alice, "about") == ["Green", "Red"]
    assert index(store, lag_max_s=1.0, overdue_budget=2) == 1
    assert subjects(alice, "about") == ["Blue", "Green", "Red"]
    assert store.client.llen(keys.search_queue(project.project_id)) == 0
    assert unindexed(quiet) == 0


def test_a_project_whose_own_mail_waits_is_left_while_others_are_indexed(
        quiet: Stack, store: DeliveryStore):
    busy, calm = new_project(quiet), new_project(quiet)
    alice, bob = agent(busy, "Alice"), agent(busy, "Bob")
    carol, dave = agent(calm, "Carol"), agent(calm, "Dave", inbound="hold")
    with quiet.operator() as op:
        op.set_lane(busy.project_id, PARKED)  # its mail waits, but not on the shared queue
    store.after_step(busy.project_id, [sent(alice, bob, "Busy")], now_ms(), None)
    # Held mail is not waiting for a worker (the calm project has none), and admission
    # queued it for its sender's search.
    sent(carol, dave, "Calm")

    assert index(store, projects=[busy.project_id, calm.project_id]) == 1
    assert subjects(carol, "calm") == ["Calm"]
    assert subjects(alice, "busy") == []
    assert store.client.llen(keys.search_queue(busy.project_id)) == 1


@pytest.mark.slow
def test_an_entry_leaves_the_queue_only_when_it_is_still_the_head_that_was_indexed(
        quiet: Stack, store: DeliveryStore):
    project = new_project(quiet)
    carol, dave = agent(project, "Carol"), agent(project, "Dave", inbound="hold")
    for subject in ("One", "Two", "Three"):
        sent(carol, dave, subject)  # held: admission queues it for Carol's search
    queue = keys.search_queue(project.project_id)
    head = [str(e) for e in store.client.lrange(queue, 0, 1)]

    index_queued(store.client, store.scripts, project.project_id, head)
    assert store.client.llen(queue) == 1
    # A second indexer that read the same head indexes again, and drops nothing.
    index_queued(store.client, store.scripts, project.project_id, head)
    assert store.client.llen(queue) == 1
    assert subjects(carol, "about") == ["Two", "One"]


@pytest.mark.slow
def test_the_sweeper_indexes_a_queue_that_the_list_of_queues_missed(
        quiet: Stack, store: DeliveryStore):
    project = new_project(quiet)
    carol, dave = agent(project, "Carol"), agent(project, "Dave", inbound="hold")
    sent(carol, dave, "Late")  # held: admission queues it for Carol's search
    # On a cluster the listing may land before the entry, and be settled away between.
    store.client.srem(keys.SEARCH_PENDING, project.project_id)

    quiet.start_worker()
    wait_until(lambda: subjects(carol, "late") == ["Late"], what="the sweeper indexed it")


def test_a_step_queues_its_messages_for_search_and_counts_the_ring_together(
        quiet: Stack, store: DeliveryStore):
    project = new_project(quiet)
    alice, bob = agent(project, "Alice"), agent(project, "Bob")
    entry = sent(alice, bob, "Step")  # no worker: Alice's mail waits on the shared queue
    queue = keys.search_queue(project.project_id)

    assert store.after_step(project.project_id, [], now_ms(), None) == (0, None)
    in_ring, error = store.after_step(project.project_id, [entry], now_ms(), "deliver.inbox")
    assert (in_ring, error) == (store.ring_size("deliver.inbox"), None) and in_ring >= 1
    assert store.client.llen(queue) == 1
    assert project.project_id in store.client.smembers(keys.SEARCH_PENDING)

    # A search queue the store refuses to write: the ring is still counted, the
    # refusal is answered beside it, not raised.
    store.client.delete(queue)
    store.client.set(queue, "not a list")
    in_ring, error = store.after_step(project.project_id, [entry], now_ms(), "deliver.inbox")
    assert in_ring == store.ring_size("deliver.inbox") and "WRONGTYPE" in str(error)
    assert store.after_step(project.project_id, [entry], now_ms(), None)[0] == 0


@pytest.mark.slow
def test_mail_is_delivered_while_its_search_queue_cannot_be_written(
        quiet: Stack, store: DeliveryStore):
    project = new_project(quiet)
    alice, bob = agent(project, "Alice"), agent(project, "Bob")
    store.client.set(keys.search_queue(project.project_id), "not a list")
    answers = [alice.api.send("Bob", f"Mail {i}", "About it.") for i in range(12)]

    worker = quiet.start_worker(beat=False)
    wait_until(lambda: len(bob.api.inbox()["messages"]) == 12, what="all twelve in Bob's inbox")
    assert {m["id"] for m in bob.api.inbox()["messages"]} == {a["id"] for a in answers}
    for answer in answers:
        [observation] = answer["delivery"]["observations"]
        assert alice.api.delivery(observation["delivery_id"])["outcome"] == "accepted"
    wait_until(lambda: "search index of" in worker.log.read_text(errors="replace"),
               what="the worker's warning")
    assert "WRONGTYPE" in worker.log.read_text(errors="replace")
