"""Delivery by real workers: duplicate tasks, lease fencing, the sweeper, killed workers.

Tests that need processes of their own (no worker yet, a dead broker, a worker
to kill) get a stack of their own; the rest share the session's stack.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import redis
from celery import Celery

from messaging.client import CourierClient
from messaging.config import Settings
from messaging.runtime.celeryconf import DELIVER_TASK, celery_config, queue_for
from messaging.runtime.publish import RIDE_S, Publisher
from messaging.service.sending import WARN_BROKER, WARN_UNCONFIRMED
from messaging.store import keys
from messaging.store.deliveries import DeliveryStore, EndpointHealth, Leased, Result
from tests.integration.conftest import Agent, Project, open_project
from tests.stack import Proc, Stack, children, free_port, make_stack, wait_until

STAGES = ["admitted", "target_selected", "dispatch_started", "provider_result_recorded",
          "delivery_observed"]
# Long enough never to run out during a test; short enough to see expire.
LEASE_MS = 60_000
HEALTH = EndpointHealth(failures=5, after_ms=60_000, probe_ms=30_000)
TINY_LEASE_MS = 50
# What both deferred-dispatch warnings begin with.
DEFERRED = os.path.commonprefix([WARN_BROKER, WARN_UNCONFIRMED])
TASK_DONE = re.compile(
    rf"Task {re.escape(DELIVER_TASK)}\[(?P<id>[^\]]+)\] succeeded in \S+: '(?P<result>[^']*)'"
)
OUTCOME_COUNT = re.compile(r"(?:accepted|rejected|failed|unknown|retry|lease_lost) (\d+)")


# helpers


@contextmanager
def broker_app(stack: Stack) -> Iterator[Celery]:
    """A Celery app publishing to the stack's broker, configured as the API's."""
    app = Celery("courier-test", set_as_current=False)
    app.conf.update(celery_config(Settings(redis_url=stack.store.url,
                                           broker_url=stack.broker_url)))
    try:
        yield app
    finally:
        app.close()


def publish_deliver(stack: Stack, copies: int = 1) -> list[str]:
    """Publish ``courier.deliver`` tickets of the inbox queue by name, as the API does;
    their task ids."""
    with broker_app(stack) as app:
        return [app.send_task(DELIVER_TASK, args=["inbox", ""], queue=queue_for("inbox")).id
                for _ in range(copies)]


def finished_tasks(*workers: Proc) -> dict[str, int]:
    """Delivery tasks these workers finished: task id -> outcomes it recorded (its result
    names them by kind)."""
    text = "".join(w.log.read_text(errors="replace") for w in workers)
    return {m["id"]: sum(map(int, OUTCOME_COUNT.findall(m["result"])))
            for m in TASK_DONE.finditer(text)}


def workers_of(stack: Stack) -> list[Proc]:
    """Every worker process the stack started."""
    return [p for p in stack.procs if p.name == "worker"]


def send_one(alice: Agent, to: str = "Bob") -> tuple[str, str]:
    """Alice sends one message; its id and its one delivery id."""
    sent = alice.api.send([to], "Handoff", "# Next\n")
    [obs] = sent["delivery"]["observations"]
    return sent["id"], obs["delivery_id"]


def delivery_hash(stack: Stack, project_id: str, delivery_id: str) -> dict[str, str]:
    """The stored delivery, as the workers see it."""
    r = stack.redis()
    try:
        return r.hgetall(keys.delivery(project_id, delivery_id))
    finally:
        r.close()


# fixtures


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack of this test alone, with no worker until the test starts one."""
    s = make_stack(tmp_path)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def idle_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A store and an API with no worker at all: nothing ever dispatches by itself."""
    s = make_stack(tmp_path_factory.mktemp("idle"))
    try:
        yield s
    finally:
        s.stop()


@dataclass
class Parked:
    """An admitted delivery nobody dispatches, and the store the workers use."""

    store: DeliveryStore
    project_id: str
    delivery_id: str
    inbox: str
    sender: Agent

    def lease(self, lease_ms: int = LEASE_MS, idempotent: bool = True) -> list[Leased]:
        return self.store.lease(self.project_id, [self.delivery_id], lease_ms, idempotent)

    def deliver(self, *leased: Leased) -> int:
        """Put in the inbox and record ``accepted``, as the inbox transport's worker does."""
        put = self.store.put_inbox(self.project_id, list(leased))
        done = [(lease, Result("accepted")) for lease, ok in zip(leased, put, strict=True) if ok]
        return sum(self.store.record_outcomes(self.project_id, done, HEALTH))

    def field(self, name: str) -> str | None:
        value: str | None = self.store.client.hget(
            keys.delivery(self.project_id, self.delivery_id), name)
        return value

    def inbox_members(self) -> list[str]:
        members: list[str] = self.store.client.zrange(self.inbox, 0, -1)
        return members


@pytest.fixture
def parked(idle_stack: Stack) -> Iterator[Parked]:
    """Alice sent Bob a message on the idle stack; its delivery waits in target_selected."""
    store = DeliveryStore.from_url(idle_stack.store.url)
    try:
        with open_project(idle_stack) as proj:
            alice, bob = proj.agent("Alice"), proj.agent("Bob")
            _, did = send_one(alice)
            yield Parked(store, proj.project_id, did, keys.inbox(proj.project_id, bob.id), alice)
    finally:
        store.client.close()


# duplicate tasks


def test_a_duplicate_delivery_task_changes_nothing(stack: Stack, project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    message_id, did = send_one(alice)
    before = wait_until(lambda: (d := alice.api.delivery(did))["outcome"] and d,
                        what="the first delivery's outcome")

    # Published again, as the sweeper or a second API would: ready again, with a ticket.
    publisher = Publisher(Settings(redis_url=stack.store.url, broker_url=stack.broker_url))
    try:
        publisher.publish_grouped([(project.project_id, "inbox", did)])
        with stack.redis() as r:
            wait_until(lambda: r.zcard(keys.ready(project.project_id, "inbox")) == 0,
                       what="a worker to take it again")
    finally:
        publisher.close()
    time.sleep(0.3)
    assert alice.api.delivery(did) == before
    assert [a["n"] for a in before["attempts"]] == [1]
    assert [m["id"] for m in bob.api.inbox()["messages"]] == [message_id]


@pytest.mark.slow
def test_identical_tasks_queued_before_any_worker_make_one_attempt(own_stack: Stack):
    with open_project(own_stack) as proj:
        alice, bob = proj.agent("Alice"), proj.agent("Bob")
        message_id, did = send_one(alice)
        copies = publish_deliver(own_stack, copies=3)

        worker = own_stack.start_worker(queues=queue_for("inbox"), concurrency=2, beat=False)
        # The API's own task and the three copies.
        done = wait_until(lambda: len(t := finished_tasks(worker)) == 1 + len(copies) and t,
                          what="every queued task to finish")

        assert set(copies) < set(done)
        assert sum(done.values()) == 1
        d = alice.api.delivery(did)
        assert d["outcome"] == "accepted" and [a["n"] for a in d["attempts"]] == [1]
        assert [m["id"] for m in bob.api.inbox()["messages"]] == [message_id]


# lease fencing, on the real store


def test_a_held_lease_is_not_given_twice(parked: Parked):
    [first] = parked.lease()

    assert (first.fence, first.attempt) == (1, 1)
    assert parked.lease() == []
    assert parked.field("fence") == "1"


def test_a_lease_carries_its_recipient_as_the_store_has_it(parked: Parked):
    [lease] = parked.lease()
    stored = parked.store.client.hget(keys.agents(parked.project_id), lease.agent_id)
    assert stored and json.loads(lease.agent_json) == json.loads(stored)
    assert json.loads(lease.agent_json)["transport"]["kind"] == "inbox"


def test_an_outcome_under_a_stale_fence_records_nothing(parked: Parked):
    [held] = parked.lease()

    assert parked.deliver(replace(held, fence=held.fence - 1)) == 0
    assert parked.inbox_members() == []
    assert parked.field("stage") == "dispatch_started"
    assert parked.field("outcome") is None


def test_an_expired_inbox_lease_is_taken_over_with_a_higher_fence(parked: Parked):
    [lapsed] = parked.lease(TINY_LEASE_MS)

    [taken] = wait_until(lambda: parked.lease(), what="the lapsed lease to be free")

    assert taken.fence == lapsed.fence + 1
    assert taken.attempt == lapsed.attempt + 1


def test_after_a_takeover_the_delivery_lands_in_the_inbox_once(parked: Parked):
    [lapsed] = parked.lease(TINY_LEASE_MS)
    [taken] = wait_until(lambda: parked.lease(), what="the lapsed lease to be free")

    recorded = [parked.deliver(lapsed), parked.deliver(taken), parked.deliver(taken)]

    assert recorded == [0, 1, 0]
    assert parked.inbox_members() == [parked.delivery_id]
    assert parked.field("outcome") == "accepted"


def test_an_expired_lease_of_a_non_idempotent_transport_is_not_taken_over(parked: Parked):
    [lapsed] = parked.lease(TINY_LEASE_MS, idempotent=False)
    lease_until_ms = int(parked.field("lease_until_ms") or 0)
    wait_until(lambda: time.time_ns() // 1_000_000 > lease_until_ms, what="the lease to expire")

    assert parked.lease(idempotent=False) == []
    assert parked.field("fence") == str(lapsed.fence)


def test_reading_a_delivery_never_dispatches(parked: Parked):
    alice = parked.sender
    for _ in range(20):
        alice.api.delivery(parked.delivery_id)
    [row] = alice.api.message_deliveries(alice.api.delivery(parked.delivery_id)["message_id"])

    assert row["stage"] == "target_selected"
    assert row["attempts"] == []
    assert parked.field("fence") == "0"


# the sweeper


@pytest.mark.slow
def test_a_send_whose_publish_failed_is_published_by_the_sweeper(own_stack: Stack):
    dead_broker = f"redis://127.0.0.1:{free_port()}/0"
    _, url = own_stack.start_api(env={"COURIER_BROKER_URL": dead_broker})
    with open_project(own_stack) as proj:
        alice_row, bob = proj.agent("Alice").row, proj.agent("Bob")
        with CourierClient(url, alice_row["token"]) as alice:
            answers = [alice.send(["Bob"], f"send {n}", str(n)) for n in range(3)]

        # each answer, the first one included, says its own dispatch was deferred
        for answer in answers:
            assert any(w.startswith(DEFERRED) for w in answer["delivery"]["warnings"]), answer
        sent = [a["id"] for a in answers]

        worker = own_stack.start_worker()
        inbox = wait_until(lambda: len(m := bob.api.inbox()["messages"]) == len(sent) and m,
                           timeout_s=20, what="every message in Bob's inbox")

        assert sorted(m["id"] for m in inbox) == sorted(sent)
        for m in inbox:
            d = bob.api.delivery(m["delivery_id"])
            assert list(d["stages"]) == STAGES and d["outcome"] == "accepted"
        assert re.search(rf"sweeper handed \d+ deliveries of {proj.project_id} over again",
                         worker.log.read_text())


def _sent(sender, to: str, n: int) -> list[str]:
    """The delivery ids of ``n`` sends from ``sender`` to ``to``."""
    return [sender.api.send([to], f"m{i}", "x")["delivery"]["observations"][0]["delivery_id"]
            for i in range(n)]


@pytest.mark.slow
def test_one_project_s_backlog_holds_another_s_new_mail_up_by_a_short_turn(own_stack: Stack):
    # A's 600 wait before any worker runs; B's one message comes after them.
    # Served first come first served, B would wait for all 600; round robin
    # with short turns while both wait serves B after a turn or two of A's.
    with open_project(own_stack) as a, open_project(own_stack) as b:
        a1, _ = a.agent("A1"), a.agent("A2")
        b1, b2 = b.agent("B1"), b.agent("B2")
        backlog = _sent(a1, "A2", 600)
        [mine] = _sent(b1, "B2", 1)

        own_stack.start_worker(queues=queue_for("inbox"), beat=False)
        wait_until(lambda: b2.api.inbox()["messages"] and all(
            a1.api.delivery(d)["outcome"] for d in backlog[-5:]), timeout_s=60,
            what="both drained")
        with own_stack.redis() as r:
            b_done = int(r.hget(keys.delivery(b.project_id, mine),
                                "provider_result_recorded_us") or 0)
            pipe = r.pipeline(transaction=False)
            for did in backlog:
                pipe.hget(keys.delivery(a.project_id, did), "provider_result_recorded_us")
            a_done = [int(t) for t in pipe.execute() if t]
        assert b_done and len(a_done) == len(backlog)
        ahead = sum(1 for t in a_done if t < b_done)
        assert ahead <= 50, f"{ahead} of A's deliveries went before B's one"


@pytest.mark.slow
def test_new_mail_of_another_project_cuts_a_running_turn_short(own_stack: Stack):
    # A alone is served whole batches, a take at a time. B's messages, sent
    # at moments spread over A's drain, each wait for the takes under way (one
    # per worker process), never for the rest of the batches they belong to.
    # Counted in A's deliveries: a take is a tenth of a batch (10), two while A
    # is alone and has that much ready, and while B's ticket travels from the
    # API to a worker, A's takes go on: the worst of sixteen was 60-80 in runs
    # on a quiet machine. Waiting for the rest of a batch (100) instead, it
    # would be about 140 or more.
    with open_project(own_stack) as a, open_project(own_stack) as b:
        a1, _ = a.agent("A1"), a.agent("A2")
        b1, _ = b.agent("B1"), b.agent("B2")
        backlog = _sent(a1, "A2", 6000)
        own_stack.start_worker(queues=queue_for("inbox"), beat=False)
        with own_stack.redis() as r:
            wait_until(lambda: int(r.hget(keys.stats(a.project_id), "outcome:accepted")
                                   or 0) >= 100, timeout_s=60, interval_s=0.005,
                       what="A's drain under way")
            mine = []
            for _ in range(16):
                mine += _sent(b1, "B2", 1)
                time.sleep(0.037)
            wait_until(lambda: all(a1.api.delivery(d)["outcome"] for d in backlog[-5:])
                       and all(b1.api.delivery(d)["outcome"] for d in mine), timeout_s=60,
                       what="both drained")
            pipe = r.pipeline(transaction=False)
            for did in backlog:
                pipe.hget(keys.delivery(a.project_id, did), "provider_result_recorded_us")
            a_done = [int(t) for t in pipe.execute()]
            b_times = [r.hmget(keys.delivery(b.project_id, d), "admitted_us",
                               "provider_result_recorded_us") for d in mine]
        assert max(a_done) > max(int(done) for _, done in b_times), "A's drain ended first"
        between = [sum(1 for t in a_done if int(admitted) < t < int(done))
                   for admitted, done in b_times]
        assert max(between) <= 100, f"A's deliveries between B's admission and its: {between}"


def test_a_ticket_whose_turn_empties_a_project_goes_on_to_the_next(own_stack: Stack):
    # Both projects' mail is ready and both are in the ring before any worker runs;
    # their tickets are dropped and one published. Its first turn empties one
    # project; the ticket then serves the other, not only whoever was first.
    with open_project(own_stack) as a, open_project(own_stack) as b:
        a1, _ = a.agent("A1"), a.agent("A2")
        b1, _ = b.agent("B1"), b.agent("B2")
        sent = {a.project_id: _sent(a1, "A2", 3), b.project_id: _sent(b1, "B2", 3)}
        with redis.Redis.from_url(own_stack.broker_url) as broker:
            wait_until(lambda: broker.llen(queue_for("inbox")) >= 2, what="both tickets")
            broker.delete(queue_for("inbox"))
        [ticket] = publish_deliver(own_stack)
        worker = own_stack.start_worker(queues=queue_for("inbox"), beat=False)
        done = wait_until(lambda: ticket in (t := finished_tasks(worker)) and t,
                          what="the one ticket run")
        assert done == {ticket: 6}
        with own_stack.redis() as r:
            for project_id, dids in sent.items():
                assert [r.hget(keys.delivery(project_id, d), "outcome") for d in dids] == [
                    "accepted"] * 3


@pytest.mark.slow
def test_a_flood_of_single_sends_publishes_a_ticket_per_batch_not_per_send(tmp_path: Path):
    # No worker and no sweeper: the broker holds exactly what admission published.
    # 250 sends one after another, each its own publish: 3 batches of 100, so 3 tickets
    # (one per send before), plus one each time the broker was not heard from for
    # RIDE_S; the worker's turns deliver them all.
    stack = make_stack(tmp_path)
    try:
        with open_project(stack) as proj:
            alice, bob = proj.agent("Alice"), proj.agent("Bob")
            start = time.monotonic()
            sent = [send_one(alice)[1] for _ in range(250)]
            took_s = time.monotonic() - start
            with redis.Redis.from_url(stack.broker_url) as broker:
                tickets = int(broker.llen(queue_for("inbox")))
            assert 3 <= tickets <= 3 + int(took_s / RIDE_S) + 1, (tickets, took_s)
            worker = stack.start_worker(queues="deliver.inbox", beat=False)

            def outcomes() -> list[str | None]:
                with stack.redis() as r:
                    pipe = r.pipeline(transaction=False)
                    for did in sent:
                        pipe.hget(keys.delivery(proj.project_id, did), "outcome")
                    return pipe.execute()

            wait_until(lambda: outcomes() == ["accepted"] * 250, timeout_s=60,
                       what="all 250 delivered")
            assert len(bob.api.inbox(limit=100)["messages"]) == 100
            wait_until(lambda: len(finished_tasks(worker)) == tickets, what="every ticket run")
            assert sum(finished_tasks(worker).values()) == 250
    finally:
        stack.stop()


@pytest.mark.slow
def test_a_delivery_waiting_its_turn_is_published_again_less_and_less_often(
        tmp_path: Path):
    # Grace 0.5 s and no inbox worker: without back-off the sweeper would publish
    # the waiting delivery about 12 times in 6 s; doubling graces make it 4.
    stack = make_stack(tmp_path, outbox_grace_s="0.5")
    try:
        with open_project(stack) as proj:
            alice, bob = proj.agent("Alice"), proj.agent("Bob")
            stack.start_worker(queues="courier.sweep")
            answer = alice.api.send(["Bob"], "waits its turn", "x")
            did = answer["delivery"]["observations"][0]["delivery_id"]
            dlv = keys.delivery(proj.project_id, did)
            time.sleep(6.0)
            with stack.redis() as r:
                sweeps = int(r.hget(dlv, "sweeps") or 0)
            with redis.Redis.from_url(stack.broker_url) as broker:
                tickets = int(broker.llen(queue_for("inbox")))
            assert 3 <= sweeps <= 5, sweeps
            # the admission's ticket and one per sweep at most, none lost
            assert 1 <= tickets <= sweeps + 1, (tickets, sweeps)

            stack.start_worker(queues="deliver.inbox", beat=False)
            wait_until(lambda: bob.api.delivery(did)["outcome"] == "accepted",
                       timeout_s=20, what="the delivery accepted")
            assert [m["id"] for m in bob.api.inbox()["messages"]] == [answer["id"]]
            with stack.redis() as r:
                assert r.hget(dlv, "sweeps") is None  # a lease clears the count
    finally:
        stack.stop()


# a worker killed mid-dispatch

# Enough sends (two deliveries each) that a pool can be caught between leasing a
# batch and recording it.
BACKLOG = 400
KILL_LEASE_S = "1"


@pytest.fixture
def short_lease_stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack of this test alone whose inbox leases run out after a second."""
    s = make_stack(tmp_path, inbox_lease_s=KILL_LEASE_S)
    try:
        yield s
    finally:
        s.stop()


def freeze(pids: list[int]) -> None:
    """SIGSTOP these processes and wait until each is stopped."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)

    def stopped(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        return state in ("T", "t", "Z", "X")

    wait_until(lambda: all(stopped(pid) for pid in pids), interval_s=0.001,
               what="the pool to stop")


def thaw(pids: list[int]) -> None:
    """SIGCONT these processes."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.mark.slow
def test_a_worker_killed_mid_dispatch_leaves_each_message_in_each_inbox_once(
    short_lease_stack: Stack,
):
    stack = short_lease_stack
    r = stack.redis()
    try:
        with open_project(stack) as proj:
            alice, bob, carol = proj.agent("Alice"), proj.agent("Bob"), proj.agent("Carol")
            sent = [alice.api.send(["Bob", "Carol"], f"Step {i}", "# Next\n")
                    for i in range(BACKLOG)]
            dids = [o["delivery_id"] for m in sent for o in m["delivery"]["observations"]]

            def field(name: str) -> list[str | None]:
                pipe = r.pipeline(transaction=False)
                for did in dids:
                    pipe.hget(keys.delivery(proj.project_id, did), name)
                return pipe.execute()

            doomed = stack.start_worker(queues=queue_for("inbox"), concurrency=2, beat=False)

            def frozen_mid_dispatch() -> bool:
                pool = children(doomed.popen.pid)
                freeze(pool)
                if "dispatch_started" in field("stage"):
                    return True
                thaw(pool)
                return False

            wait_until(frozen_mid_dispatch, interval_s=0.005, what="a pool frozen mid-dispatch")
            doomed.stop(signal.SIGKILL)
            cut = [d for d, stage in zip(dids, field("stage"), strict=True)
                   if stage == "dispatch_started"]

            stack.start_worker(queues=queue_for("inbox") + ",courier.sweep", concurrency=2)
            wait_until(lambda: set(field("outcome")) == {"accepted"}, timeout_s=20,
                       what="every delivery accepted")

            assert cut
            assert all([a["n"] for a in alice.api.delivery(d)["attempts"]] == [1, 2]
                       for d in cut)
            expected = sorted(m["id"] for m in sent)
            for agent in (bob, carol):
                assert sorted(m["id"] for m in agent.api.iter_inbox(limit=500)) == expected
    finally:
        r.close()
