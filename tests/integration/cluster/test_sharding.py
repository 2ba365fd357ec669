"""What only a cluster shows: projects spread over the nodes, each project on one slot."""

from __future__ import annotations

import uuid

import pytest
from redis.cluster import RedisCluster

from messaging.store import keys
from tests.integration.conftest import Project
from tests.stack import CLUSTER_NODES, Stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

PROJECTS = 12  # all on one of three nodes by chance: 3 * (1/3)**12, about 1 in 177,000


def cluster_client(stack: Stack) -> RedisCluster:
    client = stack.redis()
    assert isinstance(client, RedisCluster), stack.store.url
    return client


def test_the_store_is_a_cluster_of_three_primaries(stack: Stack):
    with cluster_client(stack) as r:
        assert stack.store.url.startswith("redis+cluster://")
        assert len(r.get_primaries()) == CLUSTER_NODES
        assert stack.broker_url != stack.store.url  # Celery has a plain server of its own


def test_projects_are_spread_over_the_nodes(stack: Stack):
    with stack.operator() as op:
        pids = [op.create_project(f"/srv/checkouts/{uuid.uuid4().hex}")["project_id"]
                for _ in range(PROJECTS)]
    with cluster_client(stack) as r:
        nodes = {r.get_node_from_key(keys.project(pid)).name for pid in pids}
        assert len(nodes) >= 2
        assert set(r.smembers(keys.PROJECTS)) >= set(pids)


def test_every_key_of_a_used_project_sits_in_its_project_s_slot(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    alice.api.subscribe_idle("Bob")
    sent = alice.api.send(["Bob"], "Handoff", "# Next\n")
    wait_until(lambda: bob.api.inbox()["messages"], what="the message in Bob's inbox")
    bob.api.mark_read(sent["id"])
    bob.api.set_presence("idle")  # the idle notice: a message, a delivery, events
    wait_until(lambda: [m for m in alice.api.inbox()["messages"] if m["from"] == "courier"],
               what="the idle notice in Alice's inbox")

    with cluster_client(project.stack) as r:
        found = list(r.scan_iter(match=f"*{project.project_id}*", count=1000))
        slot = r.keyslot(keys.project(project.project_id))
        assert len(found) > 10  # the pattern does find the project's keys
        assert {k: r.keyslot(k) for k in found} == {k: slot for k in found}
