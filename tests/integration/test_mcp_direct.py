"""A tool call Courier answers itself is answered exactly as the MCP SDK answers it.

A ``tools/call`` at a per-request protocol version declared ``application/json``
takes Courier's direct path (``messaging.web.mcp_direct``); the same bytes
declared ``application/json; charset=utf-8`` go through the SDK. Every answer,
tool errors and the SDK's own refusals included, must be the same on both.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tests.integration.conftest import Project
from tests.stack import wait_until

Json = dict[str, Any]
VERSION = MODERN_PROTOCOL_VERSIONS[-1]
DIRECT = "application/json"
SDKS = "application/json; charset=utf-8"


def _call(project: Project, token: str, tool: str, args: Json, content_type: str,
          params: Json | None = None, **headers: str) -> tuple[int, Any]:
    body = {"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": {
        **(params or {}), "name": tool, "arguments": args,
        "_meta": {"io.modelcontextprotocol/protocolVersion": VERSION,
                  "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}}
    response = httpx.post(f"{project.stack.api_url}/mcp", json=body, timeout=30, headers={
        "Authorization": f"Bearer {token}", "Content-Type": content_type,
        "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": VERSION,
        "Mcp-Method": "tools/call", "Mcp-Name": tool, **headers})
    return response.status_code, response.json()


def _both(project: Project, token: str, tool: str, args: Json, params: Json | None = None,
          **headers: str) -> Json:
    direct = _call(project, token, tool, args, DIRECT, params, **headers)
    assert direct == _call(project, token, tool, args, SDKS, params, **headers)
    answer: Json = direct[1]
    return answer


def test_reads_and_a_replayed_send_are_answered_the_same_on_both_paths(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    send = {"to": ["Bob"], "subject": "Ünïcode “quotes”", "body_md": "# A\n\n`x` \\ \"y\"",
            "idempotency_key": "direct-1"}
    first = _call(project, alice.row["token"], "send_message", send, SDKS)[1]["result"]
    assert first["isError"] is False and first["structuredContent"]["persisted"] is True
    replay = _both(project, alice.row["token"], "send_message", send)["result"]
    assert replay["structuredContent"]["idempotent_replay"] is True
    assert replay["structuredContent"]["id"] == first["structuredContent"]["id"]
    delivery = first["structuredContent"]["delivery"]["observations"][0]["delivery_id"]

    def steady_inbox() -> bool:  # delivered, and two reads alike: nothing moves now
        reads = [_call(project, bob.row["token"], "fetch_inbox", {"limit": 5}, DIRECT)
                 for _ in range(2)]
        return bool(reads[0][1]["result"]["structuredContent"]["messages"]) and (
            reads[0] == reads[1])

    wait_until(steady_inbox, what="the message in Bob's inbox, its reads steady")
    for tool, args in (("list_agents", {}), ("fetch_inbox", {"limit": 5}),
                       ("search_messages", {"q": "quotes"})):
        assert _both(project, bob.row["token"], tool, args)["result"]["isError"] is False
    assert _both(project, alice.row["token"], "get_delivery",
                 {"delivery_id": delivery})["result"]["isError"] is False


REFUSED = {
    "an unknown argument": ("send_message", {"to": ["Bob"], "subject": "s", "body_md": "b",
                                             "colour": "red"}),
    "a mistyped argument": ("send_message", {"to": "Bob", "subject": "s", "body_md": "b"}),
    "no such recipient": ("send_message", {"to": ["Nobody"], "subject": "s", "body_md": "b"}),
    "a message not the caller's": ("mark_read", {"message_id": "msg_000000000000aaaa"}),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_tool_error_is_answered_the_same_on_both_paths(project: Project, case: str):
    alice = project.agent("Alice")
    project.agent("Bob")
    tool, args = REFUSED[case]
    result = _both(project, alice.row["token"], tool, args)["result"]
    assert result["isError"] is True and "error" in result["structuredContent"]


def test_the_sdks_refusals_are_its_own_on_both_content_types(project: Project):
    alice = project.agent("Alice")
    answer = _both(project, alice.row["token"], "list_agents", {}, **{"Mcp-Name": "send"})
    assert answer["error"]["code"] < 0  # JSON-RPC's, from the SDK
    answer = _both(project, alice.row["token"], "no_such_tool", {})
    assert answer.get("error") or answer["result"]["isError"] is True
    send = {"to": ["Bob"], "subject": "s", "body_md": "b"}
    for params in ({"requestState": "forged"}, {"task": 5}):
        answer = _both(project, alice.row["token"], "send_message", send, params)
        assert answer["error"]["code"] < 0, answer  # refused: nothing sent
