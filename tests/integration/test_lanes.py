"""Lanes: a busy project's deliveries on queues of its own, served by workers of its own.

A lane with no worker holds its project's mail (visible in GET /v1/projects/{id}
and /metrics) while other projects' mail flows on the shared queues; a lane
worker drains it; moving the project back takes its waiting mail along.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest

from messaging.client import CourierAPIError
from tests.integration.conftest import Agent, Project
from tests.stack import Stack, make_stack, wait_until

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


def metric(stack: Stack, name: str, **labels: str) -> float:
    text = httpx.get(stack.api_url + "/metrics", timeout=10).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and ",".join(sorted(m[1].split(","))) == want:
            return float(m[2])
    return 0.0


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
    assert "on lane cli-lane" in said and "-Q deliver.inbox.cli-lane" in said
    assert proj.admin.project(proj.project_id)["lane"] == "cli-lane"
    assert "shared queues" in courier("lane", proj.project_id, "--off")
    assert proj.admin.project(proj.project_id)["lane"] is None
