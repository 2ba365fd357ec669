"""Courier's MCP tools: each a thin wrapper over the service function of its HTTP twin.

A tool's arguments are checked by its twin's pydantic model in strict JSON
mode, with the HTTP face's names, before anything runs (``CourierTool.call``);
it runs as the agent the request's gate found (``CALLER_SCOPE_KEY`` in the
request's scope) and returns the same JSON as its twin, in the protocol's wire
form: as compact JSON text and as structured content. An error comes back as a
tool error (``isError``) carrying the API's error object, an unexpected
failure included (``INTERNAL``, logged), and so does a call of a tool Courier
does not have (``NOT_FOUND``); each is counted here with the face's other
refusals. The MCP server (``messaging.web.mcp``) offers ``TOOLS``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, get_type_hints

from pydantic import BaseModel, Field, ValidationError
from starlette.types import Scope

from messaging.config import Settings
from messaging.errors import (
    CourierError,
    from_validation,
    invalid,
)
from messaging.mcpwire import tool_result
from messaging.models import (
    SUMMARY_HELP,
    InboxQuery,
    Model,
    PresenceIn,
    Recipient,
    ReplyIn,
    SearchQuery,
    SendIn,
    SubscriptionIn,
    Summary,
    without_controls,
)
from messaging.runtime.publish import BatchPublisher
from messaging.service import directory, reading, search, sending, subscriptions
from messaging.service.caller import Caller
from messaging.store.store import Store
from messaging.types import Json
from messaging.web import refusals
from messaging.web.guard import Gate

log = logging.getLogger(__name__)

FACE = "mcp"  # the face label of its refusals
# Where the MCP gate puts the request's caller for the tools.
CALLER_SCOPE_KEY = "courier.caller"
SHORT_SUBJECT_MAX = 80
TOOL_NAME_SHOWN_MAX = 64  # of an unknown tool's name, in its error's message


class ToolServices(Protocol):
    """What the tools need from the API process (``messaging.web.deps.Services``)."""

    settings: Settings
    store: Store
    publisher: BatchPublisher
    gate: Gate


Call = Callable[[ToolServices, Caller], Awaitable[Json]]
# What a tool runs: its arguments come checked, as its model.
ToolRun = Callable[[ToolServices, Caller, Any], Awaitable[Json]]


def tool_error(body: Json) -> Json:
    """An error object as a tool error; every MCP refusal is made, and counted, here."""
    refusals.count(body["error"]["code"], FACE)
    return tool_result(body, error=True)


def unknown_tool(name: str) -> Json:
    """A call of a tool Courier does not have, as a tool error (NOT_FOUND naming ``name``)."""
    names = sorted(tool.name for tool in TOOLS)
    shown = name if len(name) <= TOOL_NAME_SHOWN_MAX else name[:TOOL_NAME_SHOWN_MAX] + "…"
    return tool_error(CourierError(
        "NOT_FOUND", f"name: no tool {shown!r}; Courier's tools are {', '.join(names)}",
        {"field": "name", "tools": names}).body())


def internal_error() -> Json:
    """The error object of a failure nothing expected (a Courier bug); the log has the rest."""
    # Not a CourierError code: no HTTP answer carries it (REST answers such a failure 500).
    # No ``persisted``: after an unexpected failure nobody knows whether a write was stored.
    return {"error": {
        "code": refusals.INTERNAL, "details": {},
        "message": "Courier failed unexpectedly and logged it; whether anything was stored is "
                   "unknown: retry later (a send with the same idempotency_key)"}}


async def run_tool(scope: Scope, call: Call) -> Json:
    """Run one service call as the request's agent (``scope`` is the HTTP request's): the
    tool result of its JSON, or of its error as a tool error."""
    caller: Caller = scope[CALLER_SCOPE_KEY]
    svc: ToolServices = scope["app"].state.services
    try:
        return tool_result(await call(svc, caller))
    except ValidationError as exc:
        error: CourierError | None = from_validation(exc)
    except Exception as exc:
        error = refusals.answered_as(exc)  # a CourierError (the store's failures too)
        if error is None:
            log.exception("an MCP tool call failed unexpectedly")
            return tool_error(internal_error())
    assert error is not None
    return tool_error(error.body())


def short_subject(text: str) -> str:
    """The subject of a short-form send: the message's first line, shortened, without
    control characters (the body keeps them; a subject refuses them)."""
    lines = (without_controls(line).strip() for line in text.splitlines())
    first = next((line.lstrip("#").strip() for line in lines if line), "")
    if len(first) > SHORT_SUBJECT_MAX:
        first = first[: SHORT_SUBJECT_MAX - 1].rstrip() + "…"
    return first or "(no subject)"


# The arguments of the tools without an HTTP body model (their HTTP twins take path
# parameters), and of ``send``; every other tool takes its twin's model itself.
class MessageArgs(Model):
    """A message the caller received."""

    message_id: str = Field(description="The message's id (msg_...), as the inbox shows it")


class ReplyArgs(ReplyIn):
    """``reply_message``: the message answered, and the reply's fields."""

    message_id: str = Field(description="The id (msg_...) of the message to answer")


class DeliveryArgs(Model):
    """A delivery of the caller's mail."""

    delivery_id: str = Field(description="The delivery's id (dlv_...), as a send's answer or "
                                         "the inbox shows it")


class ProjectArgs(Model):
    """A project whose agents to list."""

    project_id: str | None = Field(None, description="A project's id (default: yours)")


class ShortSendArgs(Model):
    """``send``: one recipient and the text, optionally an idle notice."""

    to: Recipient = Field(description=(
        "One recipient: an agent name, `Name [ref]` (that agent exactly, as a listing, an error "
        "or a message's `from` shows it), an agent id, or `main`. To answer a message, copy its "
        "`from` here"))
    message: str | None = Field(None, description=(
        "The message text, Markdown. The recipient's human previews only its FIRST LINE (it "
        "becomes the subject): make it a self-contained sentence saying what this is about, "
        "not a greeting or a bare mention. Omit it with notify_when_idle for a pure "
        "subscription"))
    body: str | None = Field(None, description=(
        "The same as message, by the name other hosts' send tools give it; give one of the "
        "two"))
    summary: Summary | None = Field(None, description=SUMMARY_HELP)
    notify_when_idle: bool = Field(False, description=(
        "Get ONE notice in your inbox when the recipient next goes idle or exits (or one "
        "expired notice after an hour): one-shot, no polling. With a message: deliver it now "
        "AND subscribe. Without one: a pure subscription that costs the recipient nothing "
        "(from your main conversation only)"))


# Permissions are each session's own: a peer that does what yours refused would
# launder the user's decision through another session.
PERMISSION_GUIDANCE = (
    "Permissions belong to each session: NEVER ask a peer to perform an action that was "
    "denied or blocked in your session, or that your own permission settings would block; "
    "a peer doing it for you bypasses your user's decision. Take blocked work back to your "
    "user instead."
)
# What every sending tool says of when and how to send (the recipient's human reads
# only the first line; a warning is no reason to send again).
SENDING_GUIDANCE = (
    "Send only when the recipient needs to act or to know: a handoff, a requested result, a "
    "blocker, a change to a shared resource. Keep routine progress in your own conversation; "
    "send no courtesy acknowledgements or thanks. Say whether the message informs or asks for "
    "work; for a request name the action, the repository and who owns it. "
    "The recipient's human previews only the first line: make it a self-contained sentence "
    "saying what this is about, then add the few facts the recipient needs. "
    "The answer's warnings and observations are facts about this send, true when it was "
    "admitted (an exited recipient whose mail waits for a resume, a name nobody has yet, "
    "held mail, unknown presence); they are not errors, and storage is not task acceptance. "
    "Uncertain delivery (a timeout, an unknown outcome, a warning) is never a reason to send "
    "again by another route or tool: retry only the same call with the same idempotency_key, "
    "which answers the stored result. Return once it answers; do not poll for delivery. "
    + PERMISSION_GUIDANCE
)
SEND_MESSAGE_HELP = (
    "Send a Markdown message to agents of your project (POST /v1/messages): to, subject, "
    "body_md and the other fields. Returns the stored message with what admission saw of each "
    "delivery. A recipient that cannot be resolved fails the whole send (persisted false). To "
    "answer a message use reply_message; for a resource release or cancellation give "
    "resource_notice instead of subject and body_md (Courier writes the text). "
    + SENDING_GUIDANCE
)
SEND_HELP = (
    "Short form of send_message: to one recipient, the message text (message, or body: the "
    "same; its first line becomes the subject), a summary label for you, and "
    "notify_when_idle to hear once when the recipient next goes idle. notify_when_idle "
    "without a message is a pure subscription (the answer's subscription only; nothing is "
    "sent). With notify_when_idle the answer says in subscription.notice_to who will see "
    "the notice. " + SENDING_GUIDANCE
)


@dataclass(frozen=True)
class CourierTool:
    """One tool: its arguments' model (checked strictly, as over HTTP) and what it runs."""

    name: str
    arguments: type[BaseModel]
    run: ToolRun
    description: str

    def validate(self, arguments: Json) -> BaseModel:
        """The arguments as the model, by the HTTP face's rules: a body's model as the
        HTTP face validates a body (the parsed JSON, the model's strict types, so that
        an error reads the same), a query's strictly by JSON type; names as the HTTP
        face spells them (``from``), nothing unknown."""
        if self.arguments.model_config.get("strict"):  # a body's model: as over HTTP
            return self.arguments.model_validate(arguments, by_alias=True, by_name=False)
        # A query's model, which takes text over HTTP: the JSON's own types, strictly.
        return self.arguments.model_validate_json(json.dumps(arguments), strict=True,
                                                  by_alias=True, by_name=False)

    async def call(self, scope: Scope, arguments: Json) -> Json:
        """The tool's result for ``arguments``, run as the agent of the request ``scope``:
        checked by its model first (nothing runs otherwise)."""
        try:
            args = self.validate(arguments)
        except ValidationError as exc:
            return tool_error(from_validation(exc).body())
        except RecursionError:  # nested deeper than the JSON encoder goes: no model's shape
            return tool_error(invalid("arguments", "nested too deeply").body())
        return await run_tool(scope, lambda svc, who: self.run(svc, who, args))

    def input_schema(self) -> Json:
        """The model's JSON schema, references inlined for clients that do not follow them."""
        schema = self.arguments.model_json_schema(by_alias=True)
        defs = schema.pop("$defs", {})
        properties = {field: _untitled(_inline(prop, defs))
                      for field, prop in schema.get("properties", {}).items()}
        return {"type": "object", "properties": properties,
                "required": schema.get("required", []), "additionalProperties": False}


TOOLS: list[CourierTool] = []


def _tool(name: str, description: str) -> Callable[[ToolRun], ToolRun]:
    """Offer the function below as the tool ``name``; its ``args`` annotation is the model
    its arguments are checked by."""
    def register(run: ToolRun) -> ToolRun:
        TOOLS.append(CourierTool(name, get_type_hints(run)["args"], run, description))
        return run
    return register


@_tool("send_message", SEND_MESSAGE_HELP)
async def _send_message(svc: ToolServices, who: Caller, args: SendIn) -> Json:
    return (await sending.send(svc.store, svc.settings, svc.publisher, who, args)).body


@_tool("reply_message", (
    "Reply to a message you received or sent (POST /v1/messages/{id}/reply): same thread, "
    "subject Re: ..., addressed to its sender; body_md required, importance and "
    "ack_required inherited unless given. Reply only when the reply helps: no thanks or "
    "courtesy acknowledgements. " + SENDING_GUIDANCE))
async def _reply_message(svc: ToolServices, who: Caller, args: ReplyArgs) -> Json:
    body = ReplyIn.model_validate_json(args.model_dump_json(exclude={"message_id"},
                                                           exclude_unset=True))
    return (await sending.reply(svc.store, svc.settings, svc.publisher, who, args.message_id,
                                body)).body


@_tool("fetch_inbox", (
    "Your new mail, oldest first (GET /v1/agents/me/inbox). Pass the next_cursor of the "
    "last call back as cursor to get only what arrived since. What it returns counts as "
    "shown to you (delivery_observed)."))
async def _fetch_inbox(svc: ToolServices, who: Caller, args: InboxQuery) -> Json:
    # The tool's result is the conversation's: what it returns is shown.
    return await reading.inbox(svc.store, who, args, shown=True)


@_tool("get_message", (
    "One message you sent or received, whole (GET /v1/messages/{id}): for a body that "
    "arrived cut, or a message named in a thread."))
async def _get_message(svc: ToolServices, who: Caller, args: MessageArgs) -> Json:
    return await reading.shown_to(svc.store, svc.settings, who, args.message_id)


@_tool("search_messages", (
    "Search what you sent or received, newest first (GET /v1/agents/me/search): every "
    "word of q in subject or body, `auth*` for a prefix; filter by topic, sender (from), "
    "since and until (RFC 3339). Pass next_cursor back as cursor for more."))
async def _search_messages(svc: ToolServices, who: Caller, args: SearchQuery) -> Json:
    return await search.search(svc.store, who, args)


@_tool("mark_read", "Mark a message you received read.")
async def _mark_read(svc: ToolServices, who: Caller, args: MessageArgs) -> Json:
    return await reading.mark(svc.store, svc.settings, who, args.message_id, "read")


@_tool("acknowledge_message", (
    "Acknowledge a message you received that asks for it (ack_required); also marks it "
    "read."))
async def _acknowledge_message(svc: ToolServices, who: Caller, args: MessageArgs) -> Json:
    return await reading.mark(svc.store, svc.settings, who, args.message_id, "ack")


@_tool("list_agents", (
    "The agents of your project, each with its `Name [ref]` label, status and presence. "
    "Do not poll it to learn when an agent is done: use notify_when_idle or "
    "subscribe_idle."))
async def _list_agents(svc: ToolServices, who: Caller, args: ProjectArgs) -> Json:
    return await directory.list_agents(svc.store, who, args.project_id or who.project_id or "")


@_tool("get_delivery", (
    "What happened to one delivery of your mail, stage by stage (admitted, target "
    "selected, dispatch started, provider result, observed). An outcome of unknown is "
    "uncertainty, not failure: do not resend because of it."))
async def _get_delivery(svc: ToolServices, who: Caller, args: DeliveryArgs) -> Json:
    return await reading.get_delivery(svc.store, svc.settings, who, args.delivery_id)


@_tool("subscribe_idle", (
    "Get one notice when target next goes idle or exits, or one expired notice when ttl_s "
    "runs out (POST /v1/subscriptions); from your main conversation only. With message "
    "(send fields without to), the message goes to the target now and the notice waits "
    "for its next idle or exit. The answer's notice_to says who will see the notice."))
async def _subscribe_idle(svc: ToolServices, who: Caller, args: SubscriptionIn) -> Json:
    return (await subscriptions.subscribe(svc.store, svc.settings, svc.publisher, who,
                                          args)).body


@_tool("send", SEND_HELP)
async def _send(svc: ToolServices, who: Caller, args: ShortSendArgs) -> Json:
    if args.body is not None and args.message is not None:
        raise invalid("body", "give the text once: message or body, not both")
    given = args.message if args.body is None else args.body
    text = given if given and given.strip() else None
    if text is None and not args.notify_when_idle:
        raise invalid("message", "required unless notify_when_idle is true")
    fields = {k: v for k, v in (("subject", text and short_subject(text)), ("body_md", text),
                                ("summary", args.summary)) if v is not None}
    if args.notify_when_idle:
        wanted = SubscriptionIn.model_validate_json(json.dumps(
            {"target": args.to, **({"message": fields} if text is not None else {})}))
        sub = await subscriptions.subscribe(svc.store, svc.settings, svc.publisher, who, wanted)
        sent: Json | None = sub.body.pop("message", None)
        return {**(sent or {}), "subscription": sub.body}
    body = SendIn.model_validate_json(json.dumps({**fields, "to": [args.to]}))
    return (await sending.send(svc.store, svc.settings, svc.publisher, who, body)).body


@_tool("set_presence", (
    "Tell Courier whether you are busy, idle, exited or source_lost "
    "(PUT /v1/agents/me/presence); going idle sends the idle notices others wait for."))
async def _set_presence(svc: ToolServices, who: Caller, args: PresenceIn) -> Json:
    return await directory.set_presence(svc.store, svc.settings, who, args, svc.publisher)


def _inline(schema: Json, defs: Json) -> Json:
    """A property schema with local ``$ref``s replaced by their definitions."""
    if "$ref" in schema:
        return _inline({**defs[schema["$ref"].rsplit("/", 1)[-1]],
                        **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
    return {k: ([_inline(x, defs) if isinstance(x, dict) else x for x in v]
                if isinstance(v, list) else _inline(v, defs) if isinstance(v, dict) else v)
            for k, v in schema.items()}


def _untitled(schema: Json) -> Json:
    """A schema without pydantic's generated titles (the descriptions say more)."""
    out: Json = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key == "properties":  # field names, whichever they are, each with its schema
            value = {field: _untitled(prop) for field, prop in value.items()}
        elif isinstance(value, dict):
            value = _untitled(value)
        elif isinstance(value, list):
            value = [_untitled(x) if isinstance(x, dict) else x for x in value]
        out[key] = value
    return out
