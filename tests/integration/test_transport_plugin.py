"""A transport Courier does not ship (tests/plugins/courier-echo, its own distribution,
installed by this module) is registrable, delivered, retried, judged and shown in Flower.

The echo transport can raise a chosen exception at a chosen point of its call:
the hypothesis test throws random ones before and after hand-off into a real
worker on a real store and checks what is recorded.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messaging.client import CourierAPIError, CourierClient
from messaging.launch.embedded import EmbeddedStore
from messaging.store import keys
from tests.plugins.echo import echo_installed
from tests.receiver import Receiver
from tests.stack import Stack, free_port, make_stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

ECHO_POLICY = json.dumps({"echo": {"lease_s": 10, "retry_schedule_s": [0.2, 0.2, 0.2]}})
# Sends (and how long each waits) until Flower lists a delivery task of the project.
WARM_UP_SENDS = 5
WARM_UP_WAIT_S = 4.0
BEFORE = ("start", "before_hand_off")
AFTER = ("after_hand_off", "after_reply")
ERRORS = ("ValueError", "KeyError", "RuntimeError", "OSError", "TypeError",
          "ZeroDivisionError", "MemoryError", "TimeoutError")


@pytest.fixture(scope="module")
def echo_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """courier-echo installed; a stack whose worker serves the echo queue too."""
    with echo_installed():
        # The echo kind's policy is its own: the webhook's settings never reach it.
        s = make_stack(tmp_path_factory.mktemp("echo"), webhook_retry_schedule_s="600",
                       transport_policy=ECHO_POLICY)
        try:
            s.start_worker(queues="deliver.inbox,deliver.echo,courier.sweep", concurrency=2)
            yield s
        finally:
            s.stop()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.start()
    yield r
    r.stop()


class World:
    """A project with a sender and echo recipients."""

    def __init__(self, stack: Stack, receiver: Receiver) -> None:
        self.stack, self.receiver = stack, receiver
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        self.project_id = p["project_id"]
        self.admin = stack.client(p["token"])
        alice = self.admin.register_agent(self.project_id, "Alice")
        self.alice = stack.client(alice["token"])

    def echo(self, name: str, behaviour: Any = None, **extra: Any) -> tuple[str, dict[str, Any]]:
        path = f"/{uuid.uuid4().hex}"
        if behaviour is not None:
            self.receiver.behaviours[path] = behaviour
        row = self.admin.register_agent(self.project_id, name,
                                        {"kind": "echo", "url": self.receiver.url(path), **extra})
        return path, row

    def send(self, *to: str) -> list[str]:
        sent = self.alice.send(list(to), "Handoff", "# Take it\n")
        return [str(o["delivery_id"]) for o in sent["delivery"]["observations"]]

    def settled(self, delivery_id: str, timeout_s: float = 20) -> dict[str, Any]:
        return wait_until(lambda: (d := self.admin.delivery(delivery_id))["outcome"] and d,
                          timeout_s, 0.05, f"an outcome for {delivery_id}")

    def stored(self, delivery_id: str) -> dict[str, str]:
        with self.stack.redis() as r:
            return r.hgetall(keys.delivery(self.project_id, delivery_id))

    def close(self) -> None:
        self.admin.close()
        self.alice.close()


@pytest.fixture
def world(echo_stack: Stack, receiver: Receiver) -> Iterator[World]:
    w = World(echo_stack, receiver)
    yield w
    w.close()


def test_an_installed_transport_is_registrable_and_validated_by_its_own_model(world: World):
    _, row = world.echo("Echo")
    assert row["transport"]["kind"] == "echo"
    listed = {a["name"]: a for a in world.admin.list_agents(world.project_id)}
    assert listed["Echo"]["transport"] == {"kind": "echo", "health": "healthy",
                                           "failures_in_a_row": 0}
    with pytest.raises(CourierAPIError) as e:
        world.admin.register_agent(world.project_id, "Far",
                                   {"kind": "echo", "url": "http://203.0.113.9/x"})
    assert (e.value.status, e.value.code) == (422, "INVALID_ARGUMENT")
    assert e.value.details["field"] == "transport.url"
    with pytest.raises(CourierAPIError) as e:
        world.admin.register_agent(world.project_id, "Odd", {"kind": "carrier-pigeon"})
    assert e.value.details["field"] == "transport.kind"
    names = [a["name"] for a in world.admin.list_agents(world.project_id)]
    assert names == ["Alice", "Echo"]


def test_an_installed_transport_delivers_on_its_own_queue(world: World):
    path, _ = world.echo("Echo")
    [did] = world.send("Echo")
    d = world.settled(did)
    assert d["outcome"] == "accepted" and d["transport"] == "echo"
    [req] = world.receiver.requests(path)
    assert req.headers["echo-id"] == did
    assert json.loads(req.body)["delivery_id"] == did


def test_an_installed_transport_is_retried_by_the_worker(world: World):
    path, _ = world.echo("Flaky", lambda n: (503, b"{}") if n < 3 else (200, b"{}"))
    [did] = world.send("Flaky")
    d = world.settled(did)
    assert d["outcome"] == "accepted"
    assert [a.get("error") for a in d["attempts"]] == ["HTTP 503", "HTTP 503", None]
    assert world.receiver.count(path) == 3


def test_one_bad_delivery_does_not_stall_the_others_of_its_task(world: World):
    good1, _ = world.echo("One")
    world.echo("Broken", fault={"at": "before_hand_off", "error": "KeyError"})
    good2, _ = world.echo("Two")
    dids = world.send("One", "Broken", "Two")
    outcomes = [world.settled(did) for did in dids]
    assert [d["outcome"] for d in outcomes] == ["accepted", "failed", "accepted"]
    assert "KeyError" in outcomes[1]["attempts"][0]["error"]
    assert world.receiver.count(good1) == world.receiver.count(good2) == 1


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(faults=st.lists(st.tuples(st.sampled_from(BEFORE + AFTER + ("none",)),
                                 st.sampled_from(ERRORS), st.text(max_size=40)),
                       min_size=1, max_size=3))
def test_random_exceptions_before_hand_off_are_failed_and_after_are_unknown(
        world: World, faults: list[tuple[str, str, str]]):
    # One send to one to three recipients, each with its own fault: one alone
    # is carried by itself, several at once on threads of their own.
    recipients = []
    for at, error, message in faults:
        fault = None if at == "none" else {"at": at, "error": error, "message": message}
        path, row = world.echo(f"E{uuid.uuid4().hex[:8]}", **({"fault": fault} if fault else {}))
        recipients.append((path, row["label"]))
    dids = world.send(*(label for _, label in recipients))
    for did, (path, _), (at, error, _) in zip(dids, recipients, faults, strict=True):
        d = world.settled(did)
        stored = world.stored(did)
        assert stored["lease_until_ms"] == "0", "nothing is left leased"
        assert len(d["attempts"]) == 1
        if at in BEFORE:
            assert d["outcome"] == "failed", d
            assert d["attempts"][0]["error"].startswith(f"not sent: {error}")
            assert world.receiver.count(path) == 0
        elif at in AFTER:
            # the real outcome was lost with the exception: only uncertainty is true
            assert d["outcome"] == "unknown", d
            assert error in d["attempts"][0]["error"]
        else:
            assert d["outcome"] == "accepted"
            assert world.receiver.count(path) == 1


@pytest.fixture
def flower(echo_stack: Stack) -> Iterator[str]:
    proc, url = echo_stack.start_flower(["-m", "celery", "-A", "workers.app", "flower"],
                                        {"FLOWER_UNAUTHENTICATED_API": "true"})
    yield url
    proc.stop()


def test_flower_shows_the_installed_transport_its_queue_and_what_each_task_did(
        world: World, flower: str):
    world.echo("Echo")
    world.echo("Doomed", fault={"at": "start", "error": "ValueError"})

    def tasks() -> list[dict[str, Any]]:
        # (a task whose "received" event came before Flower listened has no name or args)
        got = httpx.get(flower + "/api/tasks", timeout=5).json()
        return [t for t in got.values() if f"echo {world.project_id}:" in str(t.get("result"))
                and t.get("state") == "SUCCESS"]

    # Flower answers HTTP a moment before it listens to task events: a task that
    # ends before then is never in its list. Warm-up sends until one is.
    warm: set[str] = set()
    for _ in range(WARM_UP_SENDS):
        world.settled(world.send("Echo")[0])
        deadline = time.monotonic() + WARM_UP_WAIT_S
        while not warm and time.monotonic() < deadline:
            warm = {str(t["uuid"]) for t in tasks()}
            time.sleep(0.2)
        if warm:
            break
    assert warm, "Flower never listed a delivery task"

    def new_tasks() -> list[dict[str, Any]]:
        return [t for t in tasks() if str(t["uuid"]) not in warm]

    [ok] = world.send("Echo")
    world.settled(ok)
    [bad] = world.send("Doomed")
    world.settled(bad)
    seen = wait_until(lambda: len(t := new_tasks()) >= 2 and t, 20, 0.2,
                      "flower to see both tasks")
    results = [str(t["result"]) for t in seen]
    assert any("accepted 1" in r for r in results), results
    assert any("failed 1 (all failed)" in r for r in results), results
    queues = wait_until(lambda: httpx.get(flower + "/api/queues/length", timeout=5).json()[
        "active_queues"], 20, 0.2, "flower's queue list")
    assert "deliver.echo" in {q["name"] for q in queues}
    # The sweeper ran every half second all along, and sent Flower nothing.
    every = httpx.get(flower + "/api/tasks", timeout=5).json().values()
    assert not [t for t in every if t.get("name") == "courier.sweep"]


@pytest.mark.timeout(240)
def test_courier_up_starts_a_worker_for_the_installed_transport(
        echo_stack: Stack, receiver: Receiver, tmp_path: Path):
    """No line of Courier names echo: `courier up` finds it and runs its worker."""
    assert echo_stack.api_url  # courier-echo is installed while this module's stack runs
    store = EmbeddedStore(tmp_path / "store", port=free_port())
    store.start()
    api_port = free_port()
    token = "cop_" + secrets.token_urlsafe(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update({"COURIER_REDIS_URL": store.url, "COURIER_DATA_DIR": str(tmp_path / "data"),
                "COURIER_PORT": str(api_port), "COURIER_FLOWER_PORT": str(free_port()),
                "COURIER_OPERATOR_TOKEN": token})
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "messaging.cli", "up"], env=env,
                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    api = f"http://127.0.0.1:{api_port}"

    def said() -> str:
        return log.read_text(errors="replace")

    def ready() -> bool:
        assert up.poll() is None, said()[-4000:]
        if not ("echo@" in said() and said().count(" ready.") >= 3):
            return False
        try:
            return httpx.get(api + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, 90, 0.2, "courier up's workers and API")
        echo_lines = [line for line in said().splitlines() if line.startswith("worker-echo")]
        assert any("exchange=deliver.echo(direct)" in line for line in echo_lines), said()
        with CourierClient(api, token) as op:
            p = op.create_project(f"/srv/up-{uuid.uuid4().hex}")
        path = f"/{uuid.uuid4().hex}"
        with CourierClient(api, p["token"]) as admin:
            alice = admin.register_agent(p["project_id"], "Alice")
            admin.register_agent(p["project_id"], "Echo",
                                 {"kind": "echo", "url": receiver.url(path)})
            with CourierClient(api, alice["token"]) as a:
                [o] = a.send(["Echo"], "Hi", "# via courier up\n")["delivery"]["observations"]
            d = wait_until(lambda: (got := admin.delivery(o["delivery_id"]))["outcome"] and got,
                           60, 0.2, "the echo delivery by courier up's echo worker")
        assert d["outcome"] == "accepted" and receiver.count(path) == 1
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
        try:
            code = up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            raise
        finally:
            store.stop()
    assert code == 0, said()[-4000:]
