"""A project's ready deliveries are taken in the order they became ready.

Admission makes a message's deliveries ready at places in the project's
sequence it sets aside after the message's own, in the order the recipients
were named; mail made ready again later (a retry, the sweeper, a release)
takes a later place. A stack with no worker:
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

    def dids(to: list[str]) -> list[str]:
        sent = alice.api.send(to, "s", "x")["delivery"]["observations"]
        assert [obs["recipient"].split(" ")[0] for obs in sent] == to
        return [obs["delivery_id"] for obs in sent]

    first, second, third = dids(["Dan", "Bob", "Carol"]), dids(["Bob"]), dids(["Carol", "Dan"])
    taken = store.take_ready(project.project_id, "inbox", "", 4).delivery_ids
    assert taken == first + second

    # Made ready again (as the sweeper does): behind what was ready before it.
    again = taken[0]
    assert store.make_ready(project.project_id, "inbox", [again])[0] == 1
    rest = store.take_ready(project.project_id, "inbox", "", 10)
    assert rest.delivery_ids == [*third, again]
