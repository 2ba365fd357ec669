"""Lanes: a busy project's deliveries on queues of its own, served by workers of its own.

A lane with no worker holds its project's mail (visible in GET /v1/projects/{id},
/metrics and Flower) while other projects' mail flows on the shared queues; a lane
worker (`courier up --lane NAME`) drains it; moving the project back takes its
waiting mail along.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from messaging import transports
from messaging.client import CourierAPIError
from tests.integration.conftest import Agent, Project
from tests.stack import Proc, Stack, free_port, make_stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

LANE = "busy-1"


@pytest.fixture(scope="module")
def lanes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose only worker serves the shared queues."""
    s = make_stack(tmp_path_factory.mktemp("lanes"))
    try:
        s.start_worker(queues="deliver.inbox,courier.sweep", concurrency=2)
        yield s
    finally:
        s.stop()


MADE: list[Project] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while MADE:
        for c in MADE.pop().clients:
            c.close()


def new_project(stack: Stack) -> tuple[Project, Agent, Agent]:
    key = f"/srv/{uuid.uuid4().hex}"
    with stack.operator() as op:
        p = op.create_project(key)
    proj = Project(stack, p["project_id"], key, p["token"])
    MADE.append(proj)
    return proj, proj.agent("Alice"), proj.agent("Bob")


def send(alice: Agent, n: int) -> list[str]:
    return [alice.api.send(["Bob"], f"m{i}", "# x\n")["delivery"]["observations"][0][
        "delivery_id"] for i in range(n)]


def outcomes(alice: Agent, dids: list[str]) -> list[str | None]:
    return [alice.api.delivery(d)["outcome"] for d in dids]


def metrics_text(stack: Stack, token: str | None = None) -> str:
    """/metrics as ``token`` sees it (None: no token)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(stack.api_url + "/metrics", headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.text


def series(text: str, name: str, **labels: str) -> float:
    """One series' value in a /metrics text (0 when it is not there)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and ",".join(sorted(m[1].split(","))) == want:
            return float(m[2])
    return 0.0


def metric(stack: Stack, name: str, **labels: str) -> float:
    """One series' value in /metrics, as the operator sees it."""
    return series(metrics_text(stack, stack.operator_token), name, **labels)


def test_only_the_operator_moves_a_project_and_lane_names_are_checked(lanes: Stack):
    proj, alice, _ = new_project(lanes)
    with pytest.raises(CourierAPIError) as e:
        proj.admin.set_lane(proj.project_id, LANE)
    assert e.value.status == 403
    with lanes.operator() as op:
        for bad in ("Busy", "a" * 33, "x_y", ""):
            with pytest.raises(CourierAPIError) as e:
                op.set_lane(proj.project_id, bad)
            assert (e.value.status, e.value.code) == (422, "INVALID_ARGUMENT")
        with pytest.raises(CourierAPIError) as e:
            op.set_lane("prj_000000000000", LANE)
        assert e.value.status == 404
    with pytest.raises(CourierAPIError) as e:
        alice.api.project(proj.project_id)
    assert e.value.status == 403
    shown = proj.admin.project(proj.project_id)
    assert shown["lane"] is None and shown["backlog"] == {"inbox": 0, "webhook": 0}


def test_metrics_name_lanes_and_projects_to_the_operator_only(lanes: Stack):
    lane = "unnamed-1"  # no worker serves it: its mail waits in its queue
    busy, alice, _ = new_project(lanes)
    with lanes.operator() as op:
        op.set_lane(busy.project_id, lane)
    send(alice, 4)
    queue = f"deliver.inbox.{lane}"
    wait_until(lambda: metric(lanes, "courier_queue_depth", queue=queue) >= 1,
               what="the lane's queue in the operator's /metrics")
    assert metric(lanes, "courier_project_backlog", project_id=busy.project_id,
                  transport="inbox") == 4
    for token in (None, busy.token, alice.row["token"]):
        text = metrics_text(lanes, token)
        assert lane not in text and busy.project_id not in text, token
        assert "# TYPE courier_project_backlog gauge" in text  # the family, without rows
        # Still counted: the lane's depth is added into its transport's shared queue.
        assert series(text, "courier_queue_depth", queue="deliver.inbox") >= 1, text
        assert "courier_admissions_total" in text and "courier_deliveries_total" in text
    bogus = httpx.get(lanes.api_url + "/metrics", timeout=10,
                      headers={"Authorization": "Bearer cat_bogus"})
    assert bogus.status_code == 401 and bogus.json()["error"]["code"] == "UNAUTHENTICATED"
    with lanes.operator() as op:
        op.set_lane(busy.project_id, None)  # its mail back on the shared queue, delivered


def test_a_lane_holds_its_mail_until_its_worker_runs_and_follows_the_project_back(
        lanes: Stack):
    busy, alice, _ = new_project(lanes)
    other, carol, _ = new_project(lanes)
    with lanes.operator() as op:
        moved = op.set_lane(busy.project_id, LANE)
    assert moved["lane"] == LANE

    held = send(alice, 5)
    flowing = send(carol, 3)
    wait_until(lambda: outcomes(carol, flowing) == ["accepted"] * 3,
               what="the other project's mail on the shared queue")
    assert outcomes(alice, held) == [None] * 5
    assert busy.admin.project(busy.project_id)["backlog"]["inbox"] == 5
    assert metric(lanes, "courier_project_backlog", project_id=busy.project_id,
                  transport="inbox") == 5
    assert metric(lanes, "courier_queue_depth", queue=f"deliver.inbox.{LANE}") >= 1

    worker = lanes.start_worker(queues=f"deliver.inbox.{LANE}", concurrency=1, beat=False)
    wait_until(lambda: outcomes(alice, held) == ["accepted"] * 5, what="the lane worker")
    assert busy.admin.project(busy.project_id)["backlog"]["inbox"] == 0

    worker.stop()
    waiting = send(alice, 4)
    wait_until(lambda: busy.admin.project(busy.project_id)["backlog"]["inbox"] == 4,
               what="the project's mail to wait on its lane")
    with lanes.operator() as op:
        back = op.set_lane(busy.project_id, None)
    assert back["lane"] is None
    wait_until(lambda: outcomes(alice, waiting) == ["accepted"] * 4,
               what="the waiting mail to follow the project back to the shared queue")


def test_courier_lane_command_moves_a_project(lanes: Stack):
    proj, _, _ = new_project(lanes)
    env = {**lanes.env, "COURIER_URL": lanes.api_url}

    def courier(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "messaging.cli", *args], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    said = courier("lane", proj.project_id, "cli-lane")
    assert "on lane cli-lane" in said and "courier up --lane cli-lane" in said
    assert proj.admin.project(proj.project_id)["lane"] == "cli-lane"
    assert "shared queues" in courier("lane", proj.project_id, "--off")
    assert proj.admin.project(proj.project_id)["lane"] is None


@pytest.fixture
def flower(lanes: Stack) -> Iterator[tuple[str, tuple[str, str]]]:
    """Courier's Flower (``messaging.launch.flower``) on the stack; its URL and credentials."""
    proc, url = lanes.start_flower(["-m", "messaging.launch.flower"])
    yield url, ("operator", lanes.operator_token)
    proc.stop()


def lane_workers(stack: Stack, lane: str, *options: str) -> Proc:
    """`courier up --lane NAME [options]` against the stack's store; once each of its
    workers is ready."""
    proc = stack.spawn("lane", ["-m", "messaging.cli", "up", "--lane", lane, *options])

    def ready() -> bool:
        if not proc.alive():
            raise AssertionError(f"courier up --lane died:\n{proc.tail()}")
        return proc.log.read_text(errors="replace").count(" ready.") == len(
            transports.installed())

    wait_until(ready, 60, 0.2, "the lane's workers")
    return proc


def test_flower_lists_a_lane_queue_without_a_worker_and_courier_up_lane_drains_it(
        lanes: Stack, flower: tuple[str, tuple[str, str]]):
    url, auth = flower
    lane = f"fl-{uuid.uuid4().hex[:8]}"  # made after Flower started

    def flower_queues() -> dict[str, int]:
        got = httpx.get(url + "/api/queues/length", auth=auth, timeout=10)
        assert got.status_code == 200, got.text
        return {q["name"]: q["messages"] for q in got.json()["active_queues"]}

    def workers() -> dict[str, Any]:
        got: dict[str, Any] = httpx.get(url + "/api/workers?refresh=1", auth=auth,
                                        timeout=10).json()
        return got

    # Flower knows a running worker: its own list is that worker's queues alone.
    wait_until(workers, 30, 0.5, "Flower to see the shared worker")
    busy, alice, _ = new_project(lanes)
    other, carol, _ = new_project(lanes)
    with lanes.operator() as op:
        op.set_lane(busy.project_id, lane)
    held = send(alice, 3)
    flowing = send(carol, 2)
    wait_until(lambda: outcomes(carol, flowing) == ["accepted"] * 2,
               what="the other project's mail on the shared queue")
    queue = f"deliver.inbox.{lane}"
    waiting = wait_until(lambda: flower_queues().get(queue), 20, 0.2,
                         f"Flower to list {queue} with its tickets")
    assert waiting >= 1
    assert outcomes(alice, held) == [None] * 3
    assert f"deliver.webhook.{lane}" in flower_queues()
    broker = httpx.get(url + "/broker", auth=auth, timeout=10)
    assert broker.status_code == 200 and queue in broker.text
    assert not any(queue in str(w.get("active_queues")) for w in workers().values())

    worker = lane_workers(lanes, lane, "--concurrency", "1")
    wait_until(lambda: outcomes(alice, held) == ["accepted"] * 3, what="the lane's workers")
    said = worker.log.read_text(errors="replace")
    assert f"inbox.{lane}@" in said and f"webhook.{lane}@" in said
    # Each of them one process, not the two the transports declare.
    assert said.count("concurrency: 1 (prefork)") == len(transports.installed()), said
    assert f"exchange=deliver.inbox.{lane}(direct)" in said
    assert "exchange=courier.sweep" not in said  # the sweeper stays with the shared workers
    wait_until(lambda: flower_queues()[queue] == 0, 20, 0.2, f"{queue} drained in Flower")
    served = wait_until(
        lambda: [n for n, w in workers().items() if queue in str(w.get("active_queues"))],
        30, 0.5, "Flower to see the lane's worker")
    assert [n.partition("@")[0] for n in served] == [f"inbox.{lane}"]

    worker.popen.send_signal(signal.SIGTERM)
    assert worker.popen.wait(30) == 0, worker.tail()
    assert "stopping" in worker.log.read_text(errors="replace")


def test_courier_up_lane_refuses_a_bad_lane_name_and_an_unreachable_store(lanes: Stack):
    env = {**lanes.env}
    bad = subprocess.run([sys.executable, "-m", "messaging.cli", "up", "--lane", "Bad_Name"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "bad lane name 'Bad_Name'" in bad.stdout, bad
    env["COURIER_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    down = subprocess.run([sys.executable, "-m", "messaging.cli", "up", "--lane", "ok"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 1, down
    assert "did not answer" in down.stdout and "set COURIER_REDIS_URL" in down.stdout, down
    assert " ready." not in down.stdout
