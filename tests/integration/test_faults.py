"""Real faults: SIGKILLed webhook workers, a store killed and restarted from its
AOF, a broker that goes away and comes back."""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tests.stack
from messaging.client import CourierClient
from messaging.launch.embedded import EmbeddedStore
from messaging.store import connect, keys
from tests.receiver import Receiver
from tests.stack import Stack, free_port, make_stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

FINAL = {"accepted", "failed", "unknown"}


def _project(stack: Stack) -> tuple[CourierClient, str]:
    with stack.operator() as op:
        p = op.create_project(f"/srv/{uuid.uuid4().hex}")
    return stack.client(p["token"]), p["project_id"]


@pytest.mark.timeout(240)
def test_killing_webhook_workers_mid_dispatch_leaves_no_delivery_stuck_or_doubled(
        tmp_path: Path, receiver: Receiver):
    stack = make_stack(tmp_path, webhook_timeout_s="2", webhook_lease_margin_s="1",
                       webhook_retry_schedule_s="0.2,0.2")
    admin, project_id = _project(stack)
    try:
        path = "/slow"
        receiver.behaviours[path] = lambda n: (time.sleep(0.15), (200, b"{}"))[1]
        hook = admin.register_agent(project_id, "Hook",
                                    {"kind": "webhook", "url": receiver.url(path)})
        box = admin.register_agent(project_id, "Box")
        alice = stack.client(admin.register_agent(project_id, "Alice")["token"])
        # A kill strands up to a batch per worker process: enough for six.
        sent = [alice.send(["Hook", "Box"], f"job {i}", "go") for i in range(120)]
        queues = "deliver.webhook,deliver.inbox,courier.sweep"
        kills = 0
        for _ in range(6):
            worker = stack.start_worker(queues=queues, concurrency=2)
            inside = receiver.count(path)
            # kill while a request is being answered: inside a dispatch
            wait_until(lambda seen=inside: receiver.count(path) > seen, 20, 0.01,
                       "a request in flight")
            time.sleep(0.05)
            worker.stop(signal.SIGKILL)
            kills += 1
        stack.start_worker(queues=queues, concurrency=2)

        dids = {o["delivery_id"]: o["transport"] for m in sent
                for o in m["delivery"]["observations"]}

        def all_final() -> bool:
            return all(admin.delivery(d)["outcome"] in FINAL for d in dids)

        wait_until(all_final, 120, 0.5, "every delivery to reach an outcome")
        rows = {d: admin.delivery(d) for d in dids}
        per_id = Counter(r.headers["webhook-id"] for r in receiver.requests(path))
        for did, row in rows.items():
            if row["transport"] == "webhook":
                assert per_id[did] <= 1, f"{did} was sent {per_id[did]} times without a redrive"
                if row["outcome"] == "accepted":
                    assert per_id[did] == 1
            else:
                assert row["outcome"] == "accepted"
        with stack.client(box["token"]) as b:
            got = Counter(m["id"] for m in b.iter_inbox(limit=500))
        assert set(got.values()) == {1} and len(got) == len(sent)
        assert kills == 6
        unknown = [d for d, r in rows.items() if r["outcome"] == "unknown"]
        assert unknown, "no kill landed inside a dispatch: the test proved nothing"
        for did in unknown:
            assert "lease ran out" in rows[did]["attempts"][-1]["error"]
        del hook
        alice.close()
    finally:
        admin.close()
        stack.stop()


@pytest.mark.timeout(120)
def test_a_store_killed_and_restarted_from_its_aof_loses_no_admitted_send(tmp_path: Path):
    if tests.stack.STORE != "node":
        pytest.skip("restarts one server from its AOF; tests/integration/cluster kills a node")
    stack = make_stack(tmp_path)
    admin, project_id = _project(stack)
    try:
        alice = stack.client(admin.register_agent(project_id, "Alice")["token"])
        bob = stack.client(admin.register_agent(project_id, "Bob")["token"])
        ids = [alice.send(["Bob"], f"n{i}", f"body {i}")["id"] for i in range(300)]
        # kill -9 right after the last answer: everysec loses nothing to a
        # process crash, only to a machine crash (the last second)
        store = stack.store
        pid = store.pid
        assert pid is not None
        store._proc.kill()  # noqa: SLF001 - a real crash, not a shutdown
        store._proc.wait()  # noqa: SLF001
        store.stop()
        stack.store = EmbeddedStore(store.data_dir, port=store.port)
        stack.store.start()
        stack.start_worker()

        def inbox_ids() -> list[str]:
            try:
                return [m["id"] for m in bob.iter_inbox(limit=500)]
            except Exception:  # the API reconnects on its next request
                return []

        got = wait_until(lambda: len(x := inbox_ids()) == len(ids) and x, 60, 0.2,
                         "every admitted message after the restart")
        assert sorted(got) == sorted(ids)  # each once; arrival order is the workers'
        with stack.redis() as r:
            assert r.config_get("appendfsync")["appendfsync"] == "everysec"
            assert r.zcard(keys.due(project_id)) == 0
        alice.close()
        bob.close()
    finally:
        admin.close()
        stack.stop()


def _where_deliveries_are(stack: Stack, project_id: str) -> str:
    """What a stalled delivery test needs to tell: the project's due and ready
    deliveries, the rings, the broker's queues and the worker's last lines."""
    with stack.redis() as r, connect.sync_client(stack.broker_url) as b:
        rings = {k: r.zrange(k, 0, -1) for k in r.scan_iter(match=keys.ring("*"))}
        due = r.zrange(keys.due(project_id), 0, -1, withscores=True)
        state = {"due": [(did, score, r.hmget(keys.delivery(project_id, did), "stage",
                                              "sweeps", "lease_until_ms"))
                         for did, score in due],
                 "now_ms": int(time.time() * 1000),
                 "ready": r.zrange(keys.ready(project_id, "inbox"), 0, -1),
                 "rings": rings,
                 "broker": {k: b.llen(k) for k in b.scan_iter() if b.type(k) == "list"}}
    workers = [p.tail(60) for p in stack.procs if p.name == "worker"]
    return f"store: {state}\nworker log:\n" + "\n".join(workers)


class BrokerApart:
    """A stack whose broker is a server of its own, to stop and start again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.broker = EmbeddedStore(root / "broker", port=free_port())
        self.broker.start()
        try:
            self.stack = make_stack(root / "stack", broker_url=self.broker.url)
        except BaseException:
            self.broker.stop()
            raise
        try:
            self.admin, self.project_id = _project(self.stack)
        except BaseException:
            self.stack.stop()
            self.broker.stop()
            raise
        self.clients = [self.admin]

    def agent(self, name: str) -> CourierClient:
        """A new agent of the project, as a client closed with the stack."""
        client = self.stack.client(self.admin.register_agent(self.project_id, name)["token"])
        self.clients.append(client)
        return client

    def stop_broker(self) -> None:
        self.broker.stop()

    def start_broker(self) -> None:
        self.broker = EmbeddedStore(self.root / "broker", port=self.broker.port)
        self.broker.start()

    def wait(self, check: Callable[[], object], timeout_s: float, what: str) -> None:
        """``wait_until``, saying where the project's deliveries are if it times out."""
        try:
            wait_until(check, timeout_s, 0.3, what)
        except AssertionError as exc:
            where = _where_deliveries_are(self.stack, self.project_id)
            raise AssertionError(f"{exc}\n{where}") from None

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.stack.stop()
        self.broker.stop()


@pytest.fixture
def apart(tmp_path: Path) -> Iterator[BrokerApart]:
    a = BrokerApart(tmp_path)
    try:
        yield a
    finally:
        a.close()


@pytest.mark.timeout(120)
def test_sends_while_the_broker_is_down_are_admitted_with_a_warning_and_delivered_later(
        apart: BrokerApart):
    apart.stack.start_worker()
    alice = apart.agent("Alice")
    bob = apart.agent("Bob")
    alice.send(["Bob"], "before", "x")
    wait_until(lambda: bob.inbox()["messages"], what="delivery with the broker up")
    apart.stop_broker()
    during = [alice.send(["Bob"], f"during {i}", "x") for i in range(5)]
    assert all(m["persisted"] for m in during)
    warned = wait_until(
        lambda: any("broker" in w for w in alice.send(["Bob"], "probe", "x")["delivery"][
            "warnings"]), 20, 0.3, "the broker warning")
    assert warned
    apart.start_broker()
    want = {m["id"] for m in during}
    apart.wait(lambda: want <= {m["id"] for m in bob.iter_inbox(limit=500)}, 60,
               "the sends made while the broker was down")


@pytest.mark.timeout(120)
def test_a_worker_outlives_a_broker_lost_while_its_task_is_in_flight(
        apart: BrokerApart, receiver: Receiver):
    # The message of a task in flight is unacknowledged: losing the broker then
    # makes the worker restore it while the broker is away, the path on which a
    # Celery release closed the lost connection twice and the worker stopped.
    admin, stack = apart.admin, apart.stack
    receiver.behaviours["/slow"] = lambda n: (time.sleep(3), (200, b"{}"))[1]
    admin.register_agent(apart.project_id, "Hook",
                         {"kind": "webhook", "url": receiver.url("/slow")})
    bob = apart.agent("Bob")
    alice = apart.agent("Alice")
    worker = stack.start_worker("deliver.webhook,deliver.inbox,courier.sweep")
    hooked = alice.send(["Hook"], "slow", "x")
    wait_until(lambda: receiver.count("/slow") >= 1, 20, 0.05, "the webhook in flight")
    apart.stop_broker()
    time.sleep(1)
    apart.start_broker()
    after = alice.send(["Bob"], "after", "x")
    apart.wait(lambda: after["id"] in {m["id"] for m in bob.iter_inbox(limit=50)}, 30,
               "a send made after the broker came back")
    assert worker.alive(), worker.tail(60)
    delivery = hooked["delivery"]["observations"][0]["delivery_id"]
    apart.wait(lambda: admin.delivery(delivery)["outcome"] in FINAL, 30, "the webhook's end")
    assert admin.delivery(delivery)["outcome"] == "accepted"
    assert receiver.count("/slow") == 1
