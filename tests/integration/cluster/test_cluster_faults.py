"""A cluster node killed (SIGKILL) and restarted: refusals while it is down, then mail again."""

from __future__ import annotations

import os
import signal
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

from messaging.client import CourierAPIError, CourierClient
from messaging.store import keys
from tests.cluster import ClusterNode, EmbeddedCluster
from tests.integration.conftest import Project
from tests.integration.test_delivery_worker import open_project
from tests.stack import Stack, make_stack, wait_until

REFUSED = (503, "STORE_UNAVAILABLE", False)
PROJECT_TRIES = 30  # projects made until one lands on another node than the first

pytestmark = pytest.mark.slow


def node_of(stack: Stack, project: Project) -> ClusterNode:
    assert isinstance(stack.store, EmbeddedCluster)
    with stack.redis() as r:
        port = r.get_node_from_key(keys.project(project.project_id)).port
    [node] = [n for n in stack.store.nodes if n.port == port]
    return node


def refusal(api: CourierClient) -> tuple[int, str, bool | None]:
    """Try a send that must be refused; how it was refused."""
    try:
        api.send(["Bob"], "during", "2")
    except CourierAPIError as exc:
        return exc.status, exc.code, exc.persisted
    raise AssertionError("a send was admitted while the cluster was missing a node")


def cluster_failed(node: ClusterNode) -> bool:
    with redis.Redis(port=node.port, password=node.password, decode_responses=True) as r:
        info: dict[str, Any] = r.cluster("INFO")
        return info["cluster_state"] == "fail"


def admitted_again(api: CourierClient) -> dict[str, Any] | None:
    try:
        return api.send(["Bob"], "after", "3")
    except CourierAPIError as exc:
        assert (exc.status, exc.code) == REFUSED[:2]
        return None


def test_a_killed_node_is_store_unavailable_for_every_project_then_mail_flows_again(
        tmp_path: Path):
    stack = make_stack(tmp_path)
    try:
        stack.start_worker()
        with ExitStack() as projects:
            down = projects.enter_context(open_project(stack))
            for _ in range(PROJECT_TRIES):
                up = projects.enter_context(open_project(stack))
                if node_of(stack, up) is not node_of(stack, down):
                    break
            else:
                raise AssertionError("no project landed on a second node")
            pairs = [(p.agent("Alice"), p.agent("Bob")) for p in (down, up)]
            first = [alice.api.send(["Bob"], "before", "1")["id"] for alice, _ in pairs]
            killed, alive = node_of(stack, down), node_of(stack, up)

            assert killed.pid is not None
            os.kill(killed.pid, signal.SIGKILL)
            # the killed node's project at once; every project once the cluster says so
            assert refusal(pairs[0][0].api) == REFUSED
            wait_until(lambda: cluster_failed(alive), what="the cluster to report the failure")
            assert [refusal(alice.api) for alice, _ in pairs] == [REFUSED, REFUSED]

            killed.stop()
            killed.start()
            assert isinstance(stack.store, EmbeddedCluster)
            stack.store.wait_whole()
            for (alice, bob), sent in zip(pairs, first, strict=True):
                again = wait_until(lambda a=alice: admitted_again(a.api), what="a send again")
                inbox = wait_until(lambda b=bob: len(m := b.api.inbox()["messages"]) == 2 and m,
                                   timeout_s=30, what="both messages in Bob's inbox")
                assert sorted(m["id"] for m in inbox) == sorted([sent, again["id"]])
    finally:
        stack.stop()
