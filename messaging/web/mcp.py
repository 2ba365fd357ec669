"""The MCP server at ``/mcp``: Courier's calls as tools, for MCP-speaking agent hosts.

Streamable HTTP (the official ``mcp`` SDK), stateless and with JSON answers, so
any API process can serve any request. Every request carries the agent's
bearer token; ``BearerAgent`` takes the caller the gate found for the request
(authentication, rate limits: the same as the HTTP API's) and hands it to the tools
through the request; its streams count and end as event streams do. The tools
are ``messaging.web.mcp_tools``'s, run by ``CourierMCP`` in place of the SDK's
own, so that their arguments are checked strictly and their errors carry the
API's error object, never the SDK's bare text; a plain call of one is answered
before the SDK (``messaging.web.mcp_direct``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import time
import uuid
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import X_MCP_HEADER_KEY
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from messaging import __version__ as COURIER_VERSION
from messaging.config import Settings
from messaging.errors import CourierError
from messaging.service import events
from messaging.service.caller import Caller
from messaging.store.store import Store
from messaging.timefmt import now_us
from messaging.types import Json
from messaging.web.bodylimit import request_cap
from messaging.web.guard import auth_of
from messaging.web.mcp_direct import DirectToolCalls
from messaging.web.mcp_tools import CALLER_SCOPE_KEY, TOOLS, ToolServices, unknown_tool

MCP_PATH = "/mcp"
# How often an open MCP stream checks that its agent's token still admits it.
STREAM_CHECK_S = 2.0
SERVER_NAME = "courier"
INSTRUCTIONS = (
    "Courier carries Markdown messages between the AI agents of one project; its tools act "
    "as the agent of your token: `send` and `send_message` (a handoff, a question, a "
    "result), `reply_message`, `fetch_inbox` and `get_message` (your mail), `mark_read` and "
    "`acknowledge_message`, `subscribe_idle` (a notice when another agent is done), "
    "`list_agents`, `get_delivery`, `search_messages` and `set_presence`. Each tool's "
    "description says when it fits."
)


class BearerAgent:
    """Admits requests that carry an agent's bearer token; answers others in the API's shape.

    The caller comes from the request's scope (``guard.Authenticate``). A ``GET``
    opens a stream: it holds one of the agent's stream slots (shared with its event
    streams, ``events.claim``: 429 beyond) and ends once the agent's token no longer
    admits it (rotated, retired, closed), checked every ``STREAM_CHECK_S``. POSTs are
    answered as JSON and hold nothing: sessions are stateless, so none is left to
    expire.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        svc: ToolServices = scope["app"].state.services
        try:
            caller = await svc.gate.caller(auth_of(scope))
            project_id, agent_id = caller.require_agent()
        except CourierError as exc:
            await _answer(exc, scope, receive, send)
            return
        scope[CALLER_SCOPE_KEY] = caller
        # The SDK binds stateful sessions to this identity.
        scope["user"] = AuthenticatedUser(AccessToken(
            token="", client_id=agent_id, scopes=["agent"], subject=agent_id,
            claims={"project_id": project_id}))
        if scope["method"] == "GET":
            await self._stream(svc.store, caller, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _stream(self, store: Store, caller: Caller, scope: Scope, receive: Receive,
                      send: Send) -> None:
        """The SDK's stream, in one of the agent's slots, while the agent's token admits."""
        project_id, agent_id = caller.require_agent()
        stream = "mcp-" + uuid.uuid4().hex
        try:
            await events.claim(store, caller, stream)
        except CourierError as exc:
            await _answer(exc, scope, receive, send)
            return
        response = _Tracked(send)
        served: asyncio.Task[None] = asyncio.ensure_future(
            self.app(scope, receive, response.send))
        try:
            token = await events.live_token(store, project_id, agent_id)
            renew_at = time.monotonic() + events.STREAM_RENEW_S
            while not (await asyncio.wait({served}, timeout=STREAM_CHECK_S))[0]:
                if await events.live_token(store, project_id, agent_id) != token:
                    break
                if time.monotonic() >= renew_at:
                    await store.live.claim_stream(project_id, agent_id, stream,
                                                  now_us() // 1000, events.STREAM_LEASE_MS,
                                                  events.STREAMS_PER_AGENT)
                    renew_at = time.monotonic() + events.STREAM_RENEW_S
            else:
                await served  # the client left, or the SDK ended it
                return
            served.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await served
            if response.started and not response.ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if not served.done():
                served.cancel()
            await asyncio.shield(store.live.release_stream(project_id, agent_id, stream))


class _Tracked:
    """An ASGI ``send`` that remembers whether the answer started and ended."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = self.ended = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended = True
        await self._send(message)


async def _answer(exc: CourierError, scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse(exc.body(), exc.status, headers=exc.headers)(scope, receive, send)


async def _never_called() -> None:
    """The SDK's function of every tool: ``CourierMCP.call_tool`` runs Courier's instead."""
    raise AssertionError("Courier's tools run through CourierMCP.call_tool")


class CourierMCP(MCPServer):
    """Courier's MCP server: strict arguments, refused in the API's error shape; tools only."""

    def __init__(self) -> None:
        super().__init__(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING",
                         version=COURIER_VERSION)
        self.courier_tools = {tool.name: tool for tool in TOOLS}
        for tool in TOOLS:
            self.add_tool(_never_called, name=tool.name, description=tool.description,
                          structured_output=False)
            self._tool_manager.get_tool(tool.name).parameters = tool.input_schema()  # type: ignore[union-attr]
        # The schemas the SDK checks a call's ``Mcp-Param-*`` headers by: only those that
        # declare such a header (``x-mcp-header``). A schema declaring none can refuse no
        # call, and walking it costs every call more than the rest of the SDK's checks.
        self.header_schemas = {
            tool.name: schema for tool in TOOLS
            if X_MCP_HEADER_KEY in json.dumps(schema := tool.input_schema())}
        # Courier has no prompts or resources: do not offer them.
        for method in ("prompts/list", "prompts/get", "resources/list", "resources/read",
                       "resources/templates/list"):
            self._lowlevel_server._request_handlers.pop(method, None)

    @property
    def server_info(self) -> Json:
        """The SDK's stamp of this server on every 2026-era result (name, version)."""
        return self._lowlevel_server.server_info_stamp

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        """A tool's schema for the SDK's header checks, None when it declares no header."""
        if name in self.courier_tools:
            return self.header_schemas.get(name)
        return super()._tool_input_schema(name)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Run a tool: its arguments checked by its model first (nothing runs otherwise); a
        name Courier has no tool of is a tool error in Courier's shape, counted."""
        tool = self.courier_tools.get(name)
        if tool is None:
            return unknown_tool(name)
        request: Any = context.request_context.request  # the HTTP request that carried it
        return await tool.call(request.scope, arguments)


def build_server() -> CourierMCP:
    """The MCP server with Courier's tools."""
    return CourierMCP()


def _security(settings: Settings) -> TransportSecuritySettings:
    """DNS-rebinding protection for a loopback bind; elsewhere the bearer token guards."""
    try:
        loopback = ipaddress.ip_address(settings.host).is_loopback
    except ValueError:
        loopback = settings.host == "localhost"
    if not loopback:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def mcp_app(settings: Settings) -> tuple[ASGIApp, StreamableHTTPSessionManager]:
    """The ``/mcp`` endpoint (an ASGI app) and the session manager the app's lifespan runs."""
    server = build_server()
    server.streamable_http_app(stateless_http=True, json_response=True,
                               transport_security=_security(settings),
                               max_request_body_size=request_cap(settings.max_body_bytes))
    manager = server.session_manager
    direct = DirectToolCalls(StreamableHTTPASGIApp(manager), server.courier_tools,
                             server.server_info, manager.security_settings,
                             manager.max_request_body_size)
    return BearerAgent(direct), manager
