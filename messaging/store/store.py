"""The API's side of the store (asyncio): tokens, projects, agents, messages, reads."""

from __future__ import annotations

import json
import time
from collections.abc import Container, Mapping, Sequence
from typing import Any

import orjson
import redis.exceptions

from messaging import ids
from messaging.store import connect, keys
from messaging.store.admission import Admission, AdmitRequest, RateCharge
from messaging.store.deliveries import joining_turns
from messaging.store.durability import Durability
from messaging.store.facts import Lru, identity
from messaging.store.failures import translated
from messaging.store.live import Live
from messaging.store.names import NameRecords
from messaging.store.schema import HOST_EVENTS_KEPT, AgentField, DeliveryField, MessageField
from messaging.store.scripts import scripts_for
from messaging.store.searchindex import SearchIndex
from messaging.store.ticks import TickBatch
from messaging.types import Json

IDEMPOTENCY_TTL_S = keys.IDEMPOTENCY_TTL_S
REF_ATTEMPTS = 20
# How long an API process trusts a token's scope before reading it again.
TOKEN_CACHE_S = 1.0


# A message hash's fields but its JSON: what may change after admission (every
# message has ``created_us``, so a message gone reads as none of them).
CHANGING_MESSAGE_FIELDS = [str(f) for f in MessageField if f is not MessageField.JSON]


def _hash(found: Mapping[Any, Any]) -> Json:
    """A hash reply as a dict of str (the client decodes replies)."""
    return {str(k): v for k, v in found.items()}


@translated
class Store:
    """Typed operations on the store; every key comes from ``keys``."""

    def __init__(self, client: connect.AsyncClient,
                 waits: connect.AsyncClient | None = None,
                 durability: Durability | None = None) -> None:
        self.client = client
        # Blocking reads (event streams) wait on connections of their own, never the API's.
        self.waits = waits or client
        self.scripts = scripts_for(client)
        # The rate checks and admissions of one event-loop tick go in one pipeline.
        self.ticks = TickBatch(client, durability)
        self.scopes: Lru[str, tuple[float, Json]] = Lru()
        self.identities: Lru[tuple[str, str], Json] = Lru()
        self.live = Live(client, self.waits)
        self.search = SearchIndex(client, self.scripts)
        self.names = NameRecords(client)

    @classmethod
    def from_url(cls, url: str, durability: Durability | None = None) -> Store:
        """A store on new connections to ``url`` (one server or a cluster); admissions
        are answered once ``durability`` holds."""
        return cls(connect.async_client(url),
                   connect.async_client(url, connections=connect.WAIT_CONNECTIONS),
                   durability)

    async def close(self) -> None:
        """Close the connection pools."""
        if self.waits is not self.client:
            await self.waits.aclose()
        await self.client.aclose()

    async def ping(self) -> bool:
        """True when the store answers."""
        return bool(await self.client.ping())

    async def memory(self) -> tuple[int, int]:
        """The store's used memory and its ``maxmemory`` (0: no limit), in bytes."""
        info: Any = await self.client.info("memory")
        if info and all(isinstance(v, dict) for v in info.values()):
            # a cluster answers per node: the fullest node is what refuses writes
            nodes = list(info.values())
            fullest = max(nodes, key=lambda n: int(n.get("used_memory", 0)) / max(
                1, int(n.get("maxmemory", 0)) or 2**62))
            return int(fullest.get("used_memory", 0)), int(fullest.get("maxmemory", 0))
        return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))

    # counters for operators

    async def delivery_counters(self) -> tuple[dict[str, int], int, int]:
        """Every project's delivery counters added up, the deliveries still due, and
        the dispatched messages waiting for the search index."""
        project_ids = [str(p) for p in await self.client.smembers(keys.PROJECTS)]
        pipe = self.client.pipeline(transaction=False)
        for pid in project_ids:
            pipe.hgetall(keys.stats(pid))
            pipe.zcard(keys.due(pid))
            pipe.llen(keys.search_queue(pid))
        raw = await pipe.execute()
        totals: dict[str, int] = {}
        due = unindexed = 0
        for stats, waiting, queued in zip(raw[::3], raw[1::3], raw[2::3], strict=True):
            for field, value in stats.items():
                totals[field] = totals.get(field, 0) + int(value)
            due += int(waiting)
            unindexed += int(queued)
        return totals, due, unindexed

    async def ready_counts(self, kinds: Sequence[str],
                           project_ids: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        """Deliveries waiting for a worker's turn, per project and transport (every
        project's when ``project_ids`` is None)."""
        if project_ids is None:
            project_ids = [str(p) for p in await self.client.smembers(keys.PROJECTS)]
        pipe = self.client.pipeline(transaction=False)
        for pid in project_ids:
            for kind in kinds:
                pipe.zcard(keys.ready(pid, kind))
        counts = iter(await pipe.execute())
        return {pid: {kind: int(next(counts)) for kind in kinds} for pid in project_ids}

    # tokens

    async def token_scope(self, token_hash: str) -> Json:
        """The scope of a token ({} when unknown or revoked).

        An agent's token admits only while it is the agent's live token (the
        one ``change_token.lua`` swaps): a scope record left behind by a change
        that stopped halfway admits no one. A known scope is cached for
        ``TOKEN_CACHE_S`` only: a token revoked by any API process is refused by
        every other one within that time (and at once by the process that revoked it).
        A project token is checked against its project's live token on every
        call, so a new project token refuses the old one at once in every process.
        """
        now = time.monotonic()
        cached = self.scopes.get(token_hash)
        if cached is not None and now - cached[0] < TOKEN_CACHE_S:
            scope = cached[1]
        else:
            scope = _hash(await self.client.hgetall(keys.token(token_hash)))
            if scope.get("kind") == "agent":
                live = await self.client.get(
                    keys.agent_token(scope["project_id"], scope["agent_id"]))
                if live is None or str(live) != token_hash:
                    scope = {}
            if scope:
                self.scopes.put(token_hash, (now, scope))
            else:
                self.scopes.drop(token_hash)
        if scope.get("kind") == "project" and not await self._live_project_token(
                scope["project_id"], token_hash):
            return {}
        return scope

    @staticmethod
    def token_bucket(project_id: str | None, token_hash: str) -> str:
        """The rate bucket of a token: the operator's (``project_id`` None), or a
        project or agent token's, by its hash."""
        return keys.OPERATOR_RATE if project_id is None else keys.token_rate(project_id,
                                                                              token_hash)

    @staticmethod
    def address_bucket(address: str) -> str:
        """The rate bucket of a client address's requests without a valid token."""
        return keys.address_rate(address)

    async def take_request(self, bucket: str, interval_us: int, burst_us: int) -> int:
        """One request from a rate bucket every API process shares (``take_request.lua``):
        0 when it may go, else the µs until one may."""
        return int(await self.ticks.run(self.scripts["take_request"], [bucket],
                                        [interval_us, burst_us]))

    async def live_token(self, project_id: str, agent_id: str) -> str | None:
        """The hash of the agent's live token: rotating changes it, retiring or closing
        drops it."""
        found = await self.client.get(keys.agent_token(project_id, agent_id))
        return str(found) if found else None

    async def _forget_token(self, token_hash: str) -> None:
        """Remove a token's scope record (its agent no longer points at it)."""
        if token_hash:
            await self.client.delete(keys.token(token_hash))
            self.scopes.drop(token_hash)

    async def _change_token(self, project_id: str, agent_id: str, change: str,
                            token_hash: str = "") -> tuple[str, Json | None]:
        """Run ``change_token.lua``: (outcome, the agent after it or None)."""
        outcome, old, raw = await self.scripts["change_token"](
            keys=[keys.agents(project_id), keys.agent_token(project_id, agent_id)],
            args=[agent_id, change, token_hash])
        if str(old) != token_hash:
            await self._forget_token(str(old))
        return str(outcome), json.loads(raw) if raw else None

    async def rotate_agent_token(self, project_id: str, agent_id: str,
                                 token_hash: str) -> tuple[str, Json | None]:
        """Give an active agent a new token and revoke the old one, in one step.

        Returns ("ok", agent), ("inactive", agent) for a retired or closed agent
        (nothing issued), or ("missing", None).
        """
        # The scope record first: the swap makes it live, or it is taken back.
        await self.client.hset(keys.token(token_hash), mapping={
            "kind": "agent", "project_id": project_id, "agent_id": agent_id})
        try:
            outcome, agent = await self._change_token(project_id, agent_id, "rotate", token_hash)
        except BaseException:
            await self._forget_token(token_hash)
            raise
        if outcome != "ok":
            await self._forget_token(token_hash)
        return outcome, agent

    async def end_agent(self, project_id: str, agent_id: str, status: str) -> Json | None:
        """Retire or close an agent and revoke its token in one step (a closed agent
        stays closed); the agent after it, or None when missing."""
        _, agent = await self._change_token(project_id, agent_id, status)
        return agent

    async def _live_project_token(self, project_id: str, token_hash: str) -> bool:
        """True unless the project holds another token (a project made before its
        token's hash was kept has none recorded: its token stands)."""
        live = await self.client.hget(keys.project(project_id), "token_hash")
        return live is None or str(live) == token_hash

    async def replace_project_token(self, project_id: str, token_hash: str) -> bool:
        """Make ``token_hash`` the project's one token, the old one revoked in the
        same step; False when there is no such project (nothing kept)."""
        # The token's scope first: the moment the swap makes it live, it works.
        await self.client.hset(keys.token(token_hash),
                               mapping={"kind": "project", "project_id": project_id})
        old = await self.scripts["replace_project_token"](keys=[keys.project(project_id)],
                                                       args=[token_hash])
        if old is None:
            await self.client.delete(keys.token(token_hash))
            return False
        if old:
            # Already refused (no longer the live one); this only tidies up.
            await self.client.delete(keys.token(str(old)))
            self.scopes.drop(str(old))
        return True

    async def project_page(self, after: str, count: int) -> list[str]:
        """Up to ``count`` project ids after ``after`` ("" from the start), in id order."""
        ids_ = sorted(str(p) for p in await self.client.smembers(keys.PROJECTS))
        return [p for p in ids_ if p > after][:count]

    async def project_summaries(self, project_ids: list[str], kinds: list[str]
                                ) -> list[tuple[Json, list[str], list[int]]]:
        """For each project: its hash, its agents' JSON and its ready counts per kind."""
        pipe = self.client.pipeline(transaction=False)
        for pid in project_ids:
            pipe.hgetall(keys.project(pid))
            pipe.hvals(keys.agents(pid))
            for kind in kinds:
                pipe.zcard(keys.ready(pid, kind))
        found = await pipe.execute()
        step = 2 + len(kinds)
        return [(_hash(found[i]), [str(a) for a in found[i + 1]],
                 [int(n) for n in found[i + 2:i + step]])
                for i in range(0, len(found), step)]

    async def identity(self, project_id: str, agent_id: str) -> Json | None:
        """An agent's id, name, ref, bound source and project key (cached), or None."""
        found = self.identities.get((project_id, agent_id))
        if found is None:
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(keys.agents(project_id), agent_id)
            pipe.hget(keys.project(project_id), "project_key")
            raw, project_key = await pipe.execute()
            if not raw or not project_key:
                return None
            found = identity(json.loads(raw), project_key)
            self.identities.put((project_id, agent_id), found)
        return found

    # projects

    async def create_project(self, project: Json, token_hash: str) -> bool:
        """Store a project and its token; False when its key is taken (nothing kept)."""
        pid = project["id"]
        # The project and its token sit in two cluster slots: no transaction can
        # hold both, so whatever a full store (OOM) let through is taken back below.
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(keys.project(pid), mapping={**{k: str(v) for k, v in project.items()},
                                              "token_hash": token_hash})
        pipe.hset(keys.token(token_hash), mapping={"kind": "project", "project_id": pid})
        claimed = False
        try:
            await pipe.execute()
            claimed = bool(await self.client.set(keys.project_by_key(project["project_key"]),
                                                 pid, nx=True))
            if claimed:
                await self.client.sadd(keys.PROJECTS, pid)
        except redis.exceptions.OutOfMemoryError:
            # Deleting is allowed in a full store: take back what was written.
            await self.client.delete(keys.project(pid), keys.token(token_hash))
            if claimed:
                await self.client.delete(keys.project_by_key(project["project_key"]))
            raise
        if not claimed:
            await self.client.delete(keys.project(pid), keys.token(token_hash))
            return False
        return True

    async def get_project(self, project_id: str) -> Json | None:
        """A project's hash, or None."""
        found = await self.client.hgetall(keys.project(project_id))
        return _hash(found) if found else None

    # agents

    async def register_agent(self, agent: Json, token_hash: str) -> Json:
        """Store a new agent under a fresh ref, token first; returns the agent."""
        pid = agent["project_id"]
        await self.client.hset(
            keys.token(token_hash),
            mapping={"kind": "agent", "project_id": pid, "agent_id": agent["id"]},
        )
        await self.client.set(keys.agent_token(pid, agent[AgentField.ID]), token_hash)
        for _ in range(REF_ATTEMPTS):
            agent[AgentField.REF] = ids.new_ref()
            try:
                done = await self.scripts["register_agent"](
                    keys=[keys.agents(pid), keys.names(pid), keys.refs(pid)],
                    args=[agent[AgentField.ID], agent[AgentField.NAME], agent[AgentField.REF],
                          json.dumps(agent)],
                )
            except redis.exceptions.OutOfMemoryError:
                await self.client.delete(keys.token(token_hash))  # no token without its agent
                raise
            if done:
                return agent
        await self.client.delete(keys.token(token_hash))
        await self.client.delete(keys.agent_token(pid, agent[AgentField.ID]))
        raise RuntimeError("no free agent ref after several tries")

    async def add_agent_record(self, project_id: str, agent: Json) -> bool:
        """Store an agent record without token or ref (the human) unless there is one."""
        return bool(await self.client.hsetnx(keys.agents(project_id), agent[AgentField.ID],
                                             json.dumps(agent)))

    async def get_agent(self, project_id: str, agent_id: str) -> Json | None:
        """One agent, or None."""
        raw = await self.client.hget(keys.agents(project_id), agent_id)
        return json.loads(raw) if raw else None

    async def list_agents(self, project_id: str) -> list[Json]:
        """Every agent of the project, in no set order."""
        raw = await self.client.hgetall(keys.agents(project_id))
        return [json.loads(v) for v in raw.values()]

    async def agent_names(self, project_id: str, most: int) -> list[str] | None:
        """Every registered name of the project; None when it has more than ``most``."""
        if await self.client.hlen(keys.names(project_id)) > most:
            return None
        return [str(n) for n in await self.client.hkeys(keys.names(project_id))]

    async def holders(self, project_id: str, names: Sequence[str], most: int) -> list[list[Json]]:
        """For each of ``names``, its active agents among the ``most`` it was last
        registered by, in registration order."""
        if not names:
            return []
        lists = await self.client.hmget(keys.names(project_id), list(names))
        ids_of = [json.loads(raw)[-most:] if raw else [] for raw in lists]
        wanted = [agent_id for agent_ids in ids_of for agent_id in agent_ids]
        raws = await self.client.hmget(keys.agents(project_id), wanted) if wanted else []
        agents = {agent_id: json.loads(raw) for agent_id, raw in zip(wanted, raws, strict=True)
                  if raw}
        return [[agents[a] for a in agent_ids
                 if a in agents and agents[a][AgentField.STATUS] == "active"]
                for agent_ids in ids_of]

    async def update_agent(
        self, project_id: str, agent_id: str, fields: Json, touch_us: int | None
    ) -> Json | None:
        """Set fields of an agent, move its activity forward; None when missing."""
        raw = await self.scripts["update_agent"](
            keys=[keys.agents(project_id)],
            args=[agent_id, json.dumps(fields), "" if touch_us is None else str(touch_us)],
        )
        return json.loads(raw) if raw else None

    # messages

    async def admit(self, request: AdmitRequest, rate: RateCharge | None = None) -> Admission:
        """Run the admission script for one send.

        ``rate``: a request the caller still owes to its rate bucket, spent by the
        script before anything else; an empty bucket's ``Admission`` is
        ``rate_limited`` (nothing else was done). Whatever the admission answers
        or raises, the caller owes the bucket nothing more.

        Deliveries over a transport of ``request.ready_kinds`` join their ready sets
        in the same script; the answer's ``ready`` says how many per transport (and
        how many are ready with them: a turn a worker holds open counts as one), and
        ``lane`` the queues they are served on.

        A replay is confirmed at the durability level as an admission is: the script
        sets its idempotency record's expiry again, a write of this connection that
        follows the admission it replays, so the wait covers that admission too.
        """
        script_keys, args = self.admission_call(request, rate)
        try:
            raw = await self.ticks.run(self.scripts["admit_message"], script_keys, args,
                                       durable=True)
        except redis.exceptions.OutOfMemoryError:
            if rate is None:
                raise
            # A full store refused the script's first write, the bucket's: nothing was
            # done. The request is spent where a full store allows it, and the
            # admission runs without it: its checks answer, its writes are refused.
            wait_us = await self.take_request(rate.bucket, rate.interval_us, rate.burst_us)
            if wait_us > 0:
                return Admission("rate_limited", {}, rate_wait_us=wait_us)
            return await self.admit(request)
        return Admission.decoded(orjson.loads(raw), request.message_json)

    def admission_call(self, request: AdmitRequest,
                       rate: RateCharge | None = None) -> tuple[list[str], list[Any]]:
        """The keys and arguments of ``admit_message.lua`` for one send."""
        project_id = request.project_id
        per_recipient = []
        for r, d in zip(request.recipients, request.delivery_ids, strict=True):
            per_recipient += [keys.delivery(project_id, d), keys.waiting(project_id, r)]
        script_keys = [
            keys.agents(project_id),
            keys.names(project_id),
            keys.refs(project_id),
            keys.seq(project_id),
            keys.message(project_id, request.message_id),
            keys.thread(project_id, request.thread_id),
            keys.due(project_id),
            keys.idempotency(project_id, request.sender_id, request.operation,
                             request.idempotency_key or ""),
            keys.allowed_names(project_id),
            keys.held(project_id),
            keys.project(project_id),
            *(key for kind in request.ready_kinds
              for key in (keys.ready(project_id, kind), keys.open_turn(project_id, kind))),
            *per_recipient,
            keys.search_queue(project_id),
            keys.retention(project_id),
            *([rate.bucket] if rate is not None else []),
        ]
        args = request.script_args(IDEMPOTENCY_TTL_S, rate)
        return script_keys, [orjson.dumps(args), request.message_json]

    async def get_message(self, project_id: str, message_id: str) -> Json | None:
        """A message's hash (``json``, ``created_us``, ``policy``, ...), or None."""
        found = await self.client.hgetall(keys.message(project_id, message_id))
        return _hash(found) if found else None

    async def get_messages(self, project_id: str, message_ids: list[str],
                           known: Container[str] = ()) -> list[Json | None]:
        """Several messages in one round trip.

        Of the ids in ``known`` (messages whose JSON the caller keeps: it never
        changes), only the fields that may change are read, without ``json``.
        """
        pipe = self.client.pipeline(transaction=False)
        for mid in message_ids:
            if mid in known:
                pipe.hmget(keys.message(project_id, mid), CHANGING_MESSAGE_FIELDS)
            else:
                pipe.hgetall(keys.message(project_id, mid))
        out: list[Json | None] = []
        for mid, found in zip(message_ids, await pipe.execute(), strict=True):
            if mid in known:
                fields = {f: v for f, v in zip(CHANGING_MESSAGE_FIELDS, found, strict=True)
                          if v is not None}
                out.append(fields if MessageField.CREATED_US in fields else None)
            else:
                out.append(_hash(found) if found else None)
        return out

    async def thread_message_ids(self, project_id: str, thread_id: str) -> list[str]:
        """The ids of a thread's messages, oldest first."""
        return [str(m) for m in await self.client.zrange(keys.thread(project_id, thread_id), 0, -1)]

    async def thread_page(self, project_id: str, thread_id: str, after_seq: int,
                          count: int) -> list[tuple[str, int, int]]:
        """Up to ``count`` of a thread's entries past sequence ``after_seq``, oldest
        first: each message id with its sequence and the size of its stored JSON
        (0 when the message is gone), in two round trips whatever the sizes."""
        found: list[tuple[str, float]] = await self.client.zrangebyscore(  # type: ignore[assignment]
            keys.thread(project_id, thread_id), f"({after_seq}", "+inf", start=0, num=count,
            withscores=True)
        pipe = self.client.pipeline(transaction=False)
        for mid, _ in found:
            pipe.hstrlen(keys.message(project_id, mid), MessageField.JSON)
        sizes = await pipe.execute() if found else []
        return [(mid, int(seq), int(size))
                for (mid, seq), size in zip(found, sizes, strict=True)]

    async def message_size(self, project_id: str, message_id: str) -> int:
        """The size of a message's stored JSON (0 when it is gone)."""
        return int(await self.client.hstrlen(keys.message(project_id, message_id),
                                             MessageField.JSON))

    # deliveries and the inbox

    async def get_deliveries(self, project_id: str, delivery_ids: list[str]) -> list[Json | None]:
        """Several deliveries' hashes in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for did in delivery_ids:
            pipe.hgetall(keys.delivery(project_id, did))
        return [_hash(d) if d else None for d in await pipe.execute()]

    async def inbox_after(
        self, project_id: str, agent_id: str, after: int, count: int
    ) -> list[tuple[str, int]]:
        """Up to ``count`` (delivery id, sequence) past ``after``, oldest first."""
        rows = await self.client.zrangebyscore(
            keys.inbox(project_id, agent_id), f"({after}", "+inf", start=0, num=count,
            withscores=True,
        )
        return [(str(row[0]), int(row[1])) for row in rows]

    async def observe(
        self, project_id: str, agent_id: str, deliveries: list[tuple[str, str]], now_us: int,
        *, confirmed: bool = False,
    ) -> int:
        """Record that the agent's side showed these (delivery id, sender id) deliveries.

        ``confirmed``: the recipient's host said so itself, which counts after an
        ``unknown`` outcome too (the outcome stays ``unknown``).
        """
        script_keys = [keys.agents(project_id), keys.stats(project_id)]
        for delivery_id, sender_id in deliveries:
            script_keys += [keys.delivery(project_id, delivery_id),
                            keys.events(project_id, sender_id)]
        return int(
            await self.scripts["observe_deliveries"](
                keys=script_keys,
                args=[agent_id, str(now_us), str(keys.EVENTS_MAXLEN), "1" if confirmed else "0"]
            )
        )

    async def redrive(self, project_id: str, delivery_id: str, now_ms: int) -> str:
        """Ask for a new attempt; "ok" or why not ("missing", "accepted", "in_flight")."""
        return str(await self.scripts["redrive"](
            keys=[keys.due(project_id), keys.delivery(project_id, delivery_id)],
            args=[str(now_ms)],
        ))

    async def make_ready(self, project_id: str, transport: str,
                         delivery_ids: list[str]) -> tuple[int, str, int]:
        """Add deliveries to the project's ready set: (how many were new, its lane,
        ready count); see ``DeliveryStore.make_ready``."""
        added, lane, count = await self.scripts["make_ready"](
            keys=[keys.project(project_id), keys.ready(project_id, transport),
                  keys.seq(project_id), keys.open_turn(project_id, transport)],
            args=delivery_ids)
        return int(added), str(lane), int(count)

    async def ring_join(self, joins: Sequence[tuple[str, str]]) -> None:
        """Put each (queue, project) in the queue's ring, in this order, in one round
        trip; no change for a project that is there (``DeliveryStore.ring_join``)."""
        pipe = self.client.pipeline(transaction=False)
        for (queue, project_id), turn in zip(joins, joining_turns(len(joins)), strict=True):
            pipe.zadd(keys.ring(queue), {project_id: turn}, nx=True)
        await pipe.execute()

    async def archived(self, project_id: str, some_id: str,
                       buckets: list[str]) -> str | None:
        """The tombstone of a removed message or delivery (``retention.tombstone``),
        if one of ``buckets`` (hashes of removed ids) has it."""
        pipe = self.client.pipeline(transaction=False)
        for bucket in buckets:
            pipe.hget(keys.archived(project_id, bucket), some_id)
        return next((str(d) for d in await pipe.execute() if d), None)

    async def mark(self, project_id: str, delivery_id: str, kind: str, now_us: int) -> list[str]:
        """Set read (or ack and read) once; returns [read_us, ack_us]."""
        out = await self.scripts["mark_message"](
            keys=[keys.delivery(project_id, delivery_id)], args=[kind, str(now_us)]
        )
        return [str(v) for v in out]

    async def record_host_event(self, project_id: str, agent_id: str, delivery_id: str,
                                kind: str, detail: str, now_us: int) -> bool:
        """Add what the recipient's host did with a delivery to its host events; False
        when the delivery is gone or is not ``agent_id``'s."""
        return bool(await self.scripts["record_host_event"](
            keys=[keys.delivery(project_id, delivery_id)],
            args=[agent_id, kind, detail, str(now_us), str(HOST_EVENTS_KEPT)]))

    # held mail

    async def held_ids(self, project_id: str, limit: int) -> list[str]:
        """Held delivery ids, oldest admission first."""
        return [str(d) for d in await self.client.zrange(keys.held(project_id), 0, limit - 1)]

    async def settle_held(
        self, project_id: str, delivery: Json, mode: str, now: int, due_ms: int, error: str
    ) -> list[str]:
        """Release or decline one held delivery; the script's answer."""
        out = await self.scripts["release_held"](
            keys=[keys.held(project_id), keys.due(project_id),
                  keys.delivery(project_id, delivery[DeliveryField.ID]),
                  keys.message(project_id, delivery[DeliveryField.MESSAGE_ID]),
                  keys.events(project_id, delivery[DeliveryField.SENDER_ID]),
                  keys.stats(project_id)],
            args=[mode, str(now), str(due_ms), error, str(keys.EVENTS_MAXLEN)])
        return [str(v) for v in out]
