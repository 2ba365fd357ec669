"""A worker's turn held open: new mail rides on it instead of asking for a ticket.

A take that empties a lone project's ready set may hold the turn open
(``take_ready.lua``); while it is held, admission and ``make_ready`` count it
as one delivery ready ahead of theirs, so the publisher neither puts the
project in its ring again nor publishes a ticket for it. A stack with no
worker: the test takes from the ready set as a worker's turn does.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from messaging.runtime.celeryconf import queue_for
from messaging.store import keys
from messaging.store.deliveries import DeliveryStore
from tests.integration.conftest import Agent, Project, open_project, sent_to_bob
from tests.stack import Stack, wait_until

HELD_MS = 60_000  # held past the test's end unless a take closes it
INBOX = queue_for("inbox")


@pytest.fixture
def project(quiet: Stack) -> Iterator[Project]:
    with open_project(quiet) as made:
        yield made


def pair(project: Project) -> Agent:
    """Alice and Bob in ``project``: Alice, who sends."""
    project.agent("Bob")
    return project.agent("Alice")


def in_ring(store: DeliveryStore, project_id: str) -> bool:
    return store.client.zscore(keys.ring(INBOX), project_id) is not None


def test_a_take_that_empties_the_ready_set_holds_the_turn_until_the_next_take(
        project: Project, store: DeliveryStore):
    first, second = sent_to_bob(pair(project), 2)

    taken = store.take_ready(project.project_id, "inbox", "", 10, HELD_MS)
    assert (taken.delivery_ids, taken.left, taken.held_open) == ([first, second], 0, True)
    # Made ready again while the turn is held: the turn counts as one ahead of it.
    assert store.make_ready(project.project_id, "inbox", [first]) == (1, "", 2)

    taken = store.take_ready(project.project_id, "inbox", "", 10)
    assert (taken.delivery_ids, taken.left, taken.held_open) == ([first], 0, False)
    assert store.make_ready(project.project_id, "inbox", [second]) == (1, "", 1)


def test_a_take_that_finds_nothing_or_leaves_mail_holds_nothing(
        project: Project, store: DeliveryStore):
    alice = pair(project)
    assert not store.take_ready(project.project_id, "inbox", "", 10, HELD_MS).held_open
    ids = sent_to_bob(alice, 3)

    taken = store.take_ready(project.project_id, "inbox", "", 1, HELD_MS)
    assert (taken.delivery_ids, taken.left, taken.held_open) == (ids[:1], 2, False)
    assert not store.client.exists(keys.open_turn(project.project_id, "inbox"))


def test_a_held_turn_whose_worker_never_takes_again_lapses(
        project: Project, store: DeliveryStore):
    [only] = sent_to_bob(pair(project), 1)
    assert store.take_ready(project.project_id, "inbox", "", 10, 50).held_open
    wait_until(lambda: not store.client.exists(keys.open_turn(project.project_id, "inbox")),
               timeout_s=5, what="the held turn lapsed")
    assert store.make_ready(project.project_id, "inbox", [only]) == (1, "", 1)


def test_a_take_for_a_lane_the_project_left_closes_its_held_turn(
        quiet: Stack, project: Project, store: DeliveryStore):
    sent_to_bob(pair(project), 1)
    assert store.take_ready(project.project_id, "inbox", "", 10, HELD_MS).held_open
    with quiet.operator() as op:
        op.set_lane(project.project_id, "own")
    assert store.take_ready(project.project_id, "inbox", "", 10, HELD_MS).moved_to == "own"
    assert not store.client.exists(keys.open_turn(project.project_id, "inbox"))


def test_a_worker_leaving_the_ring_while_another_holds_the_turn_leaves_it_in(
        project: Project, store: DeliveryStore):
    # Two workers' turns at one project: one found the ready set empty and
    # leaves the ring while the other holds the turn open. Mail that rides on
    # the held turn joins no ring itself, so the project must stay in it.
    sent_to_bob(pair(project), 1)
    assert store.take_ready(project.project_id, "inbox", "", 10, HELD_MS).held_open
    assert store.ring_leave(INBOX, project.project_id, "inbox")
    assert in_ring(store, project.project_id)

    assert not store.take_ready(project.project_id, "inbox", "", 10).held_open
    assert not store.ring_leave(INBOX, project.project_id, "inbox")
    assert not in_ring(store, project.project_id)


def test_a_send_while_the_turn_is_held_rides_on_it(
        quiet: Stack, project: Project, store: DeliveryStore):
    # Out of the ring by hand: a send that found no turn held would put the
    # project back (and publish a ticket); one that rides on the turn does neither.
    alice = pair(project)
    sent_to_bob(alice, 1)
    assert store.take_ready(project.project_id, "inbox", "", 10, HELD_MS).held_open
    store.client.zrem(keys.ring(INBOX), project.project_id)
    with open_project(quiet) as witness:
        carol = pair(witness)
        sent_to_bob(alice, 1)
        # One API process publishes in order: once the witness's send put its
        # project in the ring, the first send's was decided.
        sent_to_bob(carol, 1)
        wait_until(lambda: in_ring(store, witness.project_id), what="the witness in the ring")
        assert not in_ring(store, project.project_id)

        # The next take closes the turn; a send after it asks for the ring again.
        taken = store.take_ready(project.project_id, "inbox", "", 10)
        assert (len(taken.delivery_ids), taken.held_open) == (1, False)
        sent_to_bob(alice, 1)
        wait_until(lambda: in_ring(store, project.project_id), what="the project in the ring")
