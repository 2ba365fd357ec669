"""Calls of Courier's MCP tools answered without the SDK's per-request machinery.

For each request on its stateless, JSON-answering path the MCP SDK builds a
connection, a dispatch context and a runner with its middleware chain
(tracing, request state), validates the request's params twice and the
result twice, and encodes the answer with the standard library: more CPU than
the send behind it. Agent hosts make ``tools/call`` far more than any other
request, so ``DirectToolCalls`` answers the plain case of one itself: a POST at
a per-request protocol version (2026-07-28), declared ``application/json``
exactly, calling one of Courier's tools, that passes every check the SDK makes
of it (its own functions: transport security and the Accept header, the
JSON-RPC envelope, the inbound classification ladder, the params against the
protocol's schema), answered with the result the tool gives the SDK (already in
the protocol's wire form) and the SDK's server stamp, so that the answer is the
one the SDK would give. Anything else goes to the SDK unchanged, with the body
it has read replayed: another method or version, a content type with
parameters, a body the SDK's size limit refuses, headers the SDK checks by a
tool's schema (``Mcp-Param-*``: no Courier tool declares any), params beyond
a tool's name, arguments and ``_meta`` (request state, tasks), arguments the
two JSON parsers would read differently (nested deep, integers past 64 bits),
and every request a check refuses (the SDK answers it). "The answer" means the
JSON: its bytes may differ (key order, escapes).

One kind of request is answered here whatever its version or content type: a
``tools/call`` (with an id, past the transport checks) that is no call of a
tool, its params not an object, its tool's name missing or not a string, its
arguments neither an object nor absent. The SDK would answer it with a bare
JSON-RPC error; Courier answers it as it answers every refused call, a tool
error carrying its error object (``INVALID_ARGUMENT`` naming ``params``,
``name`` or ``arguments``), counted, in the wire form of the request's
protocol version (the SDK's own sieve).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import orjson
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.inbound import (
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.types import SERVER_INFO_META_KEY, JSONRPCRequest
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from mcp_types.methods import serialize_server_result, validate_client_request
from mcp_types.version import MODERN_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from messaging.errors import CourierError, invalid
from messaging.types import Json
from messaging.web.bodylimit import replay
from messaging.web.mcp_tools import tool_error

METHOD = "tools/call"
JSON_TYPE = b"application/json"
# The params a plain call carries. Others (``requestState``, ``task``) are checked by
# the SDK's middlewares and its own params model: such a call is the SDK's.
PLAIN_PARAMS = frozenset({"name", "arguments", "_meta"})
# Deeper arguments go to the SDK: no Courier tool's arguments nest a tenth as deep, and
# orjson and the standard library's parser stop at different depths.
MAX_DEPTH = 32
# orjson reads an integer this large or larger as a float; the SDK's parser keeps it.
MAX_EXACT_INT = 2**63
_VERSIONS = frozenset(v.encode() for v in MODERN_PROTOCOL_VERSIONS)
_PARAM_HEADER = b"mcp-param-"


class Tool(Protocol):
    """What a direct call runs: the tool's result for its arguments, as the scope's agent."""

    async def call(self, scope: Scope, arguments: Json) -> Json: ...


class DirectToolCalls:
    """ASGI middleware before the SDK's app: plain ``tools/call`` requests answered here."""

    def __init__(self, app: ASGIApp, tools: Mapping[str, Tool], server_info: Json,
                 security: TransportSecuritySettings | None, max_body_bytes: int) -> None:
        self.app = app
        self.tools = tools
        self.server_info = server_info  # the SDK's stamp of this server (name, version)
        self.security = TransportSecurityMiddleware(security)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        version = _version(request)
        if version is None:  # a body the SDK refuses unread (its type, its version)
            await self.app(scope, receive, send)
            return
        body = await request.body()
        if len(body) <= self.max_body_bytes and await self._checked(request):
            call = _call_of(body, request) if _plain(scope["headers"]) else None
            if call is not None and call[1].get("name") in self.tools:
                await self._answer(scope, receive, send, *call)
                return
            refused = _malformed_call(body)
            if refused is not None:
                await self._refuse(scope, receive, send, version, *refused)
                return
        await self.app(scope, replay(body, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, version: str,
                      request_id: str | int, error: CourierError) -> None:
        wire = serialize_server_result(METHOD, version, tool_error(error.body()))
        if version in MODERN_PROTOCOL_VERSIONS:
            wire = {**wire, "_meta": {SERVER_INFO_META_KEY: self.server_info}}
        answer = {"jsonrpc": "2.0", "id": request_id, "result": wire}
        await Response(orjson.dumps(answer), media_type="application/json")(scope, receive, send)

    async def _checked(self, request: Request) -> bool:
        """True when the SDK's transport checks pass (it answers those that do not)."""
        if await self.security.validate_request(request, is_post=True) is not None:
            return False
        return check_accept_headers(request)[0]

    async def _answer(self, scope: Scope, receive: Receive, send: Send, request_id: str | int,
                      params: Json) -> None:
        result = await self.tools[params["name"]].call(scope, params.get("arguments") or {})
        # A Courier tool's result is already in the protocol's wire form: the SDK's result
        # serializer returns it unchanged (tests/unit/test_mcp_direct.py holds it to that).
        wire = {**result, "_meta": {SERVER_INFO_META_KEY: self.server_info}}
        answer = {"jsonrpc": "2.0", "id": request_id, "result": wire}
        await Response(orjson.dumps(answer), media_type="application/json")(scope, receive, send)


def _plain(headers: list[tuple[bytes, bytes]]) -> bool:
    """The headers of a call this path may take: JSON exactly, a per-request version,
    ``tools/call``, no ``Mcp-Param-*``."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        if name.startswith(_PARAM_HEADER):
            return False
        found[name] = value
    return (found.get(b"content-type") == JSON_TYPE
            and found.get(b"mcp-method") == METHOD.encode()
            and found.get(b"mcp-protocol-version") in _VERSIONS)


def _call_of(body: bytes, request: Request) -> tuple[str | int, Json] | None:
    """The id and params of a ``tools/call`` the SDK would serve; None for anything it
    would refuse or that is not one."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(decoded, dict) or "id" not in decoded:
        return None
    try:
        envelope = JSONRPCRequest.model_validate(decoded)
    except ValidationError:
        return None
    params = envelope.params
    if (envelope.method != METHOD or not isinstance(params, dict)
            or not params.keys() <= PLAIN_PARAMS):
        return None
    if not _read_alike(params.get("arguments")):
        return None
    if find_duplicated_routing_header(request.headers.items()) is not None:
        return None
    verdict = classify_inbound_request(decoded, headers=dict(request.headers))
    if isinstance(verdict, InboundLadderRejection):  # the SDK words the refusal
        return None
    try:
        validate_client_request(METHOD, verdict.protocol_version, params)
    except (ValidationError, ValueError, KeyError):
        return None
    return envelope.id, params


def _version(request: Request) -> str | None:
    """The protocol version the SDK serves a JSON request at; None for a request it
    would refuse before reading the body (another content type, an unknown version)."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    version = request.headers.get("mcp-protocol-version", DEFAULT_NEGOTIATED_VERSION)
    if media != JSON_TYPE.decode() or version not in SUPPORTED_PROTOCOL_VERSIONS:
        return None
    return version


def _malformed_call(body: bytes) -> tuple[str | int, CourierError] | None:
    """The id of a ``tools/call`` request that calls no tool, with why; None for anything
    else (a call, a notification, another method, no JSON-RPC request at all)."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not (isinstance(decoded, dict) and decoded.get("jsonrpc") == "2.0"
            and decoded.get("method") == METHOD):
        return None
    request_id = decoded.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    params = decoded.get("params")
    if not isinstance(params, dict):
        return request_id, invalid("params", 'must be an object: {"name", "arguments"}')
    if not isinstance(params.get("name"), str):
        return request_id, invalid("name", "the name of the tool to call, a string, is "
                                           "required")
    arguments = params.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        return request_id, invalid("arguments", "must be an object of the tool's arguments "
                                                "(or left out)")
    return None


def _read_alike(value: object) -> bool:
    """True when the SDK's parser reads ``value`` as orjson did: nested at most
    ``MAX_DEPTH`` deep, no integer orjson turned into a float."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return False
            pending += [(x, depth + 1) for x in (item.values() if isinstance(item, dict)
                                                  else item)]
        elif isinstance(item, float) and item.is_integer() and abs(item) >= MAX_EXACT_INT:
            return False
    return True
