"""Which MCP requests Courier answers itself, and that its answer is the SDK's wire form.

``DirectToolCalls`` runs here in process, in front of a stand-in for the SDK's
app that records what reaches it: a plain ``tools/call`` of a Courier tool is
answered without it, anything else reaches it with the body intact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.methods import serialize_server_result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from messaging.mcpwire import tool_result
from messaging.web.mcp_direct import DirectToolCalls
from messaging.web.mcp_tools import TOOLS, tool_error
from tests.asgi import StandIn

Json = dict[str, Any]
VERSION = MODERN_PROTOCOL_VERSIONS[-1]
SERVER_INFO = {"name": "courier", "version": "1.2.3"}
BODIES: list[Json] = [
    {},
    {"persisted": True, "to": ["Bob"], "cc": [], "topic": None, "revision": 1, "score": 0.5,
     "delivery": {"warnings": ["Bob [ab12cd]: unknown standalone state is not proof of death"],
                  "observations": [{"held": False, "presence": None}]}},
    {"subject": "Écrire à 日本 \u2028 \"quoted\" \\ \n", "body_md": "# x\n\n```\n{}\n```"},
]


@pytest.mark.parametrize("version", MODERN_PROTOCOL_VERSIONS)
@pytest.mark.parametrize("body", BODIES)
def test_a_tool_result_is_already_what_the_sdk_serializer_puts_on_the_wire(version: str,
                                                                           body: Json):
    for result in (tool_result(body), tool_error({"error": {"code": "X", "message": "m",
                                                            "details": body}})):
        assert serialize_server_result("tools/call", version, result) == result


class EchoTool:
    """A tool whose result is its arguments."""

    async def call(self, scope: Any, arguments: Json) -> Json:
        return tool_result({"arguments": arguments})


def _call(name: str = "echo", **changes: Any) -> tuple[list[tuple[bytes, bytes]], bytes]:
    params = {"name": name, "arguments": {"to": ["Bob"]},
              "_meta": {"io.modelcontextprotocol/protocolVersion": VERSION,
                        "io.modelcontextprotocol/clientCapabilities": {}}}
    headers = {b"host": b"127.0.0.1:8000", b"content-type": b"application/json",
               b"accept": b"application/json, text/event-stream",
               b"mcp-protocol-version": VERSION.encode(), b"mcp-method": b"tools/call",
               b"mcp-name": name.encode()}
    headers.update(changes.pop("headers", {}))
    body = changes.pop("body", None) or orjson.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
    return [(k, v) for k, v in headers.items() if v is not None], body


def _serve(headers: list[tuple[bytes, bytes]], body: bytes, *,
           rebinding_checked: bool = True) -> tuple[StandIn, int, bytes]:
    sdk = StandIn(b"sdk")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=rebinding_checked,
        allowed_hosts=["127.0.0.1:*"], allowed_origins=["http://127.0.0.1:*"])
    app = DirectToolCalls(sdk, {"echo": EchoTool()}, SERVER_INFO, security, 64 * 1024)
    sent: list[Json] = []
    chunks = [{"type": "http.request", "body": body[:10], "more_body": True},
              {"type": "http.request", "body": body[10:], "more_body": False}]

    async def receive() -> Json:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: Json) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers,
             "query_string": b""}
    asyncio.run(app(scope, receive, send))
    return sdk, sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_plain_call_of_a_courier_tool_is_answered_without_the_sdk():
    sdk, status, answer = _serve(*_call())
    assert sdk.bodies == [] and status == 200
    assert orjson.loads(answer) == {"jsonrpc": "2.0", "id": 7, "result": {
        **tool_result({"arguments": {"to": ["Bob"]}}),
        "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}}


PASSED_ON = {
    "a content type with parameters": _call(
        headers={b"content-type": b"application/json; charset=utf-8"}),
    "another tool": _call("list_resources_of_someone_else"),
    "a handshake-era version": _call(headers={b"mcp-protocol-version": b"2025-11-25"}),
    "another method": _call(headers={b"mcp-method": b"tools/list"}),
    "a name header that disagrees with the body": _call(headers={b"mcp-name": b"other"}),
    "a routing header twice": (_call()[0] + [(b"mcp-method", b"tools/call")], _call()[1]),
    "an Mcp-Param header": _call(headers={b"mcp-param-to": b"Bob"}),
    "no JSON in the Accept header": _call(headers={b"accept": b"text/event-stream"}),
    "a host DNS rebinding would use": _call(headers={b"host": b"evil.example:80"}),
    "a body that is not JSON": _call(body=b"{\"jsonrpc\": \"2.0\", "),
    "a notification": _call(body=b'{"jsonrpc": "2.0", "method": "tools/call", "params": {}}'),
    "params that are not the protocol's": _call(body=orjson.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "echo", "arguments": {}, "_meta": 5}})),
    "a call of no tool at a version the SDK does not serve": _call(
        headers={b"mcp-protocol-version": b"1999-01-01"}, body=orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []})),
    "a call of no tool in a body that is not JSON's type": _call(
        headers={b"content-type": b"text/plain"}, body=orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []})),
    "a body over the SDK's limit": _call(body=b" " * (64 * 1024) + _call()[1]),
    "an id past 64 bits (orjson reads a float)": _call(
        body=_call()[1].replace(b'"id":7', b'"id":18446744073709551616')),
    "arguments nested past the path's depth": _call(body=_call()[1].replace(
        b'"arguments":{"to":["Bob"]}', b'"arguments":{"to":' + b"[" * 40 + b"]" * 40 + b"}")),
    "an integer past 64 bits in the arguments (orjson reads a float)": _call(
        body=_call()[1].replace(b'["Bob"]', b"18446744073709551617")),
    "request state in the params (the SDK's middleware checks it)": _call(
        body=_call()[1].replace(b'"name":', b'"requestState":"forged","name":')),
    "a task in the params (the SDK's params model checks it)": _call(
        body=_call()[1].replace(b'"name":', b'"task":5,"name":')),
}


@pytest.mark.parametrize("case", sorted(PASSED_ON))
def test_anything_else_reaches_the_sdk_with_its_body_intact(case: str):
    headers, body = PASSED_ON[case]
    assert body != _call()[1] or headers != _call()[0]  # the case changed the plain call
    sdk, status, answer = _serve(headers, body)
    assert (sdk.bodies, status, answer) == ([body], 299, b"sdk")


NO_TOOL = {"params not an object": ("x", "params"), "no params": (None, "params"),
           "no name": ({"arguments": {}}, "name"),
           "a name that is no string": ({"name": 5}, "name"),
           "arguments not an object": ({"name": "echo", "arguments": [1]}, "arguments")}


@pytest.mark.parametrize("version", [VERSION, "2025-06-18"])
@pytest.mark.parametrize("case", sorted(NO_TOOL))
def test_a_call_of_no_tool_is_answered_as_a_tool_error_in_the_version_s_form(
        case: str, version: str):
    params, field = NO_TOOL[case]
    body: Json = {"jsonrpc": "2.0", "id": "x-1", "method": "tools/call"}
    if params is not None:
        body["params"] = params
    headers = _call(headers={b"mcp-protocol-version": version.encode(), b"mcp-name": None})[0]
    sdk, status, answer = _serve(headers, orjson.dumps(body))
    assert sdk.bodies == [] and status == 200
    result = orjson.loads(answer)["result"]
    error = result["structuredContent"]["error"]
    assert result["isError"] is True and (error["code"], error["details"]["field"]) == (
        "INVALID_ARGUMENT", field)
    wire = serialize_server_result("tools/call", version, tool_error({"error": error}))
    assert set(result) - {"_meta"} == set(wire)
    assert ("_meta" in result) is (version == VERSION)


def test_arguments_too_deep_for_the_json_encoder_are_a_tool_error_in_the_api_shape():
    tool = next(t for t in TOOLS if t.name == "fetch_inbox")
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    result = asyncio.run(tool.call({}, {"cursor": deep}))
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "INVALID_ARGUMENT"
