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
                 observes nothing: the host that shows it says so.
    idle_notice  {subscription_id, target, target_id, state (idle | exited |
                 expired), message_id, delivery_id, notification_policy, wake}
    delivery     {delivery_id, message_id, recipient, stage, outcome}
    resync       (no id) events after the client's Last-Event-ID may have been
                 trimmed from the stream: read the inbox to catch up
Comments (``: ping``) are heartbeats.

A stream ends once its agent's token no longer admits it (rotated, or the
agent retired or closed): the agent's live token is read before each batch of
entries is sent and at each renewal, so no entry written after the token
changed reaches the stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from sse_starlette import ServerSentEvent

from messaging.errors import CourierError, invalid
from messaging.service import reading
from messaging.service.caller import Caller
from messaging.store.facts import Lru
from messaging.store.live import parse_stream_id, stream_id
from messaging.store.store import Store
from messaging.timefmt import now_us, rfc3339
from messaging.types import Json

HEARTBEAT_S = 15
READ_BLOCK_MS = 1_000  # a stream opened meanwhile joins its project's reader at the next read
READ_COUNT = 100
READ_RETRY_S = 1.0
# Message entries whose event is kept for the other streams of their agent, at most,
# and for how long: the streams of one agent show an entry within moments of each other.
RENDERED_KEPT = 1_000
RENDERED_FOR_S = 5.0
# Entries queued for one slow stream before it is ended (the client resumes by Last-Event-ID).
QUEUED_MAX = 1_000
# Open streams per agent, across every API process: each holds a slot leased in the store.
STREAMS_PER_AGENT = 4
STREAM_LEASE_MS = 60_000
STREAM_RENEW_S = 20.0
STREAM_RETRY_AFTER_S = 5
REVOKED_COMMENT = "the token of this stream no longer admits it: the stream ends"
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
    """A ``message`` entry as the inbox shows it, with ``wake``. Streaming it observes
    nothing: a stream carries mail to a host, which may or may not show it."""
    project_id, _ = caller.require_agent()
    try:
        msg = await reading.shown_message(store, caller, data["message_id"])
    except CourierError:
        msg = None
    if msg is None:
        return None  # not (or no longer) visible to this agent: nothing to show
    (dlv,) = await store.get_deliveries(project_id, [data["delivery_id"]])
    dlv = dlv or {}
    policy = dlv.get("policy") or data.get("notification_policy") or msg["notification_policy"]
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


class Listener:
    """One open stream: its agent, its position, the entries fanned out to it."""

    def __init__(self, agent_id: str, after: str) -> None:
        self.agent_id = agent_id
        self.after = after
        self.entries: asyncio.Queue[tuple[str, Json]] = asyncio.Queue(QUEUED_MAX)
        self.overflowed = False

    def offer(self, entry_id: str, fields: Json) -> None:
        """Queue an entry past this listener's position (a listener that falls far behind
        is marked overflowed: its stream ends and the client resumes by Last-Event-ID)."""
        if self.overflowed or stream_id(entry_id) <= stream_id(self.after):
            return
        try:
            self.entries.put_nowait((entry_id, fields))
            self.after = entry_id
        except asyncio.QueueFull:
            self.overflowed = True


class Hub:
    """The event streams of one API process: one reader per project fans entries out.

    Each reader waits on one connection of the store's own for blocking reads
    (``Store.waits``), whatever the number of streams open in the project, so
    open streams never hold connections the rest of the API needs. An agent's
    streams in this process get the same entries at the same moment: each
    ``message`` entry is rendered (read from the store) once
    for all of them.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.listeners: dict[str, set[Listener]] = {}
        self.readers: dict[str, asyncio.Task[None]] = {}
        # The latest message entries rendered, by (project, agent, entry id): the
        # rendering, and when it started (monotonic seconds).
        self._rendered: Lru[tuple[str, str, str], tuple[asyncio.Task[ServerSentEvent], float]] = (
            Lru(RENDERED_KEPT))

    async def render(self, caller: Caller, entry_id: str, fields: Json) -> ServerSentEvent:
        """One entry as its SSE event; a ``message`` entry rendered once for the streams of
        its agent that show it within ``RENDERED_FOR_S`` (a stream resumed later renders
        it anew; a failed rendering is forgotten, so the next stream tries again)."""
        if fields.get("type") != "message":
            return await render(self.store, caller, entry_id, fields)
        project_id, agent_id = caller.require_agent()
        key = (project_id, agent_id, entry_id)
        now = time.monotonic()
        kept = self._rendered.get(key)
        if kept is not None and now - kept[1] <= RENDERED_FOR_S:
            task = kept[0]
        else:
            task = asyncio.ensure_future(render(self.store, caller, entry_id, fields))
            task.add_done_callback(lambda done: self._forget_failed(key, done))
            self._rendered.put(key, (task, now))
        # Shielded: a stream that ends meanwhile leaves the rendering to the others.
        return await asyncio.shield(task)

    def _forget_failed(self, key: tuple[str, str, str],
                       done: asyncio.Task[ServerSentEvent]) -> None:
        kept = self._rendered.get(key)
        if (done.cancelled() or done.exception() is not None) and kept and kept[0] is done:
            self._rendered.drop(key)

    def join(self, project_id: str, listener: Listener) -> None:
        """Start fanning the project's entries out to ``listener``."""
        self.listeners.setdefault(project_id, set()).add(listener)
        reader = self.readers.get(project_id)
        if reader is None or reader.done():
            self.readers[project_id] = asyncio.create_task(self._read(project_id))

    def leave(self, project_id: str, listener: Listener) -> None:
        """Stop; the project's reader ends once nobody listens."""
        found = self.listeners.get(project_id)
        if found is not None:
            found.discard(listener)
            if not found:
                del self.listeners[project_id]

    async def close(self) -> None:
        """End every reader."""
        for reader in self.readers.values():
            reader.cancel()
        await asyncio.gather(*self.readers.values(), return_exceptions=True)

    async def _read(self, project_id: str) -> None:
        while listeners := self.listeners.get(project_id):
            positions: dict[str, str] = {}
            for one in listeners:
                known = positions.get(one.agent_id)
                if known is None or stream_id(one.after) < stream_id(known):
                    positions[one.agent_id] = one.after
            try:
                found = await self.store.live.read_events(
                    project_id, positions, READ_COUNT, READ_BLOCK_MS)
            except CourierError:  # the store is away: wait, then read again
                await asyncio.sleep(READ_RETRY_S)
                continue
            for one in list(self.listeners.get(project_id, ())):
                for entry_id, fields in found.get(one.agent_id, ()):
                    one.offer(entry_id, fields)
        self.readers.pop(project_id, None)


async def claim(store: Store, caller: Caller, stream: str) -> None:
    """Hold one of the agent's open-stream slots for ``stream`` (an event stream or an
    MCP stream: they share the agent's slots).

    Raises:
        CourierError: RATE_LIMITED when the agent has its most streams open already.
    """
    project_id, agent_id = caller.require_agent()
    if not await store.live.claim_stream(project_id, agent_id, stream, now_us() // 1000,
                                         STREAM_LEASE_MS, STREAMS_PER_AGENT):
        raise CourierError(
            "RATE_LIMITED", f"this agent has {STREAMS_PER_AGENT} streams (event or MCP) open "
            "already; close one first", {"open_streams_max": STREAMS_PER_AGENT},
            headers={"Retry-After": str(STREAM_RETRY_AFTER_S)})


async def live_token(store: Store, project_id: str, agent_id: str) -> str | None:
    """The hash of the agent's live token: rotating changes it, retiring or closing drops it."""
    return await store.live_token(project_id, agent_id)


def _batch(listener: Listener, first: tuple[str, Json]) -> list[tuple[str, Json]]:
    """``first`` and every entry queued behind it now."""
    batch = [first]
    while not listener.entries.empty():
        batch.append(listener.entries.get_nowait())
    return batch


async def release(store: Store, caller: Caller, stream: str) -> None:
    """Give back the slot ``stream`` holds (nothing to do when it holds none)."""
    project_id, agent_id = caller.require_agent()
    await store.live.release_stream(project_id, agent_id, stream)


async def stream(store: Store, hub: Hub, caller: Caller, stream: str, after: str
                 ) -> AsyncIterator[ServerSentEvent]:
    """The caller's events after ``after``, as they come, until the client leaves
    or its token no longer admits it.

    ``stream`` holds a slot (``claim``), renewed while open and given back at the end.
    """
    project_id, agent_id = caller.require_agent()
    listener = Listener(agent_id, after)
    token = await live_token(store, project_id, agent_id)
    try:
        yield ServerSentEvent(comment=f"courier events after {after}")
        if await store.live.trimmed_past(project_id, agent_id, after):
            yield ServerSentEvent(json.dumps({"after": after, "reason": RESYNC_REASON}),
                                  event="resync")
        hub.join(project_id, listener)
        renew_at = time.monotonic() + STREAM_RENEW_S
        while not listener.overflowed:
            # Wait until the renewal is due, not a fixed period: an event loop's timer
            # may fire a little before the clock says, and a fixed wait that ends just
            # short of the renewal would put it off a whole period.
            try:
                first = await asyncio.wait_for(listener.entries.get(),
                                               max(0.0, renew_at - time.monotonic()))
                batch = _batch(listener, first)
                due = time.monotonic() >= renew_at
            except TimeoutError:
                batch, due = [], True
            # One read per batch: the batch was written to the stream before this read, so
            # while the token still admits, none of it came after a revocation.
            if (batch or due) and await live_token(store, project_id, agent_id) != token:
                yield ServerSentEvent(comment=REVOKED_COMMENT)
                return
            for entry_id, fields in batch:
                yield await hub.render(caller, entry_id, fields)
            if due:
                await store.live.claim_stream(project_id, agent_id, stream, now_us() // 1000,
                                              STREAM_LEASE_MS, STREAMS_PER_AGENT)
                renew_at = time.monotonic() + STREAM_RENEW_S
    finally:
        hub.leave(project_id, listener)
        await asyncio.shield(store.live.release_stream(project_id, agent_id, stream))
