"""Single-line texts refuse C0 and C1 control characters and DEL on every face.

A host may type a subject, a name or an id into a terminal or put it in an
environment, where ESC, NUL, Ctrl-U (``\\x15``), DEL or a C1 CSI (``\\x9b``)
act instead of being read. Every such field is 422 ``INVALID_ARGUMENT``
naming it, nothing stored, on REST (the send layer's direct path and FastAPI's
handler), MCP and the CLI; ``body_md`` keeps every character.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Agent, Project
from tests.integration.test_mcp import mcp

Json = dict[str, Any]
CONTROLS = {"NUL": "\x00", "ESC": "\x1b", "Ctrl-U": "\x15", "DEL": "\x7f", "CSI": "\x9b"}
DIRECT = "application/json"
FASTAPIS = "application/merge-patch+json"  # JSON too, handed on to FastAPI's handler


def _subject(ch: str) -> str:
    return f"FYI{ch}touch /tmp/pwned #"


def _post(agent: Agent, path: str, body: Json, content_type: str = DIRECT) -> httpx.Response:
    return agent.api.http.post(path, content=json.dumps(body).encode(),
                               headers={"Content-Type": content_type})


def _refused(answer: Json, field: str) -> None:
    assert answer["persisted"] is False, answer
    assert answer["error"]["code"] == "INVALID_ARGUMENT", answer
    assert answer["error"]["details"]["field"] == field, answer
    assert "control characters" in answer["error"]["message"], answer


def _tool(project: Project, agent: Agent, tool: str, **args: Any) -> tuple[bool, Json]:
    async def run() -> tuple[bool, Json]:
        async with mcp(project, agent) as tools:
            return await tools.raw(tool, **args)

    return asyncio.run(run())


@pytest.mark.parametrize("content_type", [DIRECT, FASTAPIS], ids=["direct", "fastapi"])
@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_subject_with_a_control_character_is_refused_over_rest_and_nothing_stored(
        project: Project, name: str, content_type: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    r = _post(alice, "/v1/messages", {"to": ["Bob"], "subject": _subject(CONTROLS[name]),
                                      "body_md": "x"}, content_type)
    assert r.status_code == 422, r.text
    _refused(r.json(), "subject")
    assert bob.api.inbox()["messages"] == []


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_subject_with_a_control_character_is_a_tool_error_over_mcp(project: Project,
                                                                     name: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = {"to": ["Bob"], "subject": _subject(CONTROLS[name]), "body_md": "x"}
    rest = _post(alice, "/v1/messages", body).json()
    error, answer = _tool(project, alice, "send_message", **body)
    assert error is True
    _refused(answer, "subject")
    assert answer == rest  # the same error object on both faces
    assert bob.api.inbox()["messages"] == []


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_reply_subject_with_a_control_character_is_refused(project: Project, name: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(["Bob"], "Plan", "# Plan")
    r = _post(bob, f"/v1/messages/{sent['id']}/reply",
              {"body_md": "ok", "subject": _subject(CONTROLS[name])})
    assert r.status_code == 422, r.text
    _refused(r.json(), "subject")
    assert [m["id"] for m in alice.api.inbox()["messages"]] == []


# Every single-line text of a send, each with an ESC in it, and the field the error names.
SEND_FIELDS: dict[str, tuple[Json, str]] = {
    "a to entry": ({"to": ["Bob\x1b[2J"]}, "to.0"),
    "an agent id in to": ({"to": ["agt_\x1b"]}, "to.0"),
    "a label in to": ({"to": ["Bob\x15 [abcdef]"]}, "to.0"),
    "a cc entry": ({"cc": ["Bob\x00"]}, "cc.0"),
    "a bcc entry": ({"bcc": ["\x9bBob"]}, "bcc.0"),
    "sender_name": ({"sender_name": "Alice\x1b"}, "sender_name"),
    "idempotency_key": ({"idempotency_key": "k\x1b1"}, "idempotency_key"),
    "project_key": ({"project_key": "/srv/x\x00"}, "project_key"),
    "summary": ({"summary": "label\x7f"}, "summary"),
    "topic": ({"topic": "t\x1b"}, "topic"),
    "thread_id": ({"thread_id": "msg_\x1b"}, "thread_id"),
    "importance": ({"importance": "high\x1b"}, "importance"),
}


@pytest.mark.parametrize("case", sorted(SEND_FIELDS))
def test_every_single_line_field_of_a_send_refuses_control_characters(project: Project,
                                                                      case: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    extra, field = SEND_FIELDS[case]
    r = _post(alice, "/v1/messages", {"to": ["Bob"], "subject": "s", "body_md": "b", **extra})
    assert r.status_code == 422, r.text
    answer = r.json()
    assert answer["persisted"] is False and answer["error"]["code"] == "INVALID_ARGUMENT"
    assert answer["error"]["details"]["field"] == field, answer
    assert bob.api.inbox()["messages"] == []


@pytest.mark.parametrize(("fields", "field"), [
    ({"name": "Bob\x1b"}, "name"),
    ({"bound_source": {"kind": "tmux", "title": "pane\x15"}}, "bound_source.title"),
    ({"bound_source": {"kind": "tmux\x00"}}, "bound_source.kind"),
    ({"program": "claude\x9b"}, "program"),
    ({"model": "m\x7f"}, "model"),
], ids=["name", "bound_source.title", "bound_source.kind", "program", "model"])
def test_an_agent_registration_with_a_control_character_is_refused_and_no_agent_made(
        project: Project, fields: Json, field: str):
    body = {"name": "Carol", "transport": {"kind": "inbox"}, **fields}
    r = project.admin.http.post(f"/v1/projects/{project.project_id}/agents", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"]["field"] == field
    assert project.admin.list_agents(project.project_id) == []


def test_a_subscription_target_with_a_control_character_is_refused(project: Project):
    alice = project.agent("Alice")
    project.agent("Bob")
    r = alice.api.http.post("/v1/subscriptions", json={"target": "Bob\x1b"})
    assert r.status_code == 422, r.text
    _refused(r.json(), "target")


def test_a_short_send_keeps_its_body_exact_and_makes_its_subject_without_controls(
        project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    text = "FYI\x15touch /tmp/pwned #\n\x1b[31mred\x00\r\n"
    error, answer = _tool(project, alice, "send", to="Bob", message=text)
    assert error is False, answer
    stored = bob.api.get_message(answer["id"])
    assert stored["body_md"] == text
    assert stored["subject"] == "FYItouch /tmp/pwned #"


def test_body_md_is_stored_byte_for_byte_controls_included(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = "tab\there\r\nNUL\x00 ESC\x1b[2J DEL\x7f CSI\x9b2J \u2028end"
    sent = alice.api.send(["Bob"], "Body kept as written", body)
    assert bob.api.get_message(sent["id"])["body_md"] == body


@pytest.mark.slow  # it runs the CLI, a process of its own
# Not NUL: no program's argument can hold one (the CLI never gets to send it).
@pytest.mark.parametrize("name", sorted(set(CONTROLS) - {"NUL"}))
def test_the_cli_relays_the_refusal_exits_2_and_sends_nothing(project: Project, name: str):
    from tests.integration.test_cli import COURIER, client_env

    alice, bob = project.agent("Alice"), project.agent("Bob")
    done = subprocess.run([*COURIER, "send", "--to", "Bob", "--subject", _subject(CONTROLS[name]),
                           "--body", "x", "--token", alice.row["token"]],
                          capture_output=True, text=True, env=client_env(project), timeout=60)
    assert done.returncode == 2, done.stderr + done.stdout  # usage: an invalid argument
    assert "INVALID_ARGUMENT" in done.stderr and "subject" in done.stderr, done.stderr
    assert CONTROLS[name] not in done.stderr  # the error is shown safely too
    assert bob.api.inbox()["messages"] == []
