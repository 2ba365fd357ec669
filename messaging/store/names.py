"""Names not yet registered: authorizations, and the deliveries waiting for them.

A send to an authorized name no agent has registered waits in the name's
waiting set (``admit_message.lua``). The name's first registration binds them
(``bind_name.lua``, by the rules of admission); its expiry (the sweeper) or
deletion ends them ``failed`` (``end_name.lua``). The API uses ``NameRecords``
(asyncio); the sweeper uses ``expire_names`` (synchronous).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from messaging.store import connect, keys
from messaging.store.failures import translated
from messaging.store.schema import DeliveryField
from messaging.store.scripts import scripts_for
from messaging.types import Json

# How many times binding or ending is tried again when a send to the name
# lands between reading its waiting deliveries and running the script.
SETTLE_ATTEMPTS = 50
EXPIRE_BATCH = 100
ERROR_EXPIRED = ("no agent registered the name {name} before its authorization ran out; "
                 "nothing was dispatched")
ERROR_DELETED = ("no agent registered the name {name} before its authorization was "
                 "deleted; nothing was dispatched")


@dataclass(frozen=True)
class Bound:
    """A waiting delivery just bound and put in the outbox: publish it."""

    delivery_id: str
    transport: str


def _name_keys(project_id: str, name: str) -> list[str]:
    """The name's keys, as ``name_keys`` of names_lib.lua names them."""
    return [keys.allowed_names(project_id), keys.allowed_due(project_id),
            keys.waiting(project_id, name), keys.stats(project_id)]


def _bind_call(project_id: str, name: str, rows: list[tuple[str, str, str]], now_us: int,
               due_ms: int) -> tuple[list[str], list[str]]:
    """KEYS and ARGV of bind_name.lua; ``rows`` are (delivery, message, sender) ids."""
    script_keys = [keys.agents(project_id), keys.names(project_id), keys.refs(project_id),
                   *_name_keys(project_id, name), keys.due(project_id), keys.held(project_id)]
    for did, mid, sender in rows:
        script_keys += [keys.delivery(project_id, did), keys.message(project_id, mid),
                        keys.events(project_id, sender)]
    args = {"name": name, "now_us": str(now_us), "due_ms": str(due_ms),
            "maxlen": keys.EVENTS_MAXLEN, "ids": [r[0] for r in rows]}
    return script_keys, [json.dumps(args)]


def _end_call(project_id: str, name: str, rows: list[tuple[str, str, str]], mode: str,
              now_us: int) -> tuple[list[str], list[str]]:
    """KEYS and ARGV of end_name.lua."""
    script_keys = [keys.names(project_id), *_name_keys(project_id, name)]
    for did, _, sender in rows:
        script_keys += [keys.delivery(project_id, did), keys.events(project_id, sender)]
    error = (ERROR_EXPIRED if mode == "expired" else ERROR_DELETED).format(name=name)
    args = {"name": name, "now_us": str(now_us), "now_ms": str(now_us // 1000), "mode": mode,
            "error": error, "maxlen": keys.EVENTS_MAXLEN, "ids": [r[0] for r in rows]}
    return script_keys, [json.dumps(args)]


def _rows(dids: list[Any], found: list[Any]) -> list[tuple[str, str, str]]:
    return [(str(d), str(f[0] or ""), str(f[1] or "")) for d, f in zip(dids, found, strict=True)]


def _bound(out: list[Any]) -> list[Bound]:
    return [Bound(str(out[i]), str(out[i + 1])) for i in range(1, len(out), 2)]


@translated
class NameRecords:
    """Authorized names on one asyncio client."""

    def __init__(self, client: connect.AsyncClient) -> None:
        self.client = client
        self.scripts = scripts_for(client)

    async def allow(self, project_id: str, name: str, expires_ms: int, now_us: int) -> Json:
        """Authorize (or renew) a name until ``expires_ms``."""
        record = {"name": name, "expires_ms": expires_ms, "set_us": now_us}
        # The expiry first: an expiry without its record is dropped by the sweeper.
        await self.client.zadd(keys.allowed_due(project_id), {name: expires_ms})
        await self.client.hset(keys.allowed_names(project_id), name, json.dumps(record))
        return record

    async def is_authorized(self, project_id: str, name: str) -> bool:
        """True while the name has an authorization (its mail may be waiting)."""
        return bool(await self.client.hexists(keys.allowed_names(project_id), name))

    async def records(self, project_id: str) -> list[Json]:
        """Every authorization of the project, with how many deliveries wait for it."""
        found: Any = await self.client.hgetall(keys.allowed_names(project_id))
        records = [json.loads(v) for v in found.values()]
        pipe = self.client.pipeline(transaction=False)
        for r in records:
            pipe.zcard(keys.waiting(project_id, r["name"]))
        for r, n in zip(records, await pipe.execute(), strict=True):
            r["waiting"] = int(n)
        return records

    async def _read(self, project_id: str, name: str) -> list[tuple[str, str, str]]:
        dids = [str(d) for d in await self.client.zrange(keys.waiting(project_id, name), 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for did in dids:
            pipe.hmget(keys.delivery(project_id, did), DeliveryField.MESSAGE_ID,
                   DeliveryField.SENDER_ID)
        return _rows(dids, await pipe.execute() if dids else [])

    async def bind(self, project_id: str, name: str, now_us: int, due_ms: int) -> list[Bound]:
        """Bind what waits for a name that now has an agent; the deliveries to publish."""
        for _ in range(SETTLE_ATTEMPTS):
            rows = await self._read(project_id, name)
            script_keys, args = _bind_call(project_id, name, rows, now_us, due_ms)
            out = await self.scripts["bind_name"](keys=script_keys, args=args)
            if out[0] == "ok":
                return _bound(out)
            if out[0] == "unregistered":
                return []
        raise RuntimeError("binding kept racing new sends; the sweeper will finish it")

    async def end(self, project_id: str, name: str, now_us: int) -> str:
        """Delete an authorization, ending what waits for it: "ok", "missing" or "registered"."""
        for _ in range(SETTLE_ATTEMPTS):
            rows = await self._read(project_id, name)
            script_keys, args = _end_call(project_id, name, rows, "deleted", now_us)
            out = await self.scripts["end_name"](keys=script_keys, args=args)
            if out[0] != "retry":
                return str(out[0])
        raise RuntimeError("deleting the name kept racing new sends; try again")


def _read_sync(
    client: connect.SyncClient, project_id: str, name: str
) -> list[tuple[str, str, str]]:
    dids = [str(d) for d in client.zrange(keys.waiting(project_id, name), 0, -1)]
    pipe = client.pipeline(transaction=False)
    for did in dids:
        pipe.hmget(keys.delivery(project_id, did), DeliveryField.MESSAGE_ID,
                   DeliveryField.SENDER_ID)
    return _rows(dids, pipe.execute() if dids else [])


def expire_names(
    client: connect.SyncClient, project_id: str, now_us: int, due_ms: int
) -> list[Bound]:
    """End what waits for each authorization that ran out (sync, for the sweeper).

    A name that was registered meanwhile (its registration stopped before it
    bound its mail) is bound instead; returns the deliveries to publish.
    """
    names = client.zrangebyscore(keys.allowed_due(project_id), "-inf", now_us // 1000,
                                 start=0, num=EXPIRE_BATCH)
    if not names:
        return []
    scripts = scripts_for(client)
    bound: list[Bound] = []
    for name in (str(n) for n in names):
        for _ in range(SETTLE_ATTEMPTS):
            rows = _read_sync(client, project_id, name)
            script_keys, args = _end_call(project_id, name, rows, "expired", now_us)
            out = scripts["end_name"](keys=script_keys, args=args)
            if out[0] == "registered":
                script_keys, args = _bind_call(project_id, name, rows, now_us, due_ms)
                out = scripts["bind_name"](keys=script_keys, args=args)
                bound += _bound(out) if out[0] == "ok" else []
            if out[0] != "retry":
                break
    return bound
