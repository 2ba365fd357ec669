"""Presence (docs/http-api.md: Projects and agents, Sending warnings) on the real stack.

Exited recipients and lost sources are covered in ``test_send_rules.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from messaging.client import CourierAPIError
from tests.integration.conftest import Project
from tests.stack import ROOT

STATES = ("busy", "idle", "exited", "source_lost")


def test_each_reported_state_shows_in_the_agent_list_with_its_activity(project: Project):
    bob = project.agent("Bob")
    assert bob.row["presence"] == "unknown"
    last = bob.row["last_active_ts"]
    for state in STATES:
        answer = bob.api.set_presence(state)
        (row,) = project.admin.list_agents(project.project_id)
        assert answer == row
        assert row["presence"] == state and row["last_active_ts"] > last
        last = row["last_active_ts"]


@pytest.mark.parametrize("state", ["away", "IDLE", "", None])
def test_a_state_outside_the_four_is_invalid_argument(project: Project, state: str | None):
    bob = project.agent("Bob")
    with pytest.raises(CourierAPIError) as caught:
        bob.api.set_presence(state)  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.code) == (422, "INVALID_ARGUMENT")
    assert caught.value.details["field"] == "state"


def test_only_an_agent_token_reports_presence(project: Project):
    with pytest.raises(CourierAPIError) as caught:
        project.admin.set_presence("idle")
    assert (caught.value.status, caught.value.code) == (403, "FORBIDDEN")


def test_a_recipient_that_never_reported_is_admitted_with_a_warning(project: Project):
    alice, bob, carol = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    carol.api.set_presence("busy")
    sent = alice.api.send(["Bob", "Carol"], "Handoff", "x")
    presence = {o["agent_id"]: o["presence"] for o in sent["delivery"]["observations"]}
    assert presence == {bob.id: "unknown", carol.id: "busy"}
    assert sent["delivery"]["warnings"] == [
        f"{bob.label}: unknown standalone state is not proof of death"]


def test_presence_and_agents_commands(project: Project):
    bob = project.agent("Bob")
    env = {**os.environ, "COURIER_URL": project.stack.api_url, "COLUMNS": "200"}

    def courier(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "messaging.cli", *args], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stderr + done.stdout
        return done.stdout

    assert f"{bob.label}: busy" in courier("presence", "busy", "--token", bob.row["token"])
    table = courier("agents", project.project_id, "--token", project.token)
    (row,) = [line for line in table.splitlines() if bob.label in line]
    columns = ("active", "busy", "inbox")
    assert [w for w in row.split() if w in columns] == list(columns)
