"""The MCP server at ``/mcp``: Courier's calls as tools, for MCP-speaking agent hosts.

Streamable HTTP (the official ``mcp`` SDK), stateless and with JSON answers, so
any API process can serve any request. Every request carries the agent's
bearer token; ``BearerAgent`` admits it through the same gate as the HTTP API
(authentication, rate limits) and hands the caller to the tools through the request. Each tool is a
thin wrapper over the service function of its HTTP twin and returns the same
JSON (as text and as structured content); an error comes back as a tool error
(``isError``) carrying the API's error object, an unexpected failure included
(``INTERNAL``, logged), never as the SDK's bare text.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import redis.exceptions
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from messaging import __version__ as COURIER_VERSION
from messaging.config import Settings
from messaging.errors import CourierError, store_full, store_unavailable
from messaging.models import (
    InboxQuery,
    PresenceIn,
    ReplyIn,
    SearchQuery,
    SendIn,
    SubscriptionIn,
    invalid_argument_details,
)
from messaging.runtime.publish import BatchPublisher
from messaging.service import directory, reading, search, sending, subscriptions
from messaging.service.caller import Caller, bearer
from messaging.store.connect import STORE_DOWN
from messaging.store.store import Store
from messaging.web.guard import Gate, authorization, client_address

Json = dict[str, Any]
log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
CALLER_SCOPE_KEY = "courier.caller"
SERVER_NAME = "courier"
SHORT_SUBJECT_MAX = 80
INSTRUCTIONS = (
    "Courier carries Markdown messages between the AI agents of one project. You act as the "
    "agent of your token. Use `send` for a quick handoff (set notify_when_idle to hear when the "
    "recipient is done), `fetch_inbox` to read new mail (pass back next_cursor), "
    "`acknowledge_message` when a message asks for it, `subscribe_idle` to wait for another "
    "agent, and `set_presence` to say whether you are busy or idle."
)


class Services(Protocol):
    """What the tools need from the API process (``messaging.web.deps.Services``)."""

    settings: Settings
    store: Store
    publisher: BatchPublisher
    gate: Gate


Call = Callable[[Services, Caller], Awaitable[Json]]


class BearerAgent:
    """Admits requests that carry an agent's bearer token; answers others in the API's shape."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        svc: Services = scope["app"].state.services
        try:
            caller = await svc.gate.admit(bearer(authorization(scope)), client_address(scope))
            project_id, agent_id = caller.require_agent()
        except CourierError as exc:
            await JSONResponse(exc.body(), exc.status, headers=exc.headers)(scope, receive, send)
            return
        scope[CALLER_SCOPE_KEY] = caller
        # The SDK binds stateful sessions to this identity.
        scope["user"] = AuthenticatedUser(AccessToken(
            token="", client_id=agent_id, scopes=["agent"], subject=agent_id,
            claims={"project_id": project_id}))
        await self.app(scope, receive, send)


def _result(body: Json, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))],
                          structured_content=body, is_error=error)


def internal_error() -> Json:
    """The error object of a failure nothing expected (a Courier bug); the log has the rest."""
    # Not a CourierError code: no HTTP answer carries it (REST answers such a failure 500).
    # No ``persisted``: after an unexpected failure nobody knows whether a write was stored.
    return {"error": {
        "code": "INTERNAL", "details": {},
        "message": "Courier failed unexpectedly and logged it; whether anything was stored is "
                   "unknown: retry later (a send with the same idempotency_key)"}}


async def run_tool(ctx: Context, call: Call) -> CallToolResult:
    """Run one service call as the request's agent; its JSON, or its error as a tool error."""
    request: Any = ctx.request_context.request  # the HTTP request that carried this call
    scope = request.scope
    caller: Caller = scope[CALLER_SCOPE_KEY]
    svc: Services = scope["app"].state.services
    try:
        return _result(await call(svc, caller))
    except CourierError as exc:
        error = exc
    except ValidationError as exc:
        message, details = invalid_argument_details(exc.errors())
        error = CourierError("INVALID_ARGUMENT", message, details)
    except redis.exceptions.OutOfMemoryError:
        error = store_full()
    except STORE_DOWN:
        error = store_unavailable()
    except Exception:
        log.exception("an MCP tool call failed unexpectedly")
        return _result(internal_error(), error=True)
    return _result(error.body(), error=True)


def _given(**fields: Any) -> Json:
    """The arguments a tool call gave (None means not given)."""
    return {k: v for k, v in fields.items() if v is not None}


def short_subject(text: str) -> str:
    """The subject of a short-form send: the message's first line, shortened."""
    first = next((line.strip().lstrip("#").strip() for line in text.splitlines()
                  if line.strip()), "")
    if len(first) > SHORT_SUBJECT_MAX:
        first = first[: SHORT_SUBJECT_MAX - 1].rstrip() + "…"
    return first or "(no subject)"


# What each argument means, for the input schemas (limits and enums come from the models).
ARGUMENT_HELP = {
    "to": "Recipients: agent names, 'name [ref]' labels or agent ids (at least one)",
    "cc": "Copied recipients, like to", "bcc": "Blind-copied recipients, like to",
    "subject": "One-line subject", "body_md": "The message, Markdown",
    "topic": "A short topic label to filter on", "thread_id": "Thread to post in",
    "importance": "How much it matters", "ack_required": "Ask the recipient to acknowledge",
    "delivery_policy": "How recipients are checked before admission",
    "notification_policy": "wake the recipient, keep it quiet, or let Courier choose",
    "idempotency_key": "Retry-safe key: the same key and request answer the first send",
    "resource_notice": "A resource's state change this message announces",
    "project_key": "Your project's key (must match your token's)",
    "sender_name": "Your name (must match your token's)",
    "summary": "A short label for your own copy", "message_id": "A message's id",
    "cursor": "next_cursor of the previous page", "limit": "Messages per page",
    "unread_only": "Only unread mail", "urgent_only": "Only urgent mail",
    "project_id": "A project's id (default: yours)", "delivery_id": "A delivery's id",
    "target": "The agent to watch", "kind": "What to wait for",
    "message": "Send fields (without to) of a message to the target now",
    "ttl_s": "Seconds to wait before an expired notice", "state": "Your presence",
    "message_text": "The text", "notify_when_idle": "Get a notice once the recipient is idle",
    "q": "Words to search for", "sender": "Only mail from this agent name",
    "since": "Only mail sent at or after this time (RFC 3339)",
    "until": "Only mail sent at or before this time (RFC 3339)",
}
# The HTTP twin's model of each tool, whose schema gives its fields' enums and limits.
TWIN_MODELS: dict[str, type[BaseModel]] = {
    "send_message": SendIn, "reply_message": ReplyIn, "fetch_inbox": InboxQuery,
    "subscribe_idle": SubscriptionIn, "set_presence": PresenceIn,
    "search_messages": SearchQuery,
}


def _inline(schema: Json, defs: Json) -> Json:
    """A property schema with local ``$ref``s replaced by their definitions."""
    if "$ref" in schema:
        return _inline({**defs[schema["$ref"].rsplit("/", 1)[-1]],
                        **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
    return {k: ([_inline(x, defs) if isinstance(x, dict) else x for x in v]
                if isinstance(v, list) else _inline(v, defs) if isinstance(v, dict) else v)
            for k, v in schema.items()}


def strict_schema(name: str, schema: Json) -> Json:
    """A tool's input schema: unknown arguments refused, each field described and bounded."""
    twin = TWIN_MODELS.get(name)
    # By field name: a tool's arguments are the model's field names (``sender``, not ``from``).
    twin_schema = twin.model_json_schema(by_alias=False) if twin else {}
    defs = twin_schema.get("$defs", {})
    properties = {}
    for field, prop in schema.get("properties", {}).items():
        known = twin_schema.get("properties", {}).get(field)
        merged = _inline(known, defs) if known else dict(prop)
        merged.pop("title", None)
        merged["description"] = ARGUMENT_HELP.get(field, merged.get("description", field))
        properties[field] = merged
    return {**schema, "properties": properties, "additionalProperties": False}


class CourierMCP(MCPServer):
    """Courier's MCP server: strict arguments, refused in the API's error shape; tools only."""

    def make_strict(self) -> None:
        """Refuse unknown arguments, describe every field, advertise tools alone."""
        for tool in self._tool_manager.list_tools():
            base = tool.fn_metadata.arg_model
            tool.fn_metadata.arg_model = type(base.__name__, (base,), {
                "model_config": {**base.model_config, "extra": "forbid"}})
            tool.parameters = strict_schema(tool.name, tool.parameters)
        # Courier has no prompts or resources: do not offer them.
        for method in ("prompts/list", "prompts/get", "resources/list", "resources/read",
                       "resources/templates/list"):
            self._lowlevel_server._request_handlers.pop(method, None)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Run a tool; arguments it does not take, or of the wrong shape, are a tool error."""
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            try:
                tool.fn_metadata.validate_arguments(arguments)
            except ValidationError as exc:
                message, details = invalid_argument_details(exc.errors())
                error = CourierError("INVALID_ARGUMENT", message, details)
                return _result(error.body(), error=True)
        return await super().call_tool(name, arguments, context)


def build_server() -> MCPServer:  # noqa: C901 - one short closure per tool
    """The MCP server with Courier's tools."""
    server = CourierMCP(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING",
                        version=COURIER_VERSION)

    @server.tool(description="Send a Markdown message (POST /v1/messages): to, subject, "
                             "body_md, and the other send fields. Returns the stored message.")
    async def send_message(
        ctx: Context, to: list[str], subject: str | None = None, body_md: str | None = None,
        cc: list[str] | None = None, bcc: list[str] | None = None, topic: str | None = None,
        thread_id: str | None = None, importance: str | None = None,
        ack_required: bool | None = None, delivery_policy: str | None = None,
        notification_policy: str | None = None, idempotency_key: str | None = None,
        resource_notice: dict[str, Any] | None = None, project_key: str | None = None,
        sender_name: str | None = None, summary: str | None = None, probe: bool | None = None,
    ) -> CallToolResult:
        fields = _given(
            to=to, subject=subject, body_md=body_md, cc=cc, bcc=bcc, topic=topic,
            thread_id=thread_id, importance=importance, ack_required=ack_required,
            delivery_policy=delivery_policy, notification_policy=notification_policy,
            idempotency_key=idempotency_key, resource_notice=resource_notice,
            project_key=project_key, sender_name=sender_name, summary=summary, probe=probe)

        async def call(svc: Services, who: Caller) -> Json:
            body = SendIn.model_validate_json(json.dumps(fields))
            return (await sending.send(svc.store, svc.settings, svc.publisher, who, body)).body

        return await run_tool(ctx, call)

    @server.tool(description="Reply to a message in its thread, to its sender "
                             "(POST /v1/messages/{id}/reply).")
    async def reply_message(
        ctx: Context, message_id: str, body_md: str, subject: str | None = None,
        topic: str | None = None, importance: str | None = None,
        ack_required: bool | None = None, notification_policy: str | None = None,
        idempotency_key: str | None = None, summary: str | None = None,
    ) -> CallToolResult:
        fields = _given(body_md=body_md, subject=subject, topic=topic, importance=importance,
                        ack_required=ack_required, notification_policy=notification_policy,
                        idempotency_key=idempotency_key, summary=summary)

        async def call(svc: Services, who: Caller) -> Json:
            body = ReplyIn.model_validate_json(json.dumps(fields))
            return (await sending.reply(svc.store, svc.settings, svc.publisher, who,
                                        message_id, body)).body

        return await run_tool(ctx, call)

    @server.tool(description="Your new mail, oldest first (GET /v1/agents/me/inbox). Pass the "
                             "next_cursor of the last call back as cursor to get only what "
                             "arrived since.")
    async def fetch_inbox(
        ctx: Context, cursor: str | None = None, limit: int | None = None,
        topic: str | None = None, unread_only: bool | None = None,
        urgent_only: bool | None = None,
    ) -> CallToolResult:
        fields = _given(cursor=cursor, limit=limit, topic=topic, unread_only=unread_only,
                        urgent_only=urgent_only)

        async def call(svc: Services, who: Caller) -> Json:
            return await reading.inbox(svc.store, who, InboxQuery.model_validate(fields))

        return await run_tool(ctx, call)

    @server.tool(description="Search what you sent or received, newest first "
                             "(GET /v1/agents/me/search): every word of q in subject or body, "
                             "`auth*` for a prefix; filter by topic, sender name (from), since "
                             "and until (RFC 3339). Pass next_cursor back as cursor for more.")
    async def search_messages(
        ctx: Context, q: str = "", topic: str | None = None, sender: str | None = None,
        since: str | None = None, until: str | None = None, cursor: str | None = None,
        limit: int | None = None,
    ) -> CallToolResult:
        fields = _given(q=q, topic=topic, sender=sender, since=since, until=until,
                        cursor=cursor, limit=limit)

        async def call(svc: Services, who: Caller) -> Json:
            return await search.search(svc.store, who, SearchQuery.model_validate(fields))

        return await run_tool(ctx, call)

    @server.tool(description="Mark a message you received read.")
    async def mark_read(ctx: Context, message_id: str) -> CallToolResult:
        async def call(svc: Services, who: Caller) -> Json:
            return await reading.mark(svc.store, who, message_id, "read")

        return await run_tool(ctx, call)

    @server.tool(description="Acknowledge a message you received (also marks it read).")
    async def acknowledge_message(ctx: Context, message_id: str) -> CallToolResult:
        async def call(svc: Services, who: Caller) -> Json:
            return await reading.mark(svc.store, who, message_id, "ack")

        return await run_tool(ctx, call)

    @server.tool(description="The agents of your project, with status and presence "
                             "(project_id defaults to yours).")
    async def list_agents(ctx: Context, project_id: str | None = None) -> CallToolResult:
        async def call(svc: Services, who: Caller) -> Json:
            return await directory.list_agents(svc.store, who, project_id or who.project_id or "")

        return await run_tool(ctx, call)

    @server.tool(description="What happened to one delivery, stage by stage.")
    async def get_delivery(ctx: Context, delivery_id: str) -> CallToolResult:
        async def call(svc: Services, who: Caller) -> Json:
            return await reading.get_delivery(svc.store, who, delivery_id)

        return await run_tool(ctx, call)

    @server.tool(description="Get one notice when target next goes idle or exits, or when "
                             "ttl_s runs out (POST /v1/subscriptions). With message (send "
                             "fields without `to`), the message goes to the target now and the "
                             "notice waits for its next idle or exit.")
    async def subscribe_idle(
        ctx: Context, target: str, kind: str | None = None,
        message: dict[str, Any] | None = None, ttl_s: int | None = None,
    ) -> CallToolResult:
        fields = _given(target=target, kind=kind, message=message, ttl_s=ttl_s)

        async def call(svc: Services, who: Caller) -> Json:
            body = SubscriptionIn.model_validate_json(json.dumps(fields))
            made = await subscriptions.subscribe(svc.store, svc.settings, svc.publisher, who, body)
            return made.body

        return await run_tool(ctx, call)

    @server.tool(description="Short form of send_message: to one agent name, the message text "
                             "(Markdown; its first line is the subject), an optional summary "
                             "label, and notify_when_idle to get an idle notice once the "
                             "recipient goes idle after reading it.")
    async def send(
        ctx: Context, to: str, message: str, summary: str | None = None,
        notify_when_idle: bool = False,
    ) -> CallToolResult:
        fields = _given(subject=short_subject(message), body_md=message, summary=summary)

        async def call(svc: Services, who: Caller) -> Json:
            if notify_when_idle:
                wanted = SubscriptionIn.model_validate_json(
                    json.dumps({"target": to, "message": fields}))
                sub = await subscriptions.subscribe(svc.store, svc.settings, svc.publisher, who,
                                                    wanted)
                sent: Json = sub.body.pop("message")
                return {**sent, "subscription": sub.body}
            body = SendIn.model_validate_json(json.dumps({**fields, "to": [to]}))
            return (await sending.send(svc.store, svc.settings, svc.publisher, who, body)).body

        return await run_tool(ctx, call)

    @server.tool(description="Tell Courier whether you are busy, idle, exited or source_lost "
                             "(PUT /v1/agents/me/presence); going idle sends the idle notices "
                             "others wait for.")
    async def set_presence(ctx: Context, state: str) -> CallToolResult:
        async def call(svc: Services, who: Caller) -> Json:
            body = PresenceIn.model_validate({"state": state})
            return await directory.set_presence(svc.store, who, body, svc.publisher)

        return await run_tool(ctx, call)

    server.make_strict()
    return server


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
                               transport_security=_security(settings))
    manager = server.session_manager
    return BearerAgent(StreamableHTTPASGIApp(manager)), manager
