"""A project's ready deliveries are taken in the order they became ready.

Admission makes a message's deliveries ready together, scored by the
message's place in the project's sequence; mail made ready again later (a
retry, the sweeper, a release) takes a later place. A stack with no worker:
the test takes as a worker's turn does.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from messaging.store.deliveries import DeliveryStore
from tests.integration.conftest import Project, open_project
from tests.stack import Stack


@pytest.fixture
def project(quiet: Stack) -> Iterator[Project]:
    with open_project(quiet) as made:
        yield made


def test_deliveries_are_taken_in_the_order_their_messages_were_admitted(
        project: Project, store: DeliveryStore):
    for name in ("Bob", "Carol", "Dan"):
        project.agent(name)
    alice = project.agent("Alice")

    def dids(to: list[str]) -> set[str]:
        sent = alice.api.send(to, "s", "x")["delivery"]["observations"]
        return {obs["delivery_id"] for obs in sent}

    first, second, third = dids(["Bob", "Carol", "Dan"]), dids(["Bob"]), dids(["Carol", "Dan"])
    taken = store.take_ready(project.project_id, "inbox", "", 4).delivery_ids
    assert set(taken[:3]) == first and taken[3:] == list(second)

    # Made ready again (as the sweeper does): behind what was ready before it.
    again = taken[0]
    assert store.make_ready(project.project_id, "inbox", [again])[0] == 1
    rest = store.take_ready(project.project_id, "inbox", "", 10)
    assert set(rest.delivery_ids[:2]) == third and rest.delivery_ids[2:] == [again]
