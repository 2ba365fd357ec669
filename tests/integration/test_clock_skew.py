"""Workers whose clocks are 30 s off, beside one whose clock is right, on one store:
leases, their expiry and retries follow the store's clock, so the skew moves none
of them, and every delivery lands in its inbox once.

The skewed workers are real Celery workers under libfaketime (``FAKETIME`` +30 s
and -30 s, preloaded into the worker and its pool: tests/skewclock.py); each
one's own log shows its clock off by that much before anything is sent. A worker
holds its leases a
while because it runs with ``COURIER_DURABILITY=replica`` on a store with no
replica: each inbox put and each outcome waits the whole
``COURIER_DURABILITY_TIMEOUT_S`` for a copy that never comes, the lease held
meanwhile, as behind a replica that fell behind. A project on a lane is served
by that lane's skewed worker alone; moved back to the shared queues, by the
worker whose clock is right.

Every time below is measured twice: by this process's clock (the real one) and
by the stamps the store put in the records.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import pytest

from messaging.client import CourierClient
from messaging.store import keys
from messaging.store.connect import SyncClient
from tests.integration.conftest import Agent, Project, open_project
from tests.receiver import Receiver
from tests.skewclock import TOLERANCE_S, SkewedClocks, worker_offset_s
from tests.stack import Proc, Stack, served_stack, wait_until

# Stacks and workers of their own, and leases and retries wait out real time: the slow tier.
pytestmark = pytest.mark.slow

SKEW_S = 30
SHIFTS = (SKEW_S, -SKEW_S)
LANES = {SKEW_S: "ahead", -SKEW_S: "behind"}
LEASE_S = 6.0
WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_LEASE_S = LEASE_S  # its timeout and its margin
RETRY_S = 3.0
# How late past its time a step may come: a sweep (every 0.5 s), a ticket, a take, on a
# machine busy with other tests (2.56 s seen); far below the skew, which it must not hide.
SLACK_S = 5.0
# How far this process's first look may trail the event it saw (it polls, and on a
# busy machine a poll comes late): far below the skew, which it must not hide.
LOOK_S = 2.0
# Test 1: each skewed worker holds each inbox lease this long (well within the lease).
HOLD_S = 2.0
# Test 2: longer than the test: the worker holds its leases until it is killed.
HOLD_UNTIL_KILLED_S = 120.0
# How long the receiver keeps a hanging request: past the webhook's timeout.
HANG_S = 10.0
SENDS = 24
SENDS_PER_S = 4.0
POLL_S = 0.02
# What the worker whose clock is right serves.
SHARED_QUEUES = "deliver.inbox,deliver.webhook,courier.sweep"
TASK_RESULT = re.compile(r"succeeded in \S+: '(?P<result>[^']*)'")


# skewed clocks


def hold_env(hold_s: float) -> dict[str, str]:
    """Each of a worker's store writes waits ``hold_s`` for a replica that is not there."""
    return {"COURIER_DURABILITY": "replica", "COURIER_DURABILITY_TIMEOUT_S": str(hold_s)}


def start_skewed(stack: Stack, clocks: SkewedClocks, shift_s: int, queues: str,
                 concurrency: int, hold_s: float = 0.0) -> Proc:
    """A worker serving ``queues`` whose clock is ``shift_s`` off, checked in its own log."""
    clocks.check(stack.env, shift_s)
    proc = stack.start_worker(queues=queues, concurrency=concurrency, beat=False,
                              env={**clocks.env(shift_s), **(hold_env(hold_s) if hold_s else {})})
    offset = worker_offset_s(proc)
    assert abs(offset - shift_s) < TOLERANCE_S, (
        f"the worker's own clock is {offset:+.3f} s off, not {shift_s:+d} s")
    return proc


# reading what happened


def record(stack: Stack, project_id: str, delivery_id: str,
           client: SyncClient | None = None) -> dict[str, Any]:
    """A delivery's record as the store holds it, its attempts decoded."""
    with stack.redis() if client is None else nullcontext(client) as r:
        d: dict[str, Any] = dict(r.hgetall(keys.delivery(project_id, delivery_id)))
    d["attempts"] = json.loads(d.get("attempts") or "[]")
    return d


class Watch:
    """Polls delivery records from a thread of its own and keeps, for each delivery and
    each named condition, when (by this process's clock) it was first seen true."""

    def __init__(self, stack: Stack, conditions: dict[str, Callable[[dict[str, Any]], bool]],
                 ) -> None:
        self.stack, self.conditions = stack, conditions
        self.watched: list[tuple[str, str]] = []
        self.seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def add(self, project_id: str, delivery_id: str) -> None:
        with self._lock:
            self.watched.append((project_id, delivery_id))

    def at(self, delivery_id: str, condition: str, timeout_s: float) -> float:
        """When the condition was first seen for the delivery (waiting up to ``timeout_s``)."""
        return float(wait_until(lambda: self.seen.get((delivery_id, condition)), timeout_s,
                                POLL_S, f"{condition} of {delivery_id}"))

    def _run(self) -> None:
        with self.stack.redis() as client:
            while not self._done.is_set():
                with self._lock:
                    watched = list(self.watched)
                for project_id, delivery_id in watched:
                    d = record(self.stack, project_id, delivery_id, client)
                    now = time.time()
                    for name, holds in self.conditions.items():
                        if (delivery_id, name) not in self.seen and holds(d):
                            self.seen[(delivery_id, name)] = now
                time.sleep(POLL_S)


def accepted_by(proc: Proc, project_id: str) -> int:
    """How many of the project's deliveries a worker's tasks said they recorded accepted."""
    total = 0
    for task in TASK_RESULT.finditer(proc.log.read_text(errors="replace")):
        for part in task["result"].split("; "):
            if part.startswith(f"inbox {project_id}:"):
                total += sum(int(n) for n in re.findall(r"\baccepted (\d+)", part))
    return total


def inbox_ids(agent: Agent) -> list[str]:
    return [m["id"] for m in agent.api.iter_inbox(limit=100)]


def send(sender: Agent, to: str) -> tuple[str, str]:
    """One send; its message id and its delivery id."""
    sent = sender.api.send([to], f"m {uuid.uuid4().hex[:6]}", "x")
    return sent["id"], sent["delivery"]["observations"][0]["delivery_id"]


def first_settled(d: dict[str, Any]) -> dict[str, Any] | None:
    """The record once its first attempt is settled: a retry scheduled, or an outcome."""
    return d if d.get("outcome") or int(d.get("retry_at_ms") or 0) else None


def within(value_s: float, low_s: float, high_s: float) -> bool:
    return low_s <= value_s <= high_s


# the stack


@pytest.fixture(scope="module")
def skew_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Store, API and one worker whose clock is right (with beat), on every shared queue."""
    with served_stack(tmp_path_factory.mktemp("skew"), SHARED_QUEUES,
                      inbox_lease_s=str(LEASE_S), webhook_timeout_s=str(WEBHOOK_TIMEOUT_S),
                      webhook_lease_margin_s=str(WEBHOOK_LEASE_S - WEBHOOK_TIMEOUT_S),
                      webhook_retry_schedule_s=str(RETRY_S)) as s:
        yield s


@pytest.fixture(scope="module")
def clocks(tmp_path_factory: pytest.TempPathFactory) -> SkewedClocks:
    """Shifted clocks for workers (libfaketime and what keeps sleeps working under it)."""
    return SkewedClocks(tmp_path_factory.mktemp("clocks"))


@pytest.fixture
def project(skew_stack: Stack) -> Iterator[Project]:
    with open_project(skew_stack) as made:
        yield made


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(hang_s=HANG_S)
    r.start()
    yield r
    r.stop()


def on_lane(stack: Stack, project_id: str, lane: str | None) -> None:
    """Put the project on a lane, or back on the shared queues with None."""
    with CourierClient(stack.api_url, stack.operator_token) as op:
        op.set_lane(project_id, lane)


def hook(project: Project, receiver: Receiver, behaviour: Callable[[int], Any]) -> str:
    """A webhook agent of the project answering as ``behaviour`` says; its path."""
    path = f"/{uuid.uuid4().hex}"
    receiver.behaviours[path] = behaviour
    project.admin.register_agent(project.project_id, "Hook",
                                 {"kind": "webhook", "url": receiver.url(path)})
    return path


# the tests


def test_a_lease_a_skewed_worker_holds_is_not_taken_again_before_it_ends(
        skew_stack: Stack, clocks: SkewedClocks, project: Project):
    """Three workers on the same queues, two of them 30 s off, each skewed one holding
    every lease it takes for HOLD_S: none is taken again, by any of them."""
    skewed = {shift: start_skewed(skew_stack, clocks, shift, "deliver.inbox,courier.sweep", 1,
                                  HOLD_S) for shift in SHIFTS}
    try:
        bob, alice = project.agent("Bob"), project.agent("Alice")
        sent = []
        for _ in range(SENDS):
            sent.append(send(alice, "Bob"))
            time.sleep(1 / SENDS_PER_S)
        for _, did in sent:
            wait_until(lambda did=did: record(skew_stack, project.project_id, did).get("outcome"),
                       60, 0.1, f"an outcome for {did}")
        right = next(p for p in skew_stack.procs if p.name == "worker")
        workers = {**skewed, 0: right}

        def by_worker() -> dict[int, int]:
            return {shift: accepted_by(proc, project.project_id)
                    for shift, proc in workers.items()}

        # A skewed worker's task line follows its outcome's wait for the replica.
        told = wait_until(lambda: sum((counts := by_worker()).values()) >= SENDS and counts,
                          HOLD_S + SLACK_S, POLL_S, "every task's line")
        records = [record(skew_stack, project.project_id, did) for _, did in sent]
        assert [(d["outcome"], d["fence"], len(d["attempts"])) for d in records] == \
            [("accepted", "1", 1)] * SENDS
        assert sorted(inbox_ids(bob)) == sorted(mid for mid, _ in sent)  # each once
        assert sum(told.values()) == SENDS, told
        assert told[SKEW_S] >= 1 and told[-SKEW_S] >= 1, told
        for proc in skewed.values():
            assert "lease_lost" not in proc.log.read_text(errors="replace")
        held = [(int(d["provider_result_recorded_us"]) - int(d["dispatch_started_us"])) / 1e6
                for d in records]
        print(f"\ndeliveries {SENDS}: by worker (+30 s, -30 s, right) {told}; each "
              f"attempt 1, fence 1; held before its outcome {min(held):.3f}-{max(held):.3f} s "
              f"(lease {LEASE_S:g} s)")
    finally:
        for proc in skewed.values():
            proc.stop()


def test_leases_of_a_skewed_worker_that_dies_are_taken_again_once_they_really_end(
        skew_stack: Stack, clocks: SkewedClocks, receiver: Receiver):
    """Each skewed worker leases an inbox delivery and a webhook request (that hangs) and
    is killed holding both: the inbox delivery is taken again, and the webhook's outcome
    recorded `unknown`, a lease's length after it was taken, not 30 s sooner or later."""
    conditions = {"leased": lambda d: d.get("fence") == "1",
                  "taken again": lambda d: d.get("fence") == "2",
                  "recorded": lambda d: bool(d.get("outcome"))}
    with Watch(skew_stack, conditions) as watch, \
            open_project(skew_stack) as ahead, open_project(skew_stack) as behind:
        projects = {SKEW_S: ahead, -SKEW_S: behind}
        workers, inbox_sent, hooks_sent = {}, {}, {}
        for shift, proj in projects.items():
            on_lane(skew_stack, proj.project_id, LANES[shift])
            lane = LANES[shift]
            workers[shift] = start_skewed(skew_stack, clocks, shift,
                                          f"deliver.inbox.{lane},deliver.webhook.{lane}", 2,
                                          HOLD_UNTIL_KILLED_S)
        for shift, proj in projects.items():
            bob, alice = proj.agent("Bob"), proj.agent("Alice")
            path = hook(proj, receiver, lambda n: "hang")
            inbox_sent[shift] = (bob, *send(alice, "Bob"))
            watch.add(proj.project_id, inbox_sent[shift][2])
            watch.at(inbox_sent[shift][2], "leased", 15)
            hooks_sent[shift] = send(alice, "Hook")[1]
            watch.add(proj.project_id, hooks_sent[shift])
            wait_until(lambda path=path: receiver.count(path), 15, POLL_S, "the webhook request")
        for shift, proc in workers.items():
            proc.stop(signal.SIGKILL)
            on_lane(skew_stack, projects[shift].project_id, None)
        killed_at = time.time()

        told = []
        for shift, proj in projects.items():
            bob, mid, did = inbox_sent[shift]
            leased_at = watch.at(did, "leased", 1)
            taken_at = watch.at(did, "taken again", LEASE_S + SLACK_S + 5)
            d = record(skew_stack, proj.project_id, did)
            stamped_s = (int(d["attempts"][1]["started_us"]) -
                         int(d["attempts"][0]["started_us"])) / 1e6
            real_s = taken_at - leased_at
            assert within(real_s, LEASE_S - LOOK_S, LEASE_S + SLACK_S), (shift, real_s)
            assert within(stamped_s, LEASE_S, LEASE_S + SLACK_S), (shift, stamped_s)
            watch.at(did, "recorded", 10)
            assert inbox_ids(bob) == [mid]  # once, though both workers put it there
            hook_did = hooks_sent[shift]
            recorded_at = watch.at(hook_did, "recorded", WEBHOOK_LEASE_S + SLACK_S + 5)
            h = record(skew_stack, proj.project_id, hook_did)
            hook_stamped_s = (int(h["provider_result_recorded_us"]) -
                              int(h["dispatch_started_us"])) / 1e6
            hook_real_s = recorded_at - watch.at(hook_did, "leased", 1)
            assert h["outcome"] == "unknown" and len(h["attempts"]) == 1
            assert within(hook_real_s, WEBHOOK_LEASE_S - LOOK_S, WEBHOOK_LEASE_S + SLACK_S)
            assert within(hook_stamped_s, WEBHOOK_LEASE_S, WEBHOOK_LEASE_S + SLACK_S)
            told.append(f"{shift:+d} s: inbox taken again after {real_s:.2f} s "
                        f"(stamped {stamped_s:.2f} s), webhook recorded unknown after "
                        f"{hook_real_s:.2f} s (stamped {hook_stamped_s:.2f} s)")
        print(f"\nkilled holding leases of {LEASE_S:g} s, {time.time() - killed_at:.1f} s "
              "before the last was settled:\n" + "\n".join(told))


def test_a_retry_a_skewed_worker_schedules_comes_due_on_the_stores_clock(
        skew_stack: Stack, clocks: SkewedClocks, receiver: Receiver):
    """Each skewed worker makes a webhook's first attempt (answered 503); the project
    then moves to the shared queues, where the worker whose clock is right makes the
    retry when the store says it is due: RETRY_S later, not 30 s sooner or later."""
    def flaky(n: int) -> tuple[int, bytes]:
        return (503, b"{}") if n == 1 else (200, b"{}")

    with open_project(skew_stack) as ahead, open_project(skew_stack) as behind:
        projects = {SKEW_S: ahead, -SKEW_S: behind}
        workers, sent = {}, {}
        try:
            for shift, proj in projects.items():
                on_lane(skew_stack, proj.project_id, LANES[shift])
                workers[shift] = start_skewed(skew_stack, clocks, shift,
                                              f"deliver.webhook.{LANES[shift]}", 1)
            for shift, proj in projects.items():
                path = hook(proj, receiver, flaky)
                sent[shift] = (path, send(proj.agent("Alice"), "Hook")[1])
            # Both records are watched at once, each project moved off its lane as soon
            # as its retry is scheduled: the retry comes due RETRY_S later either way.
            retry_at_ms: dict[int, int] = {}

            def scheduled() -> bool:
                for shift, proj in projects.items():
                    first = None if shift in retry_at_ms else first_settled(
                        record(skew_stack, proj.project_id, sent[shift][1]))
                    if first is not None:
                        assert "outcome" not in first, (
                            f"the {shift:+d} s worker's lease was expired under it: {first}")
                        retry_at_ms[shift] = int(first["retry_at_ms"])
                        on_lane(skew_stack, proj.project_id, None)
                return len(retry_at_ms) == len(projects)

            wait_until(scheduled, 15, POLL_S, "both retries scheduled")
            told = []
            for shift, proj in projects.items():
                path, did = sent[shift]
                wait_until(lambda path=path: receiver.count(path) >= 2, RETRY_S + SLACK_S + 5,
                           POLL_S, f"the retry of the {shift:+d} s worker's attempt")
                first, second = receiver.requests(path)[:2]
                real_s = second.at - first.at
                d = wait_until(lambda proj=proj, did=did: (
                    r := record(skew_stack, proj.project_id, did)).get("outcome") and r, 10,
                    POLL_S, "the retry's outcome")
                ended_ms = int(d["attempts"][0]["ended_us"]) // 1000
                scheduled_s = (int(d["attempts"][1]["started_us"]) // 1000 - ended_ms) / 1000
                assert d["outcome"] == "accepted" and len(d["attempts"]) == 2
                # due exactly the schedule's wait after the store recorded the first attempt
                assert retry_at_ms[shift] - ended_ms == RETRY_S * 1000
                assert within(real_s, RETRY_S, RETRY_S + SLACK_S), (shift, real_s)
                assert within(scheduled_s, RETRY_S, RETRY_S + SLACK_S), (shift, scheduled_s)
                assert receiver.count(path) == 2
                told.append(f"{shift:+d} s: retry {real_s:.2f} s after the first attempt "
                            f"(stamped {scheduled_s:.2f} s)")
            print(f"\nretry schedule {RETRY_S:g} s:\n" + "\n".join(told))
        finally:
            for proc in workers.values():
                proc.stop()
