"""The store's live side: presence, idle subscriptions and the agents' event streams.

The API uses ``Live`` (asyncio); the sweeper expires subscriptions with
``expire_subscriptions`` (synchronous). Every key comes from ``keys``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import redis

from messaging.store import connect, keys
from messaging.store.failures import translated
from messaging.store.scripts import scripts_for
from messaging.types import Json

# How many times a presence report is retried when subscriptions appear
# between reading the waiting list and running the script.
PRESENCE_ATTEMPTS = 50
EXPIRE_BATCH = 200
# The share of the connection's socket timeout a blocking stream read may wait.
SOCKET_SHARE = 0.5
# redis-py's socket timeout when the URL sets none.
DEFAULT_SOCKET_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Fired:
    """An idle notice just written: its delivery waits for publishing."""

    subscription_id: str
    delivery_id: str
    transport: str


@dataclass(frozen=True)
class Subscription:
    """What the subscribe script is asked: one idle subscription, with its notice's ids.

    ``fields`` is the subscription's hash as it is stored; ``after_message`` says
    a message was sent with it, so the notice waits for the target's next idle
    or exit even when it is idle now.
    """

    subscription_id: str
    target_id: str
    expires_ms: int
    after_message: bool
    subscriber_id: str
    notice_message_id: str
    notice_delivery_id: str
    notice_thread_id: str
    fields: Json


@dataclass(frozen=True)
class Subscribed:
    """What the subscribe script did: ``status`` is ``waiting``, ``notified`` (the
    notice was sent at once: its delivery and transport, "" when held for the
    subscriber's user), ``exists`` (a retried request) or ``refused`` (``reason``)."""

    status: str
    reason: str = ""
    delivery_id: str = ""
    transport: str = ""


def _fired(flat: list[Any]) -> list[Fired]:
    return [Fired(str(flat[i]), str(flat[i + 1]), str(flat[i + 2]))
            for i in range(0, len(flat), 3)]


def _notice_keys(project_id: str, sub_id: str, entry: Json) -> list[str]:
    """The five keys a notice touches, from a waiting-list entry {s, m, d, t}."""
    return [keys.subscription(project_id, sub_id), keys.message(project_id, entry["m"]),
            keys.delivery(project_id, entry["d"]), keys.thread(project_id, entry["t"]),
            keys.events(project_id, entry["s"])]


def _shared_keys(project_id: str) -> list[str]:
    """KEYS[1..7] of every notice script, as ``notice_context`` (notice_lib.lua) names them."""
    return [keys.agents(project_id), keys.seq(project_id), keys.due(project_id),
            keys.subscriptions_due(project_id), keys.idle_subscriptions(project_id),
            keys.retention(project_id), keys.held(project_id)]


def _shared_args(now_us: int, due_ms: int) -> list[str]:
    """ARGV[1..4] of every notice script: now, the notices' outbox due time, the events
    stream cap, how long a subscription is kept after its notice."""
    return [str(now_us), str(due_ms), str(keys.EVENTS_MAXLEN), str(keys.SUBSCRIPTION_KEEP_S)]


@translated
class Live:
    """Presence, subscriptions and event streams on one asyncio client."""

    def __init__(self, client: connect.AsyncClient,
                 waits: connect.AsyncClient | None = None) -> None:
        self.client = client
        # Blocking reads wait on connections of their own, never the API's.
        self.waits = waits or client
        self.scripts = scripts_for(client)

    # subscriptions

    async def resolve_target(
        self, project_id: str, target: str, subscriber_id: str
    ) -> tuple[Json | None, str, list[str]]:
        """The agent a target string reaches for this subscriber, or (None, why not, the
        ``Name [ref]`` labels of the agents a name is ambiguous between)."""
        verdict, value, *tied = await self.scripts["resolve_target"](
            keys=[keys.agents(project_id), keys.names(project_id), keys.refs(project_id)],
            args=[target, subscriber_id])
        if verdict == "ok":
            return json.loads(value), "", []
        return None, str(value), json.loads(tied[0]) if tied else []

    async def subscribe(self, project_id: str, sub: Subscription, now_us: int,
                        due_ms: int) -> Subscribed:
        """Register ``sub`` on its target, or send its notice at once (``due_ms``: when
        a notice sent at once is due in the outbox)."""
        entry = {"s": sub.subscriber_id, "m": sub.notice_message_id,
                 "d": sub.notice_delivery_id, "t": sub.notice_thread_id}
        request = {"id": sub.subscription_id, "target_id": sub.target_id,
                   "expires_ms": str(sub.expires_ms), "after_message": sub.after_message,
                   "entry": entry}
        flat = [str(v) for kv in sub.fields.items() for v in kv]
        raw = await self.scripts["subscribe"](
            keys=_shared_keys(project_id) + _notice_keys(project_id, sub.subscription_id,
                                                         entry),
            args=[*_shared_args(now_us, due_ms), json.dumps(request), *flat])
        answer = json.loads(raw)
        return Subscribed(answer["status"], answer.get("reason", ""),
                          answer.get("delivery_id", ""), answer.get("transport", ""))

    async def get_subscription(self, project_id: str, sub_id: str) -> Json | None:
        """One subscription's hash, or None."""
        found: Any = await self.client.hgetall(keys.subscription(project_id, sub_id))
        return dict(found) if found else None

    # presence

    async def set_presence(
        self, project_id: str, agent_id: str, state: str, now_us: int, due_ms: int,
        lease_us: int = 0,
    ) -> tuple[Json | None, list[Fired]]:
        """Record a presence report and send the idle notices it triggers. A busy or
        idle report holds for ``lease_us`` (0: until the next report).

        Returns the agent after the change (None when missing) and the notices.
        """
        for _ in range(PRESENCE_ATTEMPTS):
            waiting: Json = {}
            if state in ("idle", "exited"):
                raw = await self.client.hget(keys.idle_subscriptions(project_id), agent_id)
                waiting = json.loads(raw) if raw else {}
            sub_ids = list(waiting)
            script_keys = _shared_keys(project_id)
            for sid in sub_ids:
                script_keys += _notice_keys(project_id, sid, waiting[sid])
            out = await self.scripts["set_presence"](
                keys=script_keys,
                args=[*_shared_args(now_us, due_ms), agent_id, state, json.dumps(sub_ids),
                      lease_us])
            if not out:
                return None, []
            if out[0] != "retry":
                return json.loads(out[0]), _fired(out[1:])
        raise RuntimeError("presence report kept racing new subscriptions; try again")

    # event streams

    async def last_event_id(self, project_id: str, agent_id: str) -> str:
        """The id of the newest event of the agent's stream ("0-0" when empty)."""
        newest = await self.client.xrevrange(keys.events(project_id, agent_id), count=1)
        return str(newest[0][0]) if newest else "0-0"

    async def read_events(
        self, project_id: str, positions: dict[str, str], count: int, block_ms: int | None,
    ) -> dict[str, list[tuple[str, Json]]]:
        """Up to ``count`` events per agent past its position, by agent id.

        With ``block_ms`` the read waits up to that long for one (on a connection
        kept for such waits); without, it answers at once.
        """
        reader = self.waits if block_ms is not None else self.client
        if block_ms is not None:
            # A block as long as the socket timeout would fail as a timeout.
            timeout_s = connect.socket_timeout_s(reader, DEFAULT_SOCKET_TIMEOUT_S)
            if timeout_s:
                block_ms = max(1, min(block_ms, int(timeout_s * 1000 * SOCKET_SHARE)))
        streams: dict[Any, Any] = {keys.events(project_id, agent): after
                                   for agent, after in positions.items()}
        agent_of = {keys.events(project_id, agent): agent for agent in positions}
        found: Any = await reader.xread(streams, count=count, block=block_ms)
        return {agent_of[str(stream)]: [(str(eid), dict(fields)) for eid, fields in entries]
                for stream, entries in (found or [])}

    async def claim_stream(self, project_id: str, agent_id: str, stream_id: str, now_ms: int,
                           lease_ms: int, most: int) -> bool:
        """Hold or renew one of the agent's ``most`` open-stream slots; False when all are taken."""
        held = await self.scripts["claim_stream"](keys=[keys.open_streams(project_id, agent_id)],
                                        args=[stream_id, now_ms, lease_ms, most])
        return bool(held)

    async def release_stream(self, project_id: str, agent_id: str, stream_id: str) -> None:
        """Give back a stream's slot."""
        await self.client.zrem(keys.open_streams(project_id, agent_id), stream_id)

    async def trimmed_past(self, project_id: str, agent_id: str, after: str) -> bool:
        """True when events past ``after`` may have been trimmed away (a resume would miss some).

        Trimming removes the oldest entries: past ``after`` something is gone
        when entries were removed and ``after`` is older than the oldest kept.
        """
        try:
            info = await self.client.xinfo_stream(keys.events(project_id, agent_id))
        except redis.exceptions.ResponseError:  # no such stream: nothing was ever trimmed
            return False
        if int(info.get("entries-added", 0)) <= int(info.get("length", 0)):
            return False
        first = info.get("first-entry")
        if not first:  # all removed
            return stream_id(after) < stream_id(str(info["last-generated-id"]))
        return stream_id(after) < stream_id(str(first[0]))


def stream_id(value: str) -> tuple[int, int]:
    """A stream entry id as a pair that sorts like the stream."""
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


# The largest part of a stream entry id (each is an unsigned 64-bit number).
STREAM_ID_PART_MAX = 2**64 - 1
STREAM_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")


def parse_stream_id(value: str) -> str | None:
    """A stream entry id as given by a client, normalized; None when malformed or out of range."""
    found = STREAM_ID.fullmatch(value.strip())
    if found is None:
        return None
    ms, seq = int(found.group(1)), int(found.group(2) or 0)
    if ms > STREAM_ID_PART_MAX or seq > STREAM_ID_PART_MAX:
        return None
    return f"{ms}-{seq}"


def expire_subscriptions(client: connect.SyncClient, project_id: str, now_us: int) -> list[Fired]:
    """Send the ``expired`` notice of each waiting subscription whose time ran out (sync)."""
    now_ms = now_us // 1000
    due_key = keys.subscriptions_due(project_id)
    sub_ids = [str(s) for s in client.zrangebyscore(due_key, "-inf", now_ms, start=0,
                                                    num=EXPIRE_BATCH)]
    if not sub_ids:
        return []
    pipe = client.pipeline(transaction=False)
    for sid in sub_ids:
        pipe.hmget(keys.subscription(project_id, sid), "target_id", "subscriber_id",
                   "notice_message_id", "notice_delivery_id", "notice_thread_id")
    rows = pipe.execute()
    script_keys = _shared_keys(project_id)
    pairs = []
    for sid, (target_id, subscriber_id, mid, did, tid) in zip(sub_ids, rows, strict=True):
        if target_id is None:  # a due entry without its subscription: nothing to send
            client.zrem(due_key, sid)
            continue
        entry = {"s": subscriber_id, "m": mid, "d": did, "t": tid}
        script_keys += _notice_keys(project_id, sid, entry)
        pairs.append([sid, target_id])
    if not pairs:
        return []
    flat = scripts_for(client)["expire_subscriptions"](
        keys=script_keys, args=[*_shared_args(now_us, now_ms), str(now_ms), json.dumps(pairs)])
    return _fired(list(flat))
