"""The broker warning describes this send (docs/http-api.md: Sending, warnings).

An answer waits briefly for the publish of the batch carrying its own
deliveries: a send while the broker is up has no "dispatch deferred" warning,
the first send after the broker dies has it (once RIDE_S has passed: until
then a send rides on the ticket the broker last took for its batch), and once
it is back the sends have it no more.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from messaging.client import CourierClient
from messaging.config import Settings
from messaging.runtime.celeryconf import queue_for
from messaging.runtime.embedded import EmbeddedStore
from messaging.runtime.publish import RIDE_S, Publisher
from tests.stack import free_port, make_stack, wait_until

DEFERRED = "dispatch deferred"


def _deferred(sent: dict) -> list[str]:
    return [w for w in sent["delivery"]["warnings"] if w.startswith(DEFERRED)]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_first_send_after_the_broker_dies_carries_the_warning(tmp_path: Path):
    broker = EmbeddedStore(tmp_path / "broker", port=free_port())
    broker.start()
    stack = make_stack(tmp_path / "stack", broker_url=broker.url)
    alice: CourierClient | None = None
    try:
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        with stack.client(p["token"]) as admin:
            alice = stack.client(admin.register_agent(p["project_id"], "Alice")["token"])
            admin.register_agent(p["project_id"], "Bob")
        up = [alice.send(["Bob"], f"while up {n}", "x") for n in range(3)]
        assert [_deferred(s) for s in up] == [[], [], []]
        broker.stop()
        # A send rides on its batch's ticket only while the broker took one within RIDE_S.
        time.sleep(RIDE_S)
        first = alice.send(["Bob"], "first after the broker died", "x")
        assert _deferred(first), first["delivery"]["warnings"]
        second = alice.send(["Bob"], "second", "x")
        assert _deferred(second)
        # Back up: the warning goes with the first send published again, and
        # no later send carries it.
        broker.start()
        wait_until(lambda: not _deferred(alice.send(["Bob"], "after", "x")), 30, 0.5,
                   "a send without the warning once the broker is back")
        again = [alice.send(["Bob"], f"back up {n}", "x") for n in range(3)]
        assert [_deferred(s) for s in again] == [[], [], []]
    finally:
        if alice is not None:
            alice.close()
        stack.stop()
        broker.stop()


@pytest.mark.timeout(60)
def test_a_batch_that_rode_on_a_ticket_that_failed_publishes_one_of_its_own(tmp_path: Path):
    """The API's publisher counts a send that joins a partly filled batch as riding on
    that batch's ticket; if that ticket then failed, the rider's own publish sends one."""
    broker = EmbeddedStore(tmp_path / "broker", port=free_port())
    broker.start()
    publisher = Publisher(Settings(redis_url=broker.url, broker_url=broker.url))
    inbox = ("inbox", "")
    try:
        assert publisher.send([(inbox, 1)]) == 1
        broker.stop()
        with pytest.raises(Exception):  # noqa: B017 - whatever the broker's client raises
            publisher.send([(inbox, 1)])
        broker.start()
        # A rider: no ticket of its own asked for, yet the one it counted on never left.
        assert publisher.send([(inbox, 0)]) == 1
        assert publisher.queue_depths()[queue_for("inbox")] == 2
        # Once a ticket went through, a rider rides again.
        assert publisher.send([(inbox, 0)]) == 0
    finally:
        publisher.close()
        broker.stop()
