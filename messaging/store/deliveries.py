"""The workers' side of the store (synchronous): leases, outcomes, the sweeper.

Every decision here that compares times (a lease's end, whether it has ended, a
retry's due time, an endpoint's hold, what the sweeper finds due) takes the
store's clock: the scripts read it themselves (``clock_lib.lua``), and a step
that must pick by time before a script runs reads it first (``clock_us``). A
worker host whose clock is off changes none of them.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from messaging.store import connect, keys, searchindex
from messaging.store.durability import Durability, run_durably
from messaging.store.live import expire_subscriptions
from messaging.store.names import Bound, expire_names
from messaging.store.schema import DeliveryField
from messaging.store.scripts import Scripts, scripts_for
from messaging.timefmt import now_us
from messaging.types import Json

SWEEP_BATCH = 500
LEASE_FIELDS = 9
# Upper bounds of the dispatch latency histogram (admitted to outcome), ms.
DISPATCH_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
INF = "inf"
# The buckets' bounds as the outcome scripts take them (outcome_lib's dispatch_latency).
LATENCY_BOUNDS = " ".join([*map(str, DISPATCH_BUCKETS_MS), INF])
US_PER_MS = 1000
# A project joins a ring at its joining time (us) less this: below the turns of
# projects that were served (0 and up), in the order of joining.
JOINED_BELOW = 2**52


def joining_turns(n: int) -> list[int]:
    """Ring turn numbers for ``n`` projects joining rings now, in this order."""
    first = now_us() - JOINED_BELOW
    return list(range(first, first + n))


@dataclass(frozen=True)
class Leased:
    """A delivery this worker holds, with its fencing token."""

    delivery_id: str
    fence: int
    agent_id: str
    message_id: str
    sender_id: str
    attempt: int  # since admission
    round_attempt: int  # since admission or the last redrive: what the retry schedule counts
    admitted_us: int
    agent_json: str = ""  # the recipient agent as the lease found it ("": gone)


@dataclass(frozen=True)
class SweepAction:
    """What the sweeper does with one overdue delivery."""

    delivery_id: str
    transport: str
    action: str  # "publish" or "expired"


@dataclass(frozen=True)
class Taken:
    """What a worker took at its turn at one project."""

    delivery_ids: list[str]
    left: int  # ready deliveries of the transport still waiting
    moved_to: str | None = None  # the project's lane, when it is no longer this queue's
    newest: int = 0  # the newest ready score left (the project's sequence; 0: none)
    held_open: bool = False  # it emptied the ready set and holds the turn open for new mail


@dataclass(frozen=True)
class Result:
    """What to record of one attempt."""

    kind: str  # accepted | rejected | failed | unknown | retry
    retry_in_ms: int = 0  # retry only: due this long after the store records it
    error: str = ""
    displayed: bool = False
    endpoint: str = ""  # "ok" it answered, "down" it did not (or 408/429/5xx), "" unknown


@dataclass(frozen=True)
class Caps:
    """Requests of a transport under way at once (0: no cap), how long a delivery
    left for a cap waits before it is due again, and how long a request's slot
    lasts unless its worker renews it (``renew_slots``)."""

    per_project: int = 0
    per_endpoint: int = 0
    busy_ms: int = 0
    slot_ms: int = 0


@dataclass(frozen=True)
class EndpointHealth:
    """When an endpoint counts as unhealthy, and how often it is probed then."""

    failures: int
    after_ms: int
    probe_ms: int


def now_ms() -> int:
    """This host's wall-clock time in milliseconds: for stamps no lease, expiry or
    retention decision reads (the search queue's)."""
    return time.time_ns() // 1_000_000


def clock_us(scripts: Scripts, key: str) -> int:
    """The store's time (us) on the node that holds ``key`` (a project's keys share
    one): the clock every time decision about the project follows."""
    return int(scripts["read_clock"](keys=[key], args=[]))


log = logging.getLogger("courier.store")


class DeliveryStore:
    """Typed operations for workers and the sweeper; every key comes from ``keys``.

    Outcomes (an inbox entry, a transport's answer) are recorded at ``durability``:
    a wait that falls short is logged, and the outcome stands (if its node is lost
    before it is copied, its lease runs out and the delivery is taken again, fenced).
    """

    def __init__(self, client: connect.SyncClient, durability: Durability | None = None) -> None:
        self.client = client
        self.scripts = scripts_for(client)
        self.index_queues = searchindex.IndexQueues(client, self.scripts)
        self.durability = durability or Durability()

    @classmethod
    def from_url(cls, url: str, durability: Durability | None = None,
                 timeout_s: float | None = None) -> DeliveryStore:
        """A store on new connections to ``url`` (one server or a cluster); ``timeout_s``:
        how long a connection or a reply may take (the client's default: None)."""
        options = {} if timeout_s is None else {"socket_timeout": timeout_s,
                                               "socket_connect_timeout": timeout_s}
        return cls(connect.sync_client(url, **options), durability)

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()

    def _record(self, name: str, script_keys: list[str], args: list[str]) -> Any:
        """Run the recording script ``name``, at the store's durability."""
        if not self.durability.waits:
            return self.scripts[name](keys=script_keys, args=args)
        reply, short = run_durably(self.client, self.durability, self.scripts[name],
                                   script_keys, args)
        if short is not None:
            log.warning("outcomes recorded without durability %s: %s",
                        self.durability.level.value, short.reason)
        return reply

    def lease(
        self, project_id: str, delivery_ids: list[str], lease_ms: int, idempotent: bool
    ) -> list[Leased]:
        """Take the dispatch lease of each free delivery; the rest are someone else's."""
        return self.lease_within(project_id, delivery_ids, lease_ms, idempotent, Caps())[0]

    def lease_within(
        self, project_id: str, delivery_ids: list[str], lease_ms: int, idempotent: bool,
        caps: Caps,
    ) -> tuple[list[Leased], list[str]]:
        """Lease like ``lease``, within the caps on requests under way: what was leased,
        and the free deliveries left for a cap (due again after ``caps.busy_ms``).

        Each lease taken under a cap holds a slot for ``caps.slot_ms``: its worker
        renews it while the request runs (``renew_slots``), and a worker that died
        gives it back when it runs out, long before the lease does.
        """
        raw, busy = self.scripts["lease_deliveries"](
            keys=[keys.due(project_id), keys.agents(project_id), keys.in_flight(project_id)]
            + [keys.delivery(project_id, d) for d in delivery_ids],
            args=[str(lease_ms), "1" if idempotent else "0",
                  str(caps.per_project), str(caps.per_endpoint), str(caps.busy_ms),
                  str(caps.slot_ms)],
        )
        return _leased(raw, delivery_ids), [delivery_ids[int(index) - 1] for index in busy]

    def renew_slots(self, project_id: str, leased: list[Leased], slot_ms: int) -> int:
        """Keep the slots of these requests, still under way, for ``slot_ms`` more (by
        the store's clock); a slot already given back is not taken again. How many
        were renewed."""
        if not leased:
            return 0
        args = [str(slot_ms)]
        for lease in leased:
            args += [lease.agent_id, lease.delivery_id]
        return int(self.scripts["renew_slots"](keys=[keys.in_flight(project_id)], args=args))

    def put_inbox(self, project_id: str, leased: list[Leased]) -> list[bool]:
        """Put leased deliveries in their inboxes (once each); False where the lease was lost."""
        if not leased:
            return []
        script_keys = [keys.seq(project_id)]
        args = [str(keys.EVENTS_MAXLEN)]
        for lease in leased:
            args.append(str(lease.fence))
            script_keys += [keys.delivery(project_id, lease.delivery_id),
                            keys.inbox(project_id, lease.agent_id),
                            keys.events(project_id, lease.agent_id)]
        return [bool(flag) for flag in self._record("put_inbox", script_keys, args)]

    def mark_handed_off(self, project_id: str, lease: Leased) -> bool:
        """Mark that this lease's request is leaving; False when the lease was lost."""
        return bool(self.scripts["mark_handed_off"](
            keys=[keys.delivery(project_id, lease.delivery_id)], args=[str(lease.fence)]))

    def load_for_send(
        self, project_id: str, leased: list[Leased], with_message: bool = True
    ) -> list[tuple[Json | None, Json | None]]:
        """The (message record, recipient agent) of each leased delivery: the agent as
        its lease read it, the messages in one round trip (none without them)."""
        agents = [json.loads(lease.agent_json) if lease.agent_json else None
                  for lease in leased]
        if not with_message:
            return [(None, agent) for agent in agents]
        pipe = self.client.pipeline(transaction=False)
        for lease in leased:
            pipe.hgetall(keys.message(project_id, lease.message_id))
        records = pipe.execute()
        return [(dict(record) if record else None, agent)
                for record, agent in zip(records, agents, strict=True)]

    def record_outcomes(self, project_id: str, recorded: list[tuple[Leased, Result]],
                        health: EndpointHealth) -> list[bool]:
        """Record attempts' outcomes, each under its token; False where the lease was lost."""
        if not recorded:
            return []
        script_keys = [keys.due(project_id), keys.agents(project_id), keys.stats(project_id),
                       keys.in_flight(project_id)]
        args = [str(keys.EVENTS_MAXLEN), str(health.failures), str(health.after_ms),
                str(health.probe_ms), LATENCY_BOUNDS]
        for lease, result in recorded:
            script_keys += [keys.delivery(project_id, lease.delivery_id),
                            keys.events(project_id, lease.sender_id)]
            args += [str(lease.fence), result.kind, str(result.retry_in_ms), result.error,
                     "1" if result.displayed else "0", result.endpoint]
        return [bool(flag) for flag in self._record("record_outcomes", script_keys, args)]

    def expire_lease(self, project_id: str, delivery_id: str, error_sent: str,
                     error_not_sent: str) -> str:
        """Record the outcome of a non-idempotent lease that ran out: ``unknown`` when its
        request was handed off, ``failed`` when not; "" when the lease is valid or free."""
        sender_id = self.client.hget(keys.delivery(project_id, delivery_id),
                                     DeliveryField.SENDER_ID)
        outcome = self.scripts["expire_lease"](
            keys=[keys.due(project_id), keys.delivery(project_id, delivery_id),
                  keys.events(project_id, str(sender_id or "")), keys.stats(project_id)],
            args=[error_sent, str(keys.EVENTS_MAXLEN), LATENCY_BOUNDS, error_not_sent],
        )
        return outcome if isinstance(outcome, str) else ""

    def make_ready(self, project_id: str, transport: str,
                   delivery_ids: list[str]) -> tuple[int, str, int]:
        """Add deliveries to the project's ready set: (how many were new, its lane, ready
        count, a turn a worker holds open counting as one: see ``take_ready``)."""
        added, lane, count = self.scripts["make_ready"](
            keys=[keys.project(project_id), keys.ready(project_id, transport),
                  keys.seq(project_id), keys.open_turn(project_id, transport)],
            args=delivery_ids)
        return int(added), str(lane), int(count)

    def take_ready(self, project_id: str, transport: str, lane: str, count: int,
                   hold_ms: int = 0) -> Taken:
        """Take up to ``count`` of the project's oldest ready deliveries, if it is on ``lane``.

        Given ``hold_ms``, a take that empties the ready set holds the turn open
        that long (``Taken.held_open``): mail made ready meanwhile asks for no
        ticket, so the caller must take again before it leaves. Any take closes
        what an earlier one held open.
        """
        raw = self.scripts["take_ready"](
            keys=[keys.project(project_id), keys.ready(project_id, transport),
                  keys.open_turn(project_id, transport)],
            args=[lane, str(count), str(hold_ms)])
        return _taken(raw)

    def take_lease(self, project_id: str, transport: str, lane: str, count: int,
                   hold_ms: int, lease_ms: int, idempotent: bool) -> tuple[Taken, list[Leased]]:
        """``take_ready`` and ``lease`` in one script: what was taken, and what of it
        was free and is leased now (the rest is someone else's, or due later)."""
        taken, leased = self.scripts["take_lease"](
            keys=[keys.project(project_id), keys.ready(project_id, transport),
                  keys.open_turn(project_id, transport), keys.due(project_id),
                  keys.agents(project_id), keys.in_flight(project_id)],
            args=[lane, str(count), str(hold_ms), str(lease_ms), "1" if idempotent else "0"])
        took = _taken(taken)
        return took, _leased(leased, took.delivery_ids)

    def ready_count(self, project_id: str, transport: str) -> int:
        """How many of the project's deliveries of one transport wait for a turn."""
        return int(self.client.zcard(keys.ready(project_id, transport)))

    def ring_join(self, queue: str, project_id: str) -> None:
        """Put a project in a queue's ring; no change when it is there.

        It is served before every project that has had a turn since it joined,
        after those that joined before it and still wait for their first
        (``ring_next.lua``).
        """
        self.client.zadd(keys.ring(queue), {project_id: joining_turns(1)[0]}, nx=True)

    def ring_next(self, queue: str) -> tuple[str, int] | None:
        """Whose turn it is on a queue (the project goes to the back of the ring), and
        how many projects are in the ring; None when it is empty."""
        turn = self.scripts["ring_next"](keys=[keys.ring(queue)], args=[])
        return (str(turn[0]), int(turn[1])) if turn else None

    def ring_size(self, queue: str) -> int:
        """How many projects have ready deliveries on a queue."""
        return int(self.client.zcard(keys.ring(queue)))

    def after_step(self, project_id: str, dispatched: list[tuple[str, str, str]], at_ms: int,
                   ring: str | None) -> tuple[int, Exception | None]:
        """What a worker does between two steps of a turn, in one round trip: queue the
        step's dispatched (message, recipient, sender) for search (``searchindex``)
        and, given a queue, count the projects in its ring.

        Returns the ring's size (0 when not asked) and the error queueing met (None
        when it went through): a search queue that could not be written leaves the
        deliveries as recorded.

        Raises:
            redis.RedisError: the store could not be reached, or could not count.
        """
        pipe = self.client.pipeline(transaction=False)
        queued = searchindex.queue_on(pipe, project_id, dispatched, at_ms)
        if ring is not None:
            pipe.zcard(keys.ring(ring))
        if not queued and ring is None:
            return 0, None
        replies = pipe.execute(raise_on_error=False)
        error = next((r for r in replies[:queued] if isinstance(r, Exception)), None)
        if ring is None:
            return 0, error
        if isinstance(replies[-1], Exception):
            raise replies[-1]
        return int(replies[-1]), error

    def ring_others(self, queue: str, project_id: str) -> int:
        """How many projects other than this one have ready deliveries on a queue."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(keys.ring(queue))
        pipe.zscore(keys.ring(queue), project_id)
        size, score = pipe.execute()
        return int(size) - (score is not None)

    def ring_drop(self, queue: str, project_id: str) -> None:
        """Take a project out of a queue's ring (it moved to another lane)."""
        self.client.zrem(keys.ring(queue), project_id)

    def lanes(self) -> list[str]:
        """Every lane a project was ever given."""
        return sorted(str(lane) for lane in self.client.smembers(keys.LANES))

    def ring_leave(self, queue: str, project_id: str, transport: str) -> bool:
        """Take a project whose ready set looked empty out of a queue's ring.

        Checks again after leaving: deliveries made ready meanwhile put it back,
        and True says so (its ticket may have been spent on an empty ring). So
        does a turn another worker holds open (``take_ready``): what joins while
        it is held does not put the project in the ring itself.
        """
        self.ring_drop(queue, project_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(keys.ready(project_id, transport))
        pipe.exists(keys.open_turn(project_id, transport))
        if not any(pipe.execute()):
            return False
        self.ring_join(queue, project_id)
        return True

    def set_lane(self, project_id: str, lane: str) -> str:
        """Give the project a lane ("" for the shared queues); returns the lane it had."""
        pkey = keys.project(project_id)
        old = self.client.hget(pkey, "lane") or ""
        if lane:
            self.client.sadd(keys.LANES, lane)
            self.client.hset(pkey, "lane", lane)
        else:
            self.client.hdel(pkey, "lane")
        return str(old)

    def expire_subscriptions(self, project_id: str, now_ms: int) -> int:
        """Send the ``expired`` notice of the project's subscriptions due by ``now_ms``
        (their deliveries are due at once in the outbox); how many."""
        return len(expire_subscriptions(self.client, project_id, now_ms * 1000))

    def expire_names(self, project_id: str, now_us: int, due_ms: int) -> list[Bound]:
        """End what waits for each authorization that ran out (``names.expire_names``)."""
        return expire_names(self.client, project_id, now_us, due_ms)

    def project_ids(self) -> list[str]:
        """Every project (the sweeper's round)."""
        return sorted(str(p) for p in self.client.smembers(keys.PROJECTS))

    def clock_ms(self, project_id: str) -> int:
        """The store's time (ms) for the project (``clock_us``)."""
        return clock_us(self.scripts, keys.project(project_id)) // US_PER_MS

    def sweep(self, project_id: str, grace_ms: int, idempotent: list[str],
              due_by_ms: int) -> list[SweepAction]:
        """Overdue deliveries of one project and what to do with each.

        ``due_by_ms`` is a reading of the store's clock (``clock_ms``) taken before:
        it picks the candidates, and ``sweep_due`` decides each by its own reading,
        a later one, so nothing due is missed and nothing early is taken.
        """
        dids = [str(d) for d in self.client.zrangebyscore(
            keys.due(project_id), "-inf", due_by_ms, start=0, num=SWEEP_BATCH)]
        if not dids:
            return []
        raw = self.scripts["sweep_due"](
            keys=[keys.due(project_id)] + [keys.delivery(project_id, d) for d in dids],
            args=[str(grace_ms), " ".join(idempotent)],
        )
        return [SweepAction(*raw[i : i + 3]) for i in range(0, len(raw), 3)]


def _taken(raw: list[Any]) -> Taken:
    """A take's answer (``take_lib.lua``) as a Taken."""
    if int(raw[0]) == 0:
        return Taken([], 0, str(raw[1]))
    return Taken([str(d) for d in raw[4:]], int(raw[1]), newest=int(float(raw[2])),
                 held_open=int(raw[3]) == 1)


def _leased(raw: list[Any], delivery_ids: list[str]) -> list[Leased]:
    """The leases ``lease_lib.lua`` answered, each by its place in ``delivery_ids``."""
    out = []
    for i in range(0, len(raw), LEASE_FIELDS):
        index, fence, agent_id, message_id, sender_id, attempt, round_attempt, admitted, \
            agent = raw[i : i + LEASE_FIELDS]
        out.append(Leased(delivery_ids[int(index) - 1], int(fence), agent_id, message_id,
                          sender_id, int(attempt), int(round_attempt), int(admitted), agent))
    return out
