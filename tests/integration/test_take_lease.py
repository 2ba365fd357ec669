"""A take that leases (``take_lease.lua``): what an inbox worker's turn takes is
leased in the same script, each delivery's hash derived in Lua from its id.

It must answer what ``take_ready`` and then ``lease`` answer: the same take,
the same leases, the same stages and attempts in the store; a delivery taken
that someone else holds is not leased again. A stack with no worker: the
test takes as a worker's turn does.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from messaging.store import keys
from messaging.store.deliveries import DeliveryStore
from tests.integration.conftest import Agent, Project, open_project, sent_to_bob
from tests.stack import Stack

LEASE_MS = 60_000
HELD_MS = 60_000


@pytest.fixture
def project(quiet: Stack) -> Iterator[Project]:
    with open_project(quiet) as made:
        yield made


def pair(project: Project) -> tuple[Agent, Agent]:
    return project.agent("Alice"), project.agent("Bob")


def delivery(store: DeliveryStore, project_id: str, delivery_id: str) -> dict[str, str]:
    return dict(store.client.hgetall(keys.delivery(project_id, delivery_id)))


def test_what_is_taken_is_leased_as_a_lease_after_the_take_would_lease_it(
        project: Project, store: DeliveryStore):
    alice, bob = pair(project)
    ids = sent_to_bob(alice, 3)

    taken, leased = store.take_lease(project.project_id, "inbox", "", 2, 0, LEASE_MS, True)
    assert (taken.delivery_ids, taken.left, taken.held_open) == (ids[:2], 1, False)
    assert [lease.delivery_id for lease in leased] == ids[:2]
    assert {(lease.fence, lease.attempt, lease.round_attempt, lease.agent_id, lease.sender_id)
            for lease in leased} == {(1, 1, 1, bob.id, alice.id)}
    assert all(lease.admitted_us > 0 and bob.id in lease.agent_json for lease in leased)

    # The third by take_ready and lease, the two scripts this one stands for.
    [third] = store.take_ready(project.project_id, "inbox", "", 2).delivery_ids
    [by_two] = store.lease(project.project_id, [third], LEASE_MS, True)
    assert (third, by_two.fence, by_two.attempt) == (ids[2], 1, 1)
    stored = [delivery(store, project.project_id, d) for d in ids]
    assert {d["stage"] for d in stored} == {"dispatch_started"}
    assert {d["fence"] for d in stored} == {"1"}
    shape = {k for k in stored[2] if not k.endswith(("_us", "_ms"))}
    assert all({k for k in d if not k.endswith(("_us", "_ms"))} == shape for d in stored)


def test_a_delivery_taken_that_another_worker_holds_is_not_leased_again(
        project: Project, store: DeliveryStore):
    alice, _ = pair(project)
    first, second = sent_to_bob(alice, 2)
    [held] = store.lease(project.project_id, [first], LEASE_MS, True)
    taken, leased = store.take_lease(project.project_id, "inbox", "", 10, 0, LEASE_MS, True)
    assert taken.delivery_ids == [first, second]
    assert [lease.delivery_id for lease in leased] == [second]
    assert delivery(store, project.project_id, first)["fence"] == str(held.fence)


def test_a_take_that_empties_the_ready_set_holds_the_turn_and_leases(
        project: Project, store: DeliveryStore):
    [only] = sent_to_bob(pair(project)[0], 1)
    taken, leased = store.take_lease(project.project_id, "inbox", "", 10, HELD_MS, LEASE_MS,
                                     True)
    assert (taken.delivery_ids, taken.held_open) == ([only], True)
    assert [lease.delivery_id for lease in leased] == [only]
    taken, leased = store.take_lease(project.project_id, "inbox", "", 10, HELD_MS, LEASE_MS,
                                     True)
    assert (taken.delivery_ids, taken.held_open, leased) == ([], False, [])


def test_a_take_for_a_lane_the_project_left_takes_and_leases_nothing(
        quiet: Stack, project: Project, store: DeliveryStore):
    [only] = sent_to_bob(pair(project)[0], 1)
    with quiet.operator() as op:
        op.set_lane(project.project_id, "own")
    taken, leased = store.take_lease(project.project_id, "inbox", "", 10, 0, LEASE_MS, True)
    assert (taken.moved_to, taken.delivery_ids, leased) == ("own", [], [])
    assert delivery(store, project.project_id, only)["stage"] == "target_selected"
