"""``courier hook codex|gemini|cursor`` fed the payloads those hosts document, run
as the hosts run them, against the real stack (docs/hosts.md): the agent's
presence follows its turns, a turn's end fires its subscribers' idle notices,
and the host always gets the answer that lets it go on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.integration.conftest import Agent, Project
from tests.stack import wait_until

# Each test starts `courier` processes of its own: the slow tier.
pytestmark = pytest.mark.slow

COURIER = [sys.executable, "-m", "messaging.cli"]
HOOK_DEADLINE_S = 2.0

Json = dict[str, Any]

# Codex's notify: the notification is the program's last argument (codex-rs
# hooks/src/legacy_notify.rs, the historical wire shape).
CODEX_TURN_COMPLETE = {
    "type": "agent-turn-complete", "thread-id": "b5f6c1c2-1111-2222-3333-444455556666",
    "turn-id": "12345", "cwd": "/Users/example/project", "client": "codex-tui",
    "input-messages": ["Rename `foo` to `bar` and update the callsites."],
    "last-assistant-message": "Rename complete and verified `cargo build` succeeds."}


def gemini(event: str, **fields: Any) -> Json:
    """A Gemini CLI hook input: the base fields every hook gets, and the event's."""
    return {"session_id": "8f2b7c1e-0d3a-4f5e-9b6c-2a1d4e5f6a7b",
            "transcript_path": "/home/u/.gemini/tmp/p/chats/session.json",
            "cwd": "/home/u/project", "hook_event_name": event,
            "timestamp": "2026-12-07T23:50:00.000Z", **fields}


def cursor(event: str, **fields: Any) -> Json:
    """A Cursor hook input: the common schema of every hook, and the event's."""
    return {"conversation_id": "cdefee2d-2727-4b73-bf77-d9d830f31d2a",
            "generation_id": "26b45fb6-bdea-439c-b2dc-5e97ee00ecea", "model": "gpt-5",
            "hook_event_name": event, "cursor_version": "1.7.2",
            "workspace_roots": ["/home/u/project"], "user_email": None,
            "transcript_path": None, **fields}


def env_for(token: str, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update(COURIER_URL=url, COURIER_TOKEN=token)
    return env


def run_hook(host: str, payload: Json, token: str, url: str,
             ) -> subprocess.CompletedProcess[str]:
    """The hook as its host runs it: Codex appends the JSON as the last argument with
    stdin closed, Gemini CLI and Cursor write it to stdin."""
    if host == "codex":
        argv, stdin = [*COURIER, "hook", "codex", json.dumps(payload)], None
    else:
        argv, stdin = [*COURIER, "hook", host], json.dumps(payload)
    done = subprocess.run(argv, input=stdin, stdin=subprocess.DEVNULL if stdin is None else None,
                          capture_output=True, text=True, env=env_for(token, url), timeout=30)
    assert done.returncode == 0, done.stderr
    return done


def presence(project: Project, agent: Agent) -> str:
    [row] = [a for a in project.admin.list_agents(project.project_id)
             if a["agent_id"] == agent.id]
    return str(row["presence"])


def idle_notices(agent: Agent) -> list[Json]:
    """The idle notices in the agent's inbox, once there is one."""
    found: list[Json] = wait_until(
        lambda: [m for m in agent.api.inbox()["messages"] if m["from"] == "courier"],
        what=f"an idle notice for {agent.label}")
    return found


def test_codex_turn_complete_sets_the_agent_idle_and_fires_the_notice(project: Project):
    alice, codex = project.agent("Alice"), project.agent("Codex")
    codex.api.set_presence("busy")
    alice.api.subscribe_idle("Codex")
    done = run_hook("codex", CODEX_TURN_COMPLETE, codex.row["token"], project.stack.api_url)
    assert presence(project, codex) == "idle"
    assert done.stdout == "" and done.stderr == ""  # Codex reads nothing back
    [notice] = idle_notices(alice)
    assert notice["idle_notice"]["state"] == "idle"
    assert notice["idle_notice"]["target_id"] == codex.id


def test_codex_notifications_other_than_turn_complete_change_nothing(project: Project):
    codex = project.agent("Codex")
    codex.api.set_presence("busy")
    run_hook("codex", {**CODEX_TURN_COMPLETE, "type": "approval-requested"},
             codex.row["token"], project.stack.api_url)
    assert presence(project, codex) == "busy"


def test_gemini_presence_follows_its_session_and_a_turn_end_fires_the_notice(
        project: Project):
    alice, gem = project.agent("Alice"), project.agent("Gemini")
    token, url = gem.row["token"], project.stack.api_url
    assert json.loads(run_hook("gemini", gemini("SessionStart", source="startup"),
                               token, url).stdout) == {}
    assert presence(project, gem) == "idle"
    assert json.loads(run_hook("gemini", gemini("BeforeAgent", prompt="Fix the tests"),
                               token, url).stdout) == {}
    assert presence(project, gem) == "busy"
    alice.api.subscribe_idle("Gemini")
    after = run_hook("gemini", gemini("AfterAgent", prompt="Fix the tests",
                                      prompt_response="Done: 3 tests fixed.",
                                      stop_hook_active=False), token, url)
    assert json.loads(after.stdout) == {} and after.stderr == ""
    assert presence(project, gem) == "idle"
    [notice] = idle_notices(alice)
    assert notice["idle_notice"]["target_id"] == gem.id
    run_hook("gemini", gemini("SessionEnd", reason="exit"), token, url)
    assert presence(project, gem) == "exited"


def test_gemini_clear_ends_no_session(project: Project):
    gem = project.agent("Gemini")
    gem.api.set_presence("idle")
    run_hook("gemini", gemini("SessionEnd", reason="clear"), gem.row["token"],
             project.stack.api_url)
    assert presence(project, gem) == "idle"


def test_cursor_presence_follows_its_conversation_and_stop_fires_the_notice(
        project: Project):
    alice, cur = project.agent("Alice"), project.agent("Cursor")
    token, url = cur.row["token"], project.stack.api_url
    start = run_hook("cursor", cursor("sessionStart", session_id="cdefee2d-2727-4b73-bf77-"
                                      "d9d830f31d2a", is_background_agent=False,
                                      composer_mode="agent"), token, url)
    assert json.loads(start.stdout) == {} and presence(project, cur) == "idle"
    submit = run_hook("cursor", cursor("beforeSubmitPrompt", prompt="Fix the bug in main.ts",
                                       attachments=[]), token, url)
    assert json.loads(submit.stdout) == {"continue": True}
    assert presence(project, cur) == "busy"
    alice.api.subscribe_idle("Cursor")
    stop = run_hook("cursor", cursor("stop", status="completed", loop_count=0), token, url)
    assert json.loads(stop.stdout) == {} and stop.stderr == ""
    assert presence(project, cur) == "idle"
    [notice] = idle_notices(alice)
    assert notice["idle_notice"]["target_id"] == cur.id
    run_hook("cursor", cursor("sessionEnd", session_id="cdefee2d-2727-4b73-bf77-d9d830f31d2a",
                              reason="user_close", duration_ms=45000,
                              is_background_agent=False, final_status="completed"),
             token, url)
    assert presence(project, cur) == "exited"


@pytest.mark.parametrize(("host", "payload", "answer"), [
    ("codex", CODEX_TURN_COMPLETE, None),
    ("gemini", gemini("AfterAgent", prompt="p", prompt_response="r", stop_hook_active=False),
     {}),
    ("cursor", cursor("beforeSubmitPrompt", prompt="p", attachments=[]), {"continue": True}),
])
def test_a_server_that_never_answers_costs_the_host_the_bound_and_lets_it_go_on(
        project: Project, host: str, payload: Json, answer: Json | None):
    agent = project.agent("Agent")
    started = time.monotonic()
    run_hook(host, payload, agent.row["token"], project.stack.api_url)
    baseline_s = time.monotonic() - started  # a whole run: start, answer, exit
    with socket.socket() as hung:  # accepts connections (its backlog), never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        started = time.monotonic()
        done = run_hook(host, payload, agent.row["token"], url)
        took_s = time.monotonic() - started
    assert took_s < baseline_s + HOOK_DEADLINE_S + 1.0, took_s
    assert (json.loads(done.stdout) if done.stdout else None) == answer
    [line] = done.stderr.splitlines()
    assert line.startswith(f"courier hook {host}: ") and "did not answer" in line


def test_a_hook_without_a_token_says_so_and_lets_the_host_go_on(project: Project):
    env = env_for("", project.stack.api_url)
    del env["COURIER_TOKEN"]
    done = subprocess.run([*COURIER, "hook", "cursor"],
                          input=json.dumps(cursor("stop", status="aborted", loop_count=0)),
                          capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0 and json.loads(done.stdout) == {}
    assert "no token" in done.stderr
