"""``courier hook claude-code`` fed Claude Code's hook payloads in a session's order,
against the real stack, and ``courier hook install`` on a project's settings
(docs/hosts.md)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Agent, Project
from tests.stack import wait_until

# Each test starts `courier` processes of its own: the slow tier.
pytestmark = pytest.mark.slow

COURIER = [sys.executable, "-m", "messaging.cli"]
HOOK_DEADLINE_S = 2.0

Json = dict[str, Any]


class Session:
    """A Claude Code session as its hooks see it: one session id, the hook run as
    Claude Code runs it (the event's JSON on stdin, its answer read from stdout)."""

    def __init__(self, project: Project, tmp: Path, url: str | None = None) -> None:
        self.project, self.id = project, str(uuid.uuid4())
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
        self.env.update(COURIER_URL=url or project.stack.api_url, COURIER_TOKEN=project.token,
                        COURIER_PROJECT=project.project_id, COURIER_AGENT_NAME="Builder",
                        COURIER_HOOK_STATE_DIR=str(tmp / "hook-state"))
        self.cwd = tmp
        self.stderr = ""

    def hook(self, event: str, **fields: Any) -> Json:
        payload = {"session_id": self.id, "transcript_path": str(self.cwd / "t.jsonl"),
                   "cwd": str(self.cwd), "permission_mode": "default",
                   "hook_event_name": event, **fields}
        done = subprocess.run([*COURIER, "hook", "claude-code"], input=json.dumps(payload),
                              capture_output=True, text=True, env=self.env, timeout=30)
        assert done.returncode == 0, done.stderr
        self.stderr = done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else {}


def context_of(answer: Json) -> str:
    return str(answer.get("hookSpecificOutput", {}).get("additionalContext", ""))


def builder(project: Project) -> Json:
    [row] = [a for a in project.admin.list_agents(project.project_id) if a["name"] == "Builder"]
    return row


def arrived(project: Project, message: Json) -> None:
    did = message["delivery"]["observations"][0]["delivery_id"]
    wait_until(lambda: project.admin.delivery(did)["outcome"] == "accepted",
               what=f"{message['id']} in the inbox")


def stage(project: Project, message: Json) -> str:
    did = message["delivery"]["observations"][0]["delivery_id"]
    return str(project.admin.delivery(did)["stage"])


def test_a_session_gets_its_mail_once_and_its_presence_follows_its_turns(
        project: Project, tmp_path: Path):
    alice: Agent = project.agent("Alice")
    s = Session(project, tmp_path)
    assert s.hook("SessionStart", source="startup", model="claude-sonnet-4-5") == {}
    me = builder(project)
    assert me["presence"] == "busy" and me["bound_source"]["kind"] == "claude-code"

    first = alice.api.send("Builder", "Take the auth task", "Start with `auth.py`.\n")
    quiet = alice.api.send("Builder", "FYI", "no need to look", notification_policy="quiet")
    arrived(project, first)
    arrived(project, quiet)
    shown = context_of(s.hook("UserPromptSubmit", prompt="carry on"))
    assert f'from="{alice.label}"' in shown and "Start with `auth.py`." in shown
    assert f'message_id="{first["id"]}"' in shown and "not your user's instruction" in shown
    assert "no need to look" not in shown
    assert s.hook("PostToolUse", tool_name="Bash", tool_input={"command": "ls"},
                  tool_response={"stdout": "auth.py"}) == {}  # shown once only
    assert stage(project, first) == "delivery_observed"
    assert stage(project, quiet) == "provider_result_recorded"

    # Mail that arrives while the agent works holds its stop once.
    alice.api.subscribe_idle("Builder")
    second = alice.api.send("Builder", "One more", "Also `session.py`.\n")
    arrived(project, second)
    blocked = s.hook("Stop", stop_hook_active=False)
    assert blocked["decision"] == "block" and "Also `session.py`." in blocked["reason"]
    assert builder(project)["presence"] == "busy"
    assert s.hook("Stop", stop_hook_active=True) == {}
    assert builder(project)["presence"] == "idle"
    notices = wait_until(lambda: [m for m in alice.api.inbox()["messages"]
                                  if m["from"].startswith("courier")], what="the idle notice")
    assert len(notices) == 1

    assert s.hook("UserPromptSubmit", prompt="next") == {}
    assert s.hook("Stop", stop_hook_active=False) == {}  # nothing new: the stop goes through
    s.hook("SessionEnd", reason="prompt_input_exit")
    assert builder(project)["presence"] == "exited"
    # The quiet message waits in the inbox for a read of its own.
    [me_row] = [a for a in project.admin.list_agents(project.project_id)
                if a["name"] == "Builder"]
    assert me_row["agent_id"] == me["agent_id"]


def test_a_resumed_session_keeps_its_agent_and_a_subagent_gets_one_under_it(
        project: Project, tmp_path: Path):
    alice = project.agent("Alice")
    s = Session(project, tmp_path)
    s.hook("SessionStart", source="startup")
    s.hook("SessionEnd", reason="other")
    sent = alice.api.send("Builder", "While you were away", "Pick this up.\n")
    arrived(project, sent)
    resumed = context_of(s.hook("SessionStart", source="resume"))
    assert "Pick this up." in resumed
    assert len([a for a in project.admin.list_agents(project.project_id)
                if a["name"] == "Builder"]) == 1

    s.hook("SubagentStart", agent_id="sub-1", agent_type="Explore")
    [sub] = [a for a in project.admin.list_agents(project.project_id) if a["name"] == "Explore"]
    assert sub["parent"] == builder(project)["agent_id"] and sub["presence"] == "busy"
    s.hook("SubagentStop", agent_id="sub-1", agent_type="Explore", stop_hook_active=False)
    assert [a["presence"] for a in project.admin.list_agents(project.project_id)
            if a["name"] == "Explore"] == ["idle"]


def _hanging_server() -> tuple[socket.socket, str]:
    """A listener that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_server_that_does_not_answer_costs_the_hook_its_bound_and_exit_0(
        project: Project, tmp_path: Path):
    started = time.monotonic()
    Session(project, tmp_path).hook("SessionStart", source="startup")
    baseline_s = time.monotonic() - started  # a whole run: start, answer, exit
    listener, url = _hanging_server()
    try:
        for target in (url, "http://127.0.0.1:9"):  # hangs; refuses
            s = Session(project, tmp_path, url=target)
            started = time.monotonic()
            assert s.hook("UserPromptSubmit", prompt="hello") == {}
            took_s = time.monotonic() - started
            assert took_s < baseline_s + HOOK_DEADLINE_S + 0.5, took_s
            assert "courier hook:" in s.stderr and "goes on without Courier" in s.stderr
    finally:
        listener.close()


# installing the hooks

USERS_SETTINGS = {
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "PostToolUse": [{"matcher": "Edit|Write",
                         "hooks": [{"type": "command", "command": "npx prettier --write"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "./notify-me.sh"}]}],
    },
}
USERS_MCP = {"mcpServers": {"files": {"command": "npx", "args": ["files-server"]}}}


def courier(*args: str, cwd: Path) -> str:
    done = subprocess.run([*COURIER, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_install_merges_with_the_users_hooks_and_uninstall_restores_them(tmp_path: Path):
    settings, mcp = tmp_path / ".claude" / "settings.json", tmp_path / ".mcp.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(USERS_SETTINGS, indent=4))
    mcp.write_text(json.dumps(USERS_MCP))
    for _ in range(2):  # idempotent
        courier("hook", "install", "claude-code", "--project", str(tmp_path), cwd=tmp_path)
    installed = json.loads(settings.read_text())
    assert installed["permissions"] == USERS_SETTINGS["permissions"]
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SubagentStop",
                  "SessionEnd"):
        ours = [h for g in installed["hooks"][event] for h in g["hooks"]
                if h["command"].endswith("hook claude-code")]
        assert len(ours) == 1, event
    assert installed["hooks"]["PostToolUse"][0] == USERS_SETTINGS["hooks"]["PostToolUse"][0]
    assert installed["hooks"]["Stop"][0] == USERS_SETTINGS["hooks"]["Stop"][0]
    servers = json.loads(mcp.read_text())["mcpServers"]
    assert servers["files"] == USERS_MCP["mcpServers"]["files"]
    assert servers["courier"]["args"][-1] == "mcp"

    courier("hook", "uninstall", "claude-code", "--project", str(tmp_path), cwd=tmp_path)
    assert json.loads(settings.read_text()) == USERS_SETTINGS
    assert json.loads(mcp.read_text()) == USERS_MCP


def test_install_into_a_project_without_settings_and_out_again_leaves_nothing(
        tmp_path: Path):
    courier("hook", "install", "claude-code", cwd=tmp_path)
    assert (tmp_path / ".claude" / "settings.json").exists() and (tmp_path / ".mcp.json").exists()
    courier("hook", "uninstall", "claude-code", cwd=tmp_path)
    assert not (tmp_path / ".claude" / "settings.json").exists()
    assert not (tmp_path / ".mcp.json").exists()
