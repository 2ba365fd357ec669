"""MCP arguments are strict and described (docs/http-api.md: MCP).

Unknown arguments are refused with INVALID_ARGUMENT, argument errors come back
as tool errors carrying the API's error object, input schemas describe each
field with its enum values and limits, the server reports Courier's version
and offers tools only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from messaging import __version__
from tests.integration.conftest import Project

MCP_ACCEPT = "application/json, text/event-stream"
Json = dict[str, Any]


def rpc(project: Project, token: str, method: str, params: Json | None = None) -> Json:
    response = httpx.post(f"{project.stack.api_url}/mcp", json={
        "jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}},
        headers={"Authorization": f"Bearer {token}", "Accept": MCP_ACCEPT}, timeout=30)
    assert response.status_code == 200, response.text
    body: Json = response.json()
    return body


def call(project: Project, token: str, tool: str, args: Json) -> Json:
    result: Json = rpc(project, token, "tools/call", {"name": tool, "arguments": args})["result"]
    return result


def test_an_unknown_argument_is_refused_and_nothing_is_sent(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    result = call(project, alice.row["token"], "send_message",
                  {"to": ["Bob"], "subject": "s", "body_md": "x", "ccc": ["Carol"]})
    assert result["isError"] is True
    error = result["structuredContent"]
    assert error["persisted"] is False
    assert (error["error"]["code"], error["error"]["details"]["field"]) == (
        "INVALID_ARGUMENT", "ccc")
    assert bob.api.inbox()["messages"] == []


def test_a_mistyped_argument_is_a_tool_error_with_the_error_object(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    for tool, args, field in [("send_message", {"to": "Bob", "subject": "s"}, "to"),
                              ("send", {"to": "Bob"}, "message"),
                              ("fetch_inbox", {"limit": "many"}, "limit")]:
        result = call(project, alice.row["token"], tool, args)
        assert result["isError"] is True, (tool, result)
        error = result["structuredContent"]["error"]
        assert (error["code"], error["details"]["field"]) == ("INVALID_ARGUMENT", field), tool


def test_a_bad_search_cursor_is_a_tool_error_with_the_error_object(project: Project):
    alice = project.agent("Alice")
    for cursor in ["²", "١٢", "𝟙"]:
        result = call(project, alice.row["token"], "search_messages", {"cursor": cursor})
        assert result["isError"] is True, result
        error = result["structuredContent"]["error"]
        assert (error["code"], error["details"]["field"]) == ("INVALID_ARGUMENT", "cursor")


def test_input_schemas_are_strict_and_describe_each_field(project: Project):
    alice = project.agent("Alice")
    listed = rpc(project, alice.row["token"], "tools/list")["result"]["tools"]
    tools = {t["name"]: t for t in listed}
    for name, tool in tools.items():
        schema = tool["inputSchema"]
        assert schema["additionalProperties"] is False, name
        for field, prop in schema["properties"].items():
            assert prop.get("description"), (name, field)
    send = tools["send_message"]["inputSchema"]["properties"]
    assert "enum" in str(send["importance"]) and "urgent" in str(send["importance"])
    assert send["to"]["maxItems"] >= 1 and send["to"]["minItems"] == 1
    assert tools["fetch_inbox"]["inputSchema"]["properties"]["limit"]["maximum"] >= 1
    search = tools["search_messages"]["inputSchema"]["properties"]
    assert search["limit"]["maximum"] >= 1 and search["limit"]["minimum"] == 1
    assert "pattern" in str(search["topic"]) and "maxLength" in str(search["q"])
    assert "maxLength" in str(search["from"]) and "date-time" in str(search["since"])
    assert "next_cursor" in search["cursor"]["description"]


def test_the_server_reports_courier_and_offers_tools_only(project: Project):
    alice = project.agent("Alice")
    init = rpc(project, alice.row["token"], "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}})["result"]
    assert init["serverInfo"]["name"] == "courier"
    assert init["serverInfo"]["version"] == __version__
    assert "tools" in init["capabilities"]
    assert "prompts" not in init["capabilities"] and "resources" not in init["capabilities"]


def test_the_sdk_client_sees_the_same(project: Project):
    from tests.integration.test_mcp import mcp

    alice = project.agent("Alice")

    async def scenario() -> tuple[bool, Json]:
        async with mcp(project, alice) as tools:
            return await tools.raw("fetch_inbox", unread=True)

    error, body = asyncio.run(scenario())
    assert error is True and body["error"]["code"] == "INVALID_ARGUMENT"
