"""Whose turn it is on a delivery queue: the ring's order, on the real store."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from messaging.store import keys
from messaging.store.deliveries import DeliveryStore
from messaging.store.store import Store
from tests.stack import Stack

# Ids that sort the other way round from the order the tests join them in: the
# ring must not fall back on the ids' order.
FIRST, SECOND, THIRD = "prj_zzz", "prj_mmm", "prj_aaa"


@pytest.fixture
def ring(stack: Stack) -> Iterator[tuple[DeliveryStore, str]]:
    """A store and a queue of its own, which no worker serves."""
    store = DeliveryStore.from_url(stack.store.url)
    queue = f"deliver.ring-test-{uuid.uuid4().hex[:8]}"
    yield store, queue
    store.client.delete(keys.ring(queue))  # the stack is shared: leave no made-up projects
    store.client.close()


def turns(store: DeliveryStore, queue: str, n: int) -> list[str]:
    out = []
    for _ in range(n):
        turn = store.ring_next(queue)
        assert turn is not None
        out.append(turn[0])
    return out


def test_projects_that_join_are_served_in_the_order_they_joined(ring: tuple[DeliveryStore, str]):
    store, queue = ring
    for project_id in (FIRST, SECOND, THIRD):
        store.ring_join(queue, project_id)
    assert turns(store, queue, 3) == [FIRST, SECOND, THIRD]


def test_projects_joining_in_one_batch_are_served_in_its_order(
        ring: tuple[DeliveryStore, str], stack: Stack):
    """The API's publisher joins a batch's projects in one round trip."""
    store, queue = ring

    async def join() -> None:
        api = Store.from_url(stack.store.url)
        try:
            await api.ring_join([(queue, FIRST), (queue, SECOND), (queue, THIRD)])
        finally:
            await api.close()

    asyncio.run(join())
    assert turns(store, queue, 3) == [FIRST, SECOND, THIRD]


def test_a_project_that_joins_goes_before_those_served_since(ring: tuple[DeliveryStore, str]):
    store, queue = ring
    store.ring_join(queue, FIRST)
    store.ring_join(queue, SECOND)
    assert turns(store, queue, 2) == [FIRST, SECOND]  # both at the back now
    store.ring_join(queue, THIRD)
    assert turns(store, queue, 3) == [THIRD, FIRST, SECOND]


def test_a_project_joining_again_waits_behind_one_that_joined_first(
        ring: tuple[DeliveryStore, str]):
    """A flood's ready set empties and fills again: it does not go ahead of a
    project already waiting for its first turn."""
    store, queue = ring
    flood, other = THIRD, FIRST  # the flood's id sorts first
    store.ring_join(queue, flood)
    assert turns(store, queue, 1) == [flood]
    store.ring_drop(queue, flood)  # its ready set emptied
    store.ring_join(queue, other)  # another project's new mail
    store.ring_join(queue, flood)  # the flood's next message
    assert turns(store, queue, 2) == [other, flood]


def test_joining_a_ring_one_is_in_keeps_its_place(ring: tuple[DeliveryStore, str]):
    store, queue = ring
    store.ring_join(queue, FIRST)
    store.ring_join(queue, SECOND)
    store.ring_join(queue, FIRST)
    assert turns(store, queue, 2) == [FIRST, SECOND]
