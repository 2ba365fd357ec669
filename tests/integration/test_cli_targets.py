"""``courier`` commands of names and held mail, and the agent tree, on the real stack."""

from __future__ import annotations

import os
import re

from tests.integration.conftest import Project
from tests.integration.test_cli import courier
from tests.stack import wait_until


def test_courier_agents_indents_subagents_under_their_session(project: Project):
    lead = project.agent("Lead")
    planner = project.agent("Planner", parent=lead.id)
    project.agent("Coder", parent=planner.id)
    project.agent("Solo")
    env = {**os.environ, "COURIER_URL": project.stack.api_url, "COLUMNS": "200"}
    shown = courier("agents", project.project_id, "--token", project.token, env=env)
    lines = {m.group(2): len(m.group(1)) for m in re.finditer(
        r"^\W*?( *)(Lead|Planner|Coder|Solo) \[", shown, re.MULTILINE)}
    assert lines["Planner"] == lines["Lead"] + 2 and lines["Coder"] == lines["Lead"] + 4
    assert lines["Solo"] == lines["Lead"]
    order = [m.group(1) for m in re.finditer(r"(Lead|Planner|Coder|Solo) \[", shown)]
    assert order == ["Lead", "Planner", "Coder", "Solo"]


def test_name_allow_names_held_release_and_decline_commands(project: Project):
    alice = project.agent("Alice")
    guarded = project.agent("Guarded", inbound="hold")
    env = {**os.environ, "COURIER_URL": project.stack.api_url, "COLUMNS": "200",
           "COURIER_PROJECT": project.project_id, "COURIER_TOKEN": project.token}
    assert "waits for its first agent" in courier("name", "allow", "Later", "--ttl", "600",
                                                  env=env)
    alice.api.send("Later", "Soon", "x")
    listed = courier("names", env=env)
    assert "Later" in listed and re.search(r"Later\s.*\s1\s", listed)
    first = alice.api.send("Guarded", "Keep", "x")["delivery"]["observations"][0]["delivery_id"]
    second = alice.api.send("Guarded", "Drop", "x")["delivery"]["observations"][0]["delivery_id"]
    shown = courier("held", env=env)
    assert first in shown and second in shown and "Keep" in shown
    assert "released" in courier("release", first, env=env)
    assert "rejected" in courier("decline", second, env=env)
    got = wait_until(lambda: guarded.api.inbox()["messages"], what="the released mail")
    assert [m["subject"] for m in got] == ["Keep"]
    assert first not in courier("held", env=env)
