"""The broker warning describes this send (docs/http-api.md: Sending, warnings).

An answer does not wait for its publish while the publisher trusts the broker:
it says nothing of dispatch, which is true. Once the publisher knows the broker
is failing (a publish failed, or one is overdue), each answer waits briefly for
its own publish and says "dispatch deferred" when it did not go through; once a
publish goes through again, the answers stop waiting and carry it no more.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from messaging.client import CourierClient
from messaging.config import Settings
from messaging.launch.embedded import EmbeddedStore
from messaging.runtime.celeryconf import queue_for
from messaging.runtime.publish import OVERDUE_S, RIDE_S, Publisher
from messaging.service.sending import PUBLISH_WAIT_S
from tests.stack import free_port, make_stack, wait_until

DEFERRED = "dispatch deferred"


def _deferred(sent: dict) -> list[str]:
    return [w for w in sent["delivery"]["warnings"] if w.startswith(DEFERRED)]


def _timed_send(alice: CourierClient, subject: str) -> tuple[dict, float]:
    began = time.monotonic()
    sent = alice.send(["Bob"], subject, "x")
    return sent, time.monotonic() - began


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_answers_wait_for_their_publish_only_once_the_broker_is_known_to_fail(tmp_path: Path):
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

        # A hanging broker: the first send's answer does not wait on it and claims nothing.
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            time.sleep(RIDE_S)  # past riding: this send's batch needs a ticket of its own
            first, took = _timed_send(alice, "first into a hanging broker")
            assert not _deferred(first) and took < PUBLISH_WAIT_S / 2, (took, first)
            # Its publish is overdue now: an answer waits for its own and says it is deferred.
            time.sleep(OVERDUE_S)
            waited, took = _timed_send(alice, "while the publish hangs")
            assert _deferred(waited) and took >= PUBLISH_WAIT_S, (took, waited)
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        wait_until(lambda: not _deferred(alice.send(["Bob"], "after", "x")), 30, 0.2,
                   "a send without the warning once the broker answers again")

        # A dead broker: once a publish failed, every answer says its dispatch is deferred.
        broker.stop()
        time.sleep(RIDE_S)
        wait_until(lambda: _deferred(alice.send(["Bob"], "into a dead broker", "x")), 10, 0.1,
                   "a send with the warning once a publish failed")
        assert _deferred(alice.send(["Bob"], "still dead", "x"))

        broker.start()
        wait_until(lambda: not _deferred(alice.send(["Bob"], "back", "x")), 30, 0.5,
                   "a send without the warning once the broker is back")
        again = [_timed_send(alice, f"back up {n}") for n in range(3)]
        assert [_deferred(s) for s, _ in again] == [[], [], []]
        assert all(took < PUBLISH_WAIT_S / 2 for _, took in again), again
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
