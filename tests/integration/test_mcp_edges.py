"""The edges of a tool call answer in Courier's form and are counted (docs/mcp.md).

An unknown tool, a ``tools/call`` that calls no tool (params not an object, no
tool name, arguments not an object) and a call without arguments each come
back as a tool error carrying Courier's error object, counted in
``courier_refusals_total{face="mcp"}``, on both paths (the direct one and the
SDK's) and at every protocol version. Integers follow JSON Schema on both
faces: 3.0 is an integer, 3.5 is not.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from tests.integration.conftest import Agent, Project
from tests.integration.test_limits import _moved, _refusals
from tests.integration.test_mcp import mcp
from tests.integration.test_mcp_direct import DIRECT, SDKS
from tests.stack import wait_until

Json = dict[str, Any]
MODERN = MODERN_PROTOCOL_VERSIONS[-1]
LEGACY = HANDSHAKE_PROTOCOL_VERSIONS[-1]
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
# (params of a tools/call, the field its error names); the modern ones carry _meta.
MALFORMED: dict[str, tuple[Any, str]] = {
    "params a string": ("send_message", "params"),
    "params a list": ([], "params"),
    "no params": (None, "params"),
    "no tool name": ({"arguments": {}}, "name"),
    "a tool name that is no string": ({"name": 5, "arguments": {}}, "name"),
    "arguments a string": ({"name": "fetch_inbox", "arguments": "limit=5"}, "arguments"),
    "arguments a list": ({"name": "fetch_inbox", "arguments": [5]}, "arguments"),
}


def post(project: Project, agent: Agent, params: Any, content_type: str, version: str,
         name: str | None = None) -> httpx.Response:
    """One tools/call as raw JSON-RPC over HTTP, at ``version``."""
    if isinstance(params, dict) and version == MODERN:
        params = {**params, "_meta": META}
    body: Json = {"jsonrpc": "2.0", "id": "edge-1", "method": "tools/call"}
    if params is not None:
        body["params"] = params
    headers = {"Authorization": f"Bearer {agent.row['token']}", "Content-Type": content_type,
               "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": version,
               "Mcp-Method": "tools/call", **({"Mcp-Name": name} if name else {})}
    return httpx.post(f"{project.stack.api_url}/mcp", json=body, headers=headers, timeout=30)


def tool_error(answer: httpx.Response) -> Json:
    """The error object of a tool error answer (HTTP 200, a JSON-RPC result)."""
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True, result
    error: Json = result["structuredContent"]
    assert error["persisted"] is False and set(error["error"]) == {"code", "message", "details"}
    return error["error"]


@pytest.fixture
def alice(project: Project) -> Agent:
    project.agent("Bob")
    return project.agent("Alice")


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize(("content_type", "version"), [
    (DIRECT, MODERN), (SDKS, MODERN), (DIRECT, LEGACY)], ids=["direct", "sdk", "legacy"])
def test_a_call_of_no_tool_is_invalid_argument_naming_the_field_and_counted(
        project: Project, alice: Agent, case: str, content_type: str, version: str):
    params, field = MALFORMED[case]
    before = _refusals(project.stack, "mcp")
    error = tool_error(post(project, alice, params, content_type, version))
    assert (error["code"], error["details"]["field"]) == ("INVALID_ARGUMENT", field)
    assert _moved(before, _refusals(project.stack, "mcp")) == {"INVALID_ARGUMENT": 1}


@pytest.mark.parametrize("version", [MODERN, LEGACY])
def test_a_call_of_no_tool_has_the_wire_form_of_any_refused_call(
        project: Project, alice: Agent, version: str):
    refused = post(project, alice, {"name": "fetch_inbox", "arguments": {"limit": "x"}}, SDKS,
                   version, "fetch_inbox").json()["result"]
    malformed = post(project, alice, {"arguments": {}}, SDKS, version).json()["result"]
    assert set(malformed) == set(refused)
    assert malformed.get("_meta") == refused.get("_meta")  # the SDK's serverInfo stamp


@pytest.mark.parametrize("content_type", [DIRECT, SDKS])
def test_an_unknown_tool_is_not_found_naming_it_and_counted(
        project: Project, alice: Agent, content_type: str):
    before = _refusals(project.stack, "mcp")
    error = tool_error(post(project, alice, {"name": "send_mesage", "arguments": {}},
                            content_type, MODERN, "send_mesage"))
    assert (error["code"], error["details"]["field"]) == ("NOT_FOUND", "name")
    assert "send_message" in error["details"]["tools"] and "send_mesage" in error["message"]
    assert _moved(before, _refusals(project.stack, "mcp")) == {"NOT_FOUND": 1}


def test_the_sdk_client_gets_the_error_object_for_an_unknown_tool_and_no_arguments(
        project: Project, alice: Agent):
    async def calls() -> list[tuple[bool, Json]]:
        async with mcp(project, alice) as tools:
            unknown = await tools.client.call_tool("no_such_tool", {})
            bare = await tools.client.call_tool("send_message")  # no arguments object
            inbox = await tools.client.call_tool("fetch_inbox")
            return [(bool(r.is_error), r.structured_content or {})
                    for r in (unknown, bare, inbox)]

    before = _refusals(project.stack, "mcp")
    (unknown_error, unknown), (bare_error, bare), (inbox_error, inbox) = asyncio.run(calls())
    assert unknown_error and unknown["error"]["code"] == "NOT_FOUND"
    assert bare_error and (bare["error"]["code"], bare["error"]["details"]["field"]) == (
        "INVALID_ARGUMENT", "to")
    assert not inbox_error and inbox["messages"] == []  # nothing it needs: it runs
    assert _moved(before, _refusals(project.stack, "mcp")) == {
        "NOT_FOUND": 1, "INVALID_ARGUMENT": 1}


@pytest.mark.parametrize("content_type", [DIRECT, SDKS])
def test_an_integral_float_is_an_integer_on_mcp_and_a_fraction_is_refused(
        project: Project, alice: Agent, content_type: str):
    for n in range(3):
        alice.api.send("Alice", f"Note {n}", "x")
    wait_until(lambda: len(alice.api.inbox()["messages"]) == 3, what="three notes delivered")
    inbox = post(project, alice, {"name": "fetch_inbox", "arguments": {"limit": 2.0}},
                 content_type, MODERN, "fetch_inbox").json()["result"]
    assert len(inbox["structuredContent"]["messages"]) == 2
    watch = post(project, alice, {"name": "subscribe_idle",
                                  "arguments": {"target": "Bob", "ttl_s": 60.0}},
                 content_type, MODERN, "subscribe_idle").json()["result"]
    assert watch["structuredContent"]["ttl_s"] == 60, watch
    for tool, args, field in [("fetch_inbox", {"limit": 2.5}, "limit"),
                              ("subscribe_idle", {"target": "Bob", "ttl_s": 60.5}, "ttl_s")]:
        error = tool_error(post(project, alice, {"name": tool, "arguments": args},
                                content_type, MODERN, tool))
        assert (error["code"], error["details"]["field"]) == ("INVALID_ARGUMENT", field)


def test_an_integral_float_is_an_integer_on_rest_and_a_fraction_is_refused(
        project: Project, alice: Agent):
    http, admin = alice.api.http, project.admin.http
    watch = http.post("/v1/subscriptions", json={"target": "Bob", "ttl_s": 60.0})
    assert watch.status_code == 201 and watch.json()["ttl_s"] == 60, watch.text
    names = f"/v1/projects/{project.project_id}/names"
    allowed = admin.put(f"{names}/Later", json={"ttl_s": 600.0})
    assert allowed.status_code == 200, allowed.text
    assert http.get("/v1/agents/me/inbox", params={"limit": "2.0"}).status_code == 200
    for answer, field in [
            (http.post("/v1/subscriptions", json={"target": "Bob", "ttl_s": 60.5}), "ttl_s"),
            (admin.put(f"{names}/Soon", json={"ttl_s": 600.5}), "ttl_s"),
            (http.get("/v1/agents/me/inbox", params={"limit": "2.5"}), "limit")]:
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["details"]["field"] == field
