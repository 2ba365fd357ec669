"""Slots of the caps on requests under way (``lease_deliveries``, ``renew_slots``): a
slot lasts a short while unless its worker renews it, so a dead worker's share of
a cap comes back long before its lease ends; the lease itself is untouched. A
stack with no worker: the test leases as a worker does."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from messaging.store import keys
from messaging.store.deliveries import Caps, DeliveryStore, EndpointHealth, Result
from tests.integration.conftest import Project, open_project, sent_to_bob
from tests.stack import Stack

LEASE_MS = 60_000
SLOT_MS = 400
# One request at a time to Bob's endpoint, its slot SLOT_MS long.
ONE = Caps(per_endpoint=1, busy_ms=1000, slot_ms=SLOT_MS)
HEALTH = EndpointHealth(failures=5, after_ms=60_000, probe_ms=30_000)


@pytest.fixture
def project(quiet: Stack) -> Iterator[Project]:
    with open_project(quiet) as made:
        yield made


@pytest.fixture
def two(project: Project) -> tuple[str, str]:
    """Two deliveries from Alice to Bob's endpoint."""
    alice = project.agent("Alice")
    project.agent("Bob")
    first, second = sent_to_bob(alice, 2)
    return first, second


def lease_one(store: DeliveryStore, project_id: str, delivery_id: str) -> tuple[list, list]:
    return store.lease_within(project_id, [delivery_id], LEASE_MS, False, ONE)


def test_a_slot_no_one_renews_frees_the_cap_while_its_lease_runs_on(
        project: Project, store: DeliveryStore, two: tuple[str, str]):
    first, second = two
    [held], _ = lease_one(store, project.project_id, first)
    assert lease_one(store, project.project_id, second) == ([], [second])
    time.sleep(SLOT_MS / 1000 + 0.1)
    [leased], busy = lease_one(store, project.project_id, second)
    assert (leased.delivery_id, busy) == (second, [])
    # The first one's lease still stands: no one may take it over.
    assert store.lease(project.project_id, [first], LEASE_MS, False) == []
    lease_until = int(store.client.hget(keys.delivery(project.project_id, first),
                                        "lease_until_ms"))
    assert lease_until > time.time() * 1000 + LEASE_MS / 2
    del held


def test_a_renewed_slot_keeps_the_cap_full(project: Project, store: DeliveryStore,
                                           two: tuple[str, str]):
    first, second = two
    [held], _ = lease_one(store, project.project_id, first)
    for _ in range(6):
        time.sleep(SLOT_MS / 4000)
        assert store.renew_slots(project.project_id, [held], SLOT_MS) == 1
    # 0.6 s after the lease, past a slot's length: still held.
    assert lease_one(store, project.project_id, second) == ([], [second])


def test_a_slot_freed_by_its_outcome_is_never_renewed_back(
        project: Project, store: DeliveryStore, two: tuple[str, str]):
    first, second = two
    [held], _ = lease_one(store, project.project_id, first)
    assert store.record_outcomes(project.project_id, [(held, Result("accepted"))], HEALTH) == [
        True]
    assert store.renew_slots(project.project_id, [held], SLOT_MS) == 0
    assert store.client.zcard(keys.in_flight(project.project_id)) == 0
    [leased], _ = lease_one(store, project.project_id, second)
    assert leased.delivery_id == second


def test_a_delivery_left_for_a_cap_starts_its_count_of_sweeps_again(
        project: Project, store: DeliveryStore, two: tuple[str, str]):
    first, second = two
    lease_one(store, project.project_id, first)
    store.client.hset(keys.delivery(project.project_id, second), "sweeps", 4)
    assert lease_one(store, project.project_id, second) == ([], [second])
    assert store.client.hget(keys.delivery(project.project_id, second), "sweeps") is None
