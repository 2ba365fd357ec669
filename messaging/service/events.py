"""The live event stream of one agent, as Server-Sent Events.

The stream is the agent's Redis stream (``keys.events``): workers add
``message`` (new mail) and ``delivery`` (a change to one of its sends'
deliveries) entries, idle notices add ``idle_notice``. Each SSE event's id is
the stream entry's id, so a client that reconnects with ``Last-Event-ID`` gets
exactly the entries after it: nothing lost, nothing twice.

Events:
    message      the message as the recipient may see it (an inbox item: the
                 message, ``delivery_id``, ``read_ts``, ``ack_ts``) plus
                 ``wake``: true for ``wake`` mail, false for ``quiet`` mail,
                 which a host must not wake its agent for. Sending the event
                 records ``delivery_observed``.
    idle_notice  {subscription_id, target, target_id, state (idle | exited |
                 expired), message_id, delivery_id, notification_policy, wake}
    delivery     {delivery_id, message_id, recipient, stage, outcome}
    resync       (no id) events after the client's Last-Event-ID may have been
                 trimmed from the stream: read the inbox to catch up
Comments (``: ping``) are heartbeats.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import ServerSentEvent

from messaging.errors import CourierError, invalid
from messaging.service import reading
from messaging.service.caller import Caller
from messaging.store.live import parse_stream_id
from messaging.store.store import Store
from messaging.timefmt import now_us, rfc3339

Json = dict[str, Any]

HEARTBEAT_S = 15
READ_BLOCK_MS = 5_000  # shortened to fit the store's socket timeout
READ_COUNT = 100
# How long a client waits before reconnecting after a dropped connection.
RETRY_MS = 1_000
RESYNC_REASON = ("events after this id may have been trimmed from the stream; read the inbox "
                 "to catch up")


async def start(store: Store, caller: Caller, last_event_id: str | None) -> str:
    """The stream position to follow from: the given id, or the newest event now.

    Raises:
        CourierError: FORBIDDEN for a token that is not an agent's;
            INVALID_ARGUMENT for a malformed ``Last-Event-ID``.
    """
    project_id, agent_id = caller.require_agent()
    if last_event_id is None or last_event_id == "":
        return await store.live.last_event_id(project_id, agent_id)
    parsed = parse_stream_id(last_event_id)
    if parsed is None:
        raise invalid("Last-Event-ID", "pass back the id of an event this stream sent")
    return parsed


async def _message_item(store: Store, caller: Caller, data: Json) -> Json | None:
    """A ``message`` entry as the inbox shows it, with ``wake``; records it observed."""
    project_id, agent_id = caller.require_agent()
    try:
        msg = await reading.get_message(store, caller, data["message_id"])
    except CourierError:
        return None  # not (or no longer) visible to this agent: nothing to show
    (dlv,) = await store.get_deliveries(project_id, [data["delivery_id"]])
    dlv = dlv or {}
    policy = dlv.get("policy") or data.get("notification_policy") or msg["notification_policy"]
    await store.observe(project_id, agent_id, [(data["delivery_id"], msg["sender_id"])],
                        now_us())
    return {**msg, "notification_policy": policy, "delivery_id": data["delivery_id"],
            "read_ts": rfc3339(dlv.get("read_us")), "ack_ts": rfc3339(dlv.get("ack_us")),
            "wake": policy == "wake"}


async def render(store: Store, caller: Caller, entry_id: str, fields: Json) -> ServerSentEvent:
    """One stream entry as an SSE event whose id is the entry's id."""
    kind = fields.get("type", "event")
    try:
        data: Json = json.loads(fields.get("data") or "{}")
    except ValueError:
        data = {"raw": fields.get("data")}
    if kind == "message":
        item = await _message_item(store, caller, data)
        if item is not None:
            data = item
        else:
            kind, data = "message_gone", {"message_id": data.get("message_id")}
    elif kind == "idle_notice":
        data = {**data, "wake": data.get("notification_policy", "wake") == "wake"}
    return ServerSentEvent(json.dumps(data, ensure_ascii=False), event=kind, id=entry_id)


async def stream(store: Store, caller: Caller, after: str) -> AsyncIterator[ServerSentEvent]:
    """The caller's events after ``after``, as they come, until the client leaves."""
    project_id, agent_id = caller.require_agent()
    yield ServerSentEvent(comment=f"courier events after {after}", retry=RETRY_MS)
    if await store.live.trimmed_past(project_id, agent_id, after):
        yield ServerSentEvent(json.dumps({"after": after, "reason": RESYNC_REASON}),
                              event="resync")
    while True:
        entries = await store.live.events_after(project_id, agent_id, after, READ_COUNT,
                                                READ_BLOCK_MS)
        for entry_id, fields in entries:
            after = entry_id
            yield await render(store, caller, entry_id, fields)
