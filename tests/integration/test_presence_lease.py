"""Presence a host reports is a lease: busy and idle read unknown once it runs out,
unless the host reports again; exited stays (docs/agents.md, Presence)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from messaging.client import CourierClient
from tests.stack import Stack, make_stack, wait_until

TTL_S = 1.0


@pytest.fixture(scope="module")
def leased(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose presence reports hold for a second, with a worker for notices."""
    s = make_stack(tmp_path_factory.mktemp("lease"), presence_ttl_s=str(TTL_S))
    try:
        s.start_worker()
        yield s
    finally:
        s.stop()


class Team:
    def __init__(self, stack: Stack) -> None:
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        self.project_id = p["project_id"]
        self.admin = stack.client(p["token"])
        self.clients = [self.admin]
        self.stack = stack

    def agent(self, name: str) -> CourierClient:
        row = self.admin.register_agent(self.project_id, name)
        c = self.stack.client(row["token"])
        self.clients.append(c)
        return c

    def presence(self, name: str) -> str:
        [row] = [a for a in self.admin.list_agents(self.project_id) if a["name"] == name]
        return str(row["presence"])


@pytest.fixture
def team(leased: Stack) -> Iterator[Team]:
    t = Team(leased)
    yield t
    for c in t.clients:
        c.close()


@pytest.mark.parametrize("state", ["busy", "idle"])
def test_a_report_not_renewed_reads_unknown_once_its_lease_runs_out(team: Team, state: str):
    bob = team.agent("Bob")
    bob.set_presence(state)
    assert team.presence("Bob") == state
    wait_until(lambda: team.presence("Bob") == "unknown", timeout_s=TTL_S * 5,
               what="the lease running out")


def test_a_renewed_report_holds_and_exited_never_runs_out(team: Team):
    bob = team.agent("Bob")
    for _ in range(4):
        bob.set_presence("busy")
        time.sleep(TTL_S / 2)
        assert team.presence("Bob") == "busy"
    bob.set_presence("exited")
    time.sleep(TTL_S * 1.5)
    assert team.presence("Bob") == "exited"


def test_an_idle_report_past_its_lease_is_not_idle_for_a_new_subscription(team: Team):
    alice, bob = team.agent("Alice"), team.agent("Bob")
    bob.set_presence("idle")
    assert alice.subscribe_idle("Bob")["state"] == "notified"  # idle now: at once
    wait_until(lambda: team.presence("Bob") == "unknown", timeout_s=TTL_S * 5,
               what="the lease running out")
    carol = team.agent("Carol")
    sub = carol.subscribe_idle("Bob")
    assert sub["state"] == "waiting"  # no longer known to be idle: the next report tells
    bob.set_presence("idle")  # unknown -> idle is a change: the notice fires
    assert carol.subscription(sub["subscription_id"])["state"] == "notified"
