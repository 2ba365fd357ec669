"""The same bad request reads the same on REST and MCP: one error object, field by field.

Each case is sent as ``POST /v1/messages`` (or a reply) and as the matching MCP
tool call, by the same agent; the error objects (code, message, details) and
``persisted`` must be equal. Nothing is stored either way.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integration.conftest import Agent, Project
from tests.integration.test_mcp import mcp

Json = dict[str, Any]
SEND = {"to": ["Bob"], "subject": "Plan", "body_md": "# Plan"}

BAD_SENDS: dict[str, Json] = {
    "an unknown field": {**SEND, "colour": "red"},
    "no recipient": {"subject": "s", "body_md": "b"},
    "a number for a list": {**SEND, "to": 5},
    "a string for a boolean": {**SEND, "ack_required": "true"},
    "a nested wrong type": {"to": ["Bob"], "resource_notice": {"resource_id": 5}},
    "an unknown importance": {**SEND, "importance": "huge"},
    "two lines of subject": {**SEND, "subject": "a\nb"},
    "a subject too long": {**SEND, "subject": "s" * 300},
    "an empty recipient": {**SEND, "to": [""]},
    "a quiet urgent send": {**SEND, "importance": "urgent", "notification_policy": "quiet"},
    "no such recipient": {**SEND, "to": ["Nobody"]},
    "a sender that is not the token's": {**SEND, "sender_name": "Bob"},
    "a thread nobody started": {**SEND, "thread_id": "thr_nothing"},
    "a notice with a subject": {"to": ["Bob"], "subject": "s", "idempotency_key": "n-1",
                                "resource_notice": {"resource_id": "db", "phase_id": "p1",
                                                    "state": "released",
                                                    "next_action": "none"}},
}


def _rest(project: Project, agent: Agent, path: str, body: Json) -> Json:
    r = project.client(agent.row["token"]).http.post(path, json=body)
    assert r.status_code >= 400, r.text
    answer: Json = r.json()
    return answer


def _mcp(project: Project, agent: Agent, tool: str, args: Json) -> Json:
    async def run() -> tuple[bool, Json]:
        async with mcp(project, agent) as tools:
            return await tools.raw(tool, **args)

    error, body = asyncio.run(run())
    assert error, body
    return body


@pytest.mark.parametrize("case", sorted(BAD_SENDS))
def test_a_bad_send_is_the_same_error_on_rest_and_mcp(project: Project, case: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    rest = _rest(project, alice, "/v1/messages", BAD_SENDS[case])
    tool = _mcp(project, alice, "send_message", BAD_SENDS[case])
    assert rest["persisted"] is False
    assert tool["persisted"] == rest["persisted"]
    for field in ("code", "message", "details"):
        assert tool["error"][field] == rest["error"][field], field
    assert bob.api.inbox()["messages"] == []  # nothing was sent either way


@pytest.mark.parametrize(("case", "body"), [
    ("no body", {}),
    ("a number for the body", {"body_md": 5}),
    ("an unknown field", {"body_md": "ok", "colour": "red"}),
])
def test_a_bad_reply_is_the_same_error_on_rest_and_mcp(project: Project, case: str,
                                                       body: Json):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(["Bob"], "Plan", "# Plan")
    message_id = sent["id"]
    rest = _rest(project, bob, f"/v1/messages/{message_id}/reply", body)
    tool = _mcp(project, bob, "reply_message", {"message_id": message_id, **body})
    for field in ("code", "message", "details"):
        assert tool["error"][field] == rest["error"][field], (case, field)

