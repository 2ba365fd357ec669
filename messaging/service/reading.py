"""Reading: messages, threads, the inbox with exact cursors, read and ack, deliveries.

Reading never dispatches. ``delivery_observed`` is recorded where the reader shows
the mail to the agent: the agent's own inbox read (unless it says ``shown=false``),
``POST /v1/deliveries/{id}/observed``, an MCP tool result. A thread, a message or
a stream read alone observes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Protocol

from messaging import ids
from messaging.config import Settings
from messaging.errors import CourierError, invalid, not_found
from messaging.models import HUMAN, THREAD_LIMIT_DEFAULT, HostEventIn, InboxQuery
from messaging.service.caller import Caller, CallerKind
from messaging.service.retention import missing
from messaging.service.views import deliveries_of, delivery_view, message_view, withheld_from
from messaging.store.schema import DeliveryField, senders, unpack_message
from messaging.store.store import Store
from messaging.timefmt import now_us, rfc3339
from messaging.types import Json

# How many inbox entries one store read looks at when filters skip some.
SCAN_BATCH = 200
URGENT = ("high", "urgent")


def _project_of(caller: Caller, scoped_id: str, what: str) -> str:
    """The project of an id, if the caller may look into it at all."""
    project_id = ids.project_of(scoped_id)
    if project_id is None:
        raise not_found(what)
    if caller.kind is not CallerKind.OPERATOR and caller.project_id != project_id:
        raise not_found(what)
    return project_id


def visible(caller: Caller, record: Json, unpacked: Json | None = None) -> Json | None:
    """The message as the caller may see it, or None.

    ``unpacked``: the record's message already unpacked (a body is parsed once per read).
    """
    msg = unpacked if unpacked is not None else unpack_message(record["json"])
    if caller.kind is not CallerKind.AGENT or caller.agent_id in senders(msg):
        return message_view(record, full=True, unpacked=msg)
    if caller.agent_id in {a for _, a in deliveries_of(record)} - withheld_from(record):
        return message_view(record, full=False, viewer_id=caller.agent_id, unpacked=msg)
    return None


async def get_message(store: Store, settings: Settings, caller: Caller,
                      message_id: str) -> Json:
    """One message: everything for its sender, no one else's bcc for a recipient.

    Raises:
        CourierError: NOT_FOUND, or ARCHIVED for a message retention removed.
    """
    project_id = _project_of(caller, message_id, "message")
    record = await store.get_message(project_id, message_id)
    if record is None:
        raise await missing(store, settings, caller, project_id, message_id, "message")
    view = visible(caller, record)
    if view is None:
        raise not_found("message")
    return view


async def shown_message(store: Store, caller: Caller, message_id: str) -> Json | None:
    """The message as ``caller`` may see it; None when it is not there or not theirs to
    see.

    Raises:
        CourierError: NOT_FOUND for an id of another project (or none).
    """
    record = await store.get_message(_project_of(caller, message_id, "message"), message_id)
    return visible(caller, record) if record is not None else None


async def _thread_ids(store: Store, project_id: str, thread_id: str) -> list[str]:
    """The ids that may be messages of a thread, oldest first."""
    mids = await store.thread_message_ids(project_id, thread_id)
    if thread_id.startswith("msg_") and thread_id not in mids:
        # A message that starts a thread is its first entry, kept only in itself.
        mids.insert(0, thread_id)
    return mids


def _of_thread(records: Iterable[Json | None], thread_id: str) -> Iterator[tuple[Json, Json]]:
    """The records of ``thread_id``, each with its message unpacked (once), in order."""
    for record in records:
        if record is not None:
            msg = unpack_message(record["json"])
            if msg["thread_id"] == thread_id:
                yield record, msg


class KnownMessages(Protocol):
    """Messages a reader keeps without their bodies (a message never changes), so that
    a read of them asks the store only for what changes."""

    def head(self, message_id: str) -> Json | None:
        """The message as stored but its ``body_md``, if kept (the caller's copy)."""

    def keep(self, message_id: str, msg: Json) -> None:
        """Keep a message just read (unpacked, with its body)."""


# A thread read lets other requests run after parsing each this many bytes of stored
# messages, so a thread of long bodies does not hold the event loop while all of it
# is parsed.
PARSE_SLICE_BYTES = 256 * 1024


# A page of a thread holds at most this many bytes of stored messages (at least one
# message, however long), so a thread of long bodies is read a few at a time.
THREAD_PAGE_BYTES = 4 * 1024 * 1024
# The thread's first message is kept only in itself: its place in the order is 0.
THREAD_START_SEQ = 0

Entry = tuple[str, int, int]  # a thread's message id, its sequence, its stored size


async def _thread_entries(store: Store, project_id: str, thread_id: str, after: int,
                          count: int) -> list[Entry]:
    """Up to ``count`` entries of the thread past sequence ``after`` (-1: from its start)."""
    entries = [e for e in await store.thread_page(project_id, thread_id, max(after, 0), count)
               if e[0] != thread_id]
    if after < THREAD_START_SEQ and thread_id.startswith("msg_"):
        size = await store.message_size(project_id, thread_id)
        entries.insert(0, (thread_id, THREAD_START_SEQ, size))
    return entries[:count]


def _within(entries: list[Entry], spent: int) -> list[Entry]:
    """The first entries that fit in what is left of a page's bytes (one at least,
    on a page that holds nothing yet)."""
    taken: list[Entry] = []
    for entry in entries:
        if spent and spent + entry[2] > THREAD_PAGE_BYTES:
            break
        taken.append(entry)
        spent += entry[2]
    return taken


class _ThreadPage:
    """A thread page being filled: the views the caller may see, the bytes read."""

    def __init__(self, caller: Caller, thread_id: str, known: KnownMessages | None) -> None:
        self.caller, self.thread_id, self.known = caller, thread_id, known
        self.views: list[Json] = []
        self.spent = 0

    async def read(self, store: Store, entries: list[Entry]) -> None:
        """Read ``entries`` and keep those of the thread the caller may see."""
        known = self.known
        mids = [mid for mid, _, _ in entries]
        heads = {} if known is None else {
            mid: head for mid in mids if (head := known.head(mid)) is not None}
        records = await store.get_messages(self.caller.project_id or "", mids,
                                           known=heads.keys())
        parsed = 0
        for mid, record in zip(mids, records, strict=True):
            if record is None:
                continue
            if (msg := heads.get(mid)) is None:
                msg = unpack_message(record["json"])
                parsed += len(record["json"])
                if known is not None:
                    known.keep(mid, msg)
            if msg["thread_id"] == self.thread_id and (
                    view := visible(self.caller, record, msg)) is not None:
                self.views.append(view)
            if parsed >= PARSE_SLICE_BYTES:  # a page of long bodies: let others run
                parsed = 0
                await asyncio.sleep(0)
        self.spent += sum(size for _, _, size in entries)


async def get_thread(store: Store, caller: Caller, thread_id: str, cursor: str | None = None,
                     limit: int = THREAD_LIMIT_DEFAULT,
                     known: KnownMessages | None = None) -> Json:
    """One page of the thread's messages the caller may see, oldest first:
    ``{"thread_id", "messages", "next_cursor", "more"}``.

    A page ends after ``limit`` messages or once it holds ``THREAD_PAGE_BYTES`` of
    stored messages. ``next_cursor`` continues after the page (also after the last
    one: passed back, it gives what was posted since); ``more`` says whether the
    thread held entries past the page when it was read. With ``known``, the messages
    it keeps are read without their JSON, and their views carry no ``body_md``.
    """
    if caller.project_id is None:
        raise CourierError("FORBIDDEN", "threads are read with an agent or project token")
    start = after = -1 if not cursor else _parse_cursor(cursor)
    page = _ThreadPage(caller, thread_id, known)
    more = True
    while more and len(page.views) < limit:
        want = limit - len(page.views)
        entries = await _thread_entries(store, caller.project_id, thread_id, after, want + 1)
        taken = _within(entries[:want], page.spent)
        more = len(entries) > len(taken)
        if not taken:
            break
        await page.read(store, taken)
        after = taken[-1][1]
        if len(taken) < min(want, len(entries)):  # the page's bytes are spent
            break
    if not page.views and start < THREAD_START_SEQ and not more:
        raise not_found("thread")
    return {"thread_id": thread_id, "messages": page.views,
            "next_cursor": str(max(after, THREAD_START_SEQ)), "more": more}


# How many of a thread's messages one store read looks at for a participation check:
# the newest few first (a thread's recent posters are the likely callers), then more.
THREAD_FIRST_BATCH = 8
THREAD_BATCH = 200


async def takes_part(store: Store, caller: Caller, thread_id: str) -> bool:
    """True when the agent may post into ``thread_id``: it sent or may see a message
    of the thread. A thread with no message has no participant: thread ids are the
    server's (a thread's is its first message's id), never a poster's to claim.

    The project's human sees every thread of its project, so posts into any.
    """
    project_id, agent_id = caller.require_agent()
    mids = await _thread_ids(store, project_id, thread_id)
    end, size = len(mids), THREAD_FIRST_BATCH
    while end > 0:
        batch = mids[max(0, end - size):end]
        records = await store.get_messages(project_id, batch)
        for record, msg in _of_thread(reversed(records), thread_id):
            if agent_id == HUMAN or visible(caller, record, msg) is not None:
                return True
        end, size = end - len(batch), THREAD_BATCH
    return False


# Inbox sequences are whole numbers a double holds exactly (the inbox's scores).
CURSOR_DIGITS_MAX = 15


def _parse_cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > CURSOR_DIGITS_MAX:
        raise invalid("cursor", "pass back a next_cursor this API returned")
    return int(cursor)


def _wanted(q: InboxQuery, msg: Json, dlv: Json) -> bool:
    if q.topic is not None and msg.get("topic") != q.topic:
        return False
    if q.urgent_only and msg["importance"] not in URGENT:
        return False
    if q.wake_only and msg["notification_policy"] != "wake":
        return False
    if q.unobserved_only and dlv.get(DeliveryField.DELIVERY_OBSERVED_US):
        return False
    return not (q.unread_only and dlv.get("read_us"))


async def inbox(store: Store, caller: Caller, q: InboxQuery, *, shown: bool = False) -> Json:
    """A page of the caller's inbox after the cursor, oldest first; with ``shown`` (the
    caller puts it into its agent's conversation) each message returned is observed.

    The cursor is the arrival sequence of the last entry looked at, so a page
    never skips or repeats an entry, however many arrive between calls.
    """
    project_id, agent_id = caller.require_agent()
    return await inbox_of(store, caller, project_id, agent_id, q, shown=shown)


async def inbox_of(store: Store, caller: Caller, project_id: str, agent_id: str,
                   q: InboxQuery, *, shown: bool = False) -> Json:
    """A page of one recipient's inbox (an agent's, or the project's human's)."""
    after = _parse_cursor(q.cursor)
    items: list[Json] = []
    while len(items) < q.limit:
        filtered = (q.topic is not None or q.unread_only or q.urgent_only or q.wake_only
                    or q.unobserved_only)
        batch = max(q.limit, SCAN_BATCH) if filtered else q.limit - len(items)
        rows = await store.inbox_after(project_id, agent_id, after, batch)
        if not rows:
            break
        dids = [d for d, _ in rows]
        dlvs = await store.get_deliveries(project_id, dids)
        mids = [d["message_id"] if d else "" for d in dlvs]
        records = await store.get_messages(project_id, mids)
        for (did, score), dlv, record in zip(rows, dlvs, records, strict=True):
            if len(items) == q.limit:
                break
            after = score
            if not dlv or not record:
                continue
            msg = visible(caller, record)
            if msg is not None and _wanted(q, msg, dlv):
                items.append({**_cut(msg, q.body_max_chars), "delivery_id": did,
                              "read_ts": rfc3339(dlv.get("read_us")),
                              "ack_ts": rfc3339(dlv.get("ack_us")),
                              "pushed_ts": rfc3339(dlv.get(DeliveryField.PUSHED_US))})
    if shown:
        await store.observe(project_id, agent_id,
                            [(m["delivery_id"], m["sender_id"]) for m in items], now_us())
    return {"messages": items, "next_cursor": str(after)}


def _cut(msg: Json, max_chars: int | None) -> Json:
    """``msg`` with its body cut to ``max_chars`` characters, saying so, when longer."""
    body = msg.get("body_md") or ""
    if max_chars is None or len(body) <= max_chars:
        return msg
    return {**msg, "body_md": body[:max_chars], "body_cut": True, "body_chars": len(body)}


async def _own_delivery(store: Store, settings: Settings, caller: Caller,
                        message_id: str) -> tuple[str, str]:
    project_id, agent_id = caller.require_agent()
    record = await store.get_message(project_id, message_id) if ids.project_of(
        message_id) == project_id else None
    if record is None:
        raise await missing(store, settings, caller, project_id, message_id, "message")
    for did, aid in deliveries_of(record):
        if aid == agent_id and aid not in withheld_from(record):
            return project_id, did
    raise not_found("message")


async def mark(store: Store, settings: Settings, caller: Caller, message_id: str,
               kind: str) -> Json:
    """Mark a received message read, or acknowledged (which also reads it)."""
    project_id, did = await _own_delivery(store, settings, caller, message_id)
    marked = await store.mark(project_id, did, kind, now_us())
    if not marked:  # removed by retention since it was read above
        raise await missing(store, settings, caller, project_id, message_id, "message")
    read_us, ack_us = marked
    return {"message_id": message_id, "delivery_id": did,
            "read_ts": rfc3339(read_us or None), "ack_ts": rfc3339(ack_us or None)}


def _withheld(dlv: Json) -> bool:
    """True for a held (or declined) delivery: its recipient learns of it only once
    it is released."""
    return dlv.get("held") == "1" or dlv.get("declined") == "1"


def _may_read_delivery(caller: Caller, dlv: Json, sent_by: set[str]) -> bool:
    if caller.sees_project(dlv["_project_id"]):
        return True
    if caller.agent_id is not None and caller.agent_id in sent_by:
        return True
    return caller.agent_id == dlv["agent_id"] and not _withheld(dlv)


async def get_delivery(store: Store, settings: Settings, caller: Caller, delivery_id: str) -> Json:
    """One delivery, for its sender, its recipient and the project token."""
    project_id = _project_of(caller, delivery_id, "delivery")
    (dlv,) = await store.get_deliveries(project_id, [delivery_id])
    if dlv is None:
        raise await missing(store, settings, caller, project_id, delivery_id, "delivery")
    record = await store.get_message(project_id, dlv["message_id"])
    sent_by = senders(unpack_message(record["json"])) if record else set()
    if not _may_read_delivery(caller, {**dlv, "_project_id": project_id}, sent_by):
        raise not_found("delivery")
    return delivery_view(dlv)


async def message_deliveries(store: Store, settings: Settings, caller: Caller,
                             message_id: str) -> Json:
    """The deliveries of a message the caller may read."""
    project_id = _project_of(caller, message_id, "message")
    record = await store.get_message(project_id, message_id)
    if record is None:
        raise await missing(store, settings, caller, project_id, message_id, "message")
    sent_by = senders(unpack_message(record["json"]))
    dids = [d for d, _ in deliveries_of(record)]
    dlvs = await store.get_deliveries(project_id, dids)
    rows = [
        delivery_view(d) for d in dlvs
        if d and _may_read_delivery(caller, {**d, "_project_id": project_id}, sent_by)
    ]
    if not rows:
        raise not_found("message")
    return {"message_id": message_id, "deliveries": rows}


async def _received(store: Store, settings: Settings, caller: Caller,
                    delivery_id: str) -> tuple[str, str, Json]:
    """(project, agent, delivery) of a delivery the calling agent received and may see.

    Raises:
        CourierError: NOT_FOUND for any other delivery.
    """
    project_id, agent_id = caller.require_agent()
    (dlv,) = await store.get_deliveries(project_id, [delivery_id]) if ids.project_of(
        delivery_id) == project_id else (None,)
    if dlv is None:
        raise await missing(store, settings, caller, project_id, delivery_id, "delivery")
    if dlv["agent_id"] != agent_id or _withheld(dlv):
        raise not_found("delivery")
    return project_id, agent_id, dlv


async def _delivery_now(store: Store, project_id: str, delivery_id: str) -> Json:
    (dlv,) = await store.get_deliveries(project_id, [delivery_id])
    if dlv is None:
        raise not_found("delivery")
    return delivery_view(dlv)


async def observed(store: Store, settings: Settings, caller: Caller, delivery_id: str) -> Json:
    """The recipient's host says it showed this delivery."""
    project_id, agent_id, dlv = await _received(store, settings, caller, delivery_id)
    await store.observe(project_id, agent_id, [(delivery_id, dlv["sender_id"])], now_us(),
                        confirmed=True)
    return await _delivery_now(store, project_id, delivery_id)


async def host_event(store: Store, settings: Settings, caller: Caller, delivery_id: str,
                     event: HostEventIn) -> Json:
    """The recipient's host says what else it did with this delivery (pushed it, resumed
    its session for it): one more of the delivery's host events, never an observation."""
    project_id, agent_id, _ = await _received(store, settings, caller, delivery_id)
    if not await store.record_host_event(project_id, agent_id, delivery_id, event.kind,
                                         event.detail or "", now_us()):
        raise not_found("delivery")
    return await _delivery_now(store, project_id, delivery_id)


async def shown_to(store: Store, settings: Settings, caller: Caller, message_id: str) -> Json:
    """One message as ``get_message`` answers it, recorded observed where the calling agent
    received it: the caller shows it to its agent's conversation (an MCP tool result).

    Raises:
        CourierError: as ``get_message``.
    """
    msg = await get_message(store, settings, caller, message_id)
    try:
        project_id, did = await _own_delivery(store, settings, caller, message_id)
    except CourierError:
        return msg  # the caller sent it and did not receive it: nothing to observe
    await store.observe(project_id, str(caller.agent_id), [(did, msg["sender_id"])], now_us())
    return msg
