"""The one path of a delivery through a worker, whatever its transport.

Lease (fenced), prepare (load the recipient, check its settings again, build
the message), call the transport, judge its answer, schedule retries from our
own due-time set, keep endpoint health, record under the lease's token.

What is recorded is what is known:
    an exception before the transport handed the request off   failed, at once
    an exception after it (non-idempotent transport)           unknown
    an exception after it (idempotent transport)               retried
    the store's own trouble after it (idempotent transport)    retried in a second,
                                                               whatever the schedule
    ``retry`` past the last wait of the schedule               failed
One delivery's trouble never stops the others of its task.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from messaging import transports
from messaging.config import Settings
from messaging.errors import from_validation
from messaging.service.views import message_view
from messaging.store.connect import STORE_DOWN
from messaging.store.deliveries import (
    Caps,
    DeliveryStore,
    EndpointHealth,
    Leased,
    Result,
    Taken,
)
from messaging.store.durability import NotDurable
from messaging.transports import policy
from messaging.transports.base import Delivery, Outcome, OutcomeKind, Transport
from messaging.types import Json
from workers import slots

log = logging.getLogger(__name__)

LEASE_LOST = "lease lost before hand-off"


class LeaseLost(RuntimeError):
    """Another worker owns the delivery now: the request must not leave."""


# While a task waits on requests under way, it looks this often whether another
# project waits: then it leaves them to end on their threads, each recording its
# own outcome, and goes on.
WAIT_ROUND_S = 0.01
# A delivery left for a transport's cap on requests under way is due again after
# this (the sweeper publishes it), unless the task that left it sees one of its
# own requests end first and leases it again then.
BUSY_MS = 1000
# A task whose deliveries are all left for a cap, with none of its own requests
# under way, looks again this often for a slot, this long at most (while no other
# project waits): a slot other workers hold is mostly free in milliseconds, and a
# delivery that waits for it in its task is not left to the sweeper's next round.
BUSY_POLL_S = 0.02
BUSY_WAIT_S = 1.0
MS_PER_S = 1000
# An idempotent transport's step that met the store away (a failover, a node that
# no longer serves the slot, a durability wait cut short) is taken again this much
# later; it spends none of the schedule: the store, not the recipient, was away.
STORE_AWAY_RETRY_MS = 1000
STORE_TROUBLE = (*STORE_DOWN, NotDurable)


@dataclass(frozen=True)
class StoreAway(Outcome):
    """A retry because the store could not finish the step: it says nothing of the
    recipient's endpoint."""

    @property
    def endpoint(self) -> str:
        return ""


class Threads:
    """A process's threads for a transport that carries several deliveries at once,
    and how many are free: a task takes one for each delivery before leasing it;
    the request gives it back as it ends, whether or not its task still waits.
    Made after fork, never shared across it."""

    def __init__(self, size: int) -> None:
        self.pool = ThreadPoolExecutor(size, thread_name_prefix="carry")
        self._free = size
        self._changed = threading.Condition()

    def take(self, most: int, wait_for_one: bool) -> int:
        """Up to ``most`` free threads (0 when none is free, unless told to wait for one)."""
        with self._changed:
            while wait_for_one and self._free == 0:
                self._changed.wait()
            taken = min(most, self._free)
            self._free -= taken
            return taken

    def give(self, count: int = 1) -> None:
        """Give threads back."""
        if count:
            with self._changed:
                self._free += count
                self._changed.notify_all()


_threads: dict[tuple[int, int], Threads] = {}
_making = threading.Lock()


def threads(size: int) -> Threads:
    """This process's threads of that size."""
    key = (os.getpid(), size)
    with _making:
        if key not in _threads:
            _threads[key] = Threads(size)
        return _threads[key]


def health(settings: Settings) -> EndpointHealth:
    """When an endpoint counts as unhealthy, and how often it is probed then."""
    return EndpointHealth(
        failures=settings.webhook_unhealthy_failures,
        after_ms=int(settings.webhook_unhealthy_after_s * 1000),
        probe_ms=int(settings.webhook_probe_interval_s * 1000),
    )


def _deliver_one(transport: Transport, delivery: Delivery) -> Outcome | BaseException:
    try:
        return transport.deliver(delivery)
    except Exception as e:  # judged by the worker, like deliver_all's
        return e


def _error(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"[:500] if text else type(e).__name__


class Dispatcher:
    """Runs deliveries of one project through one transport."""

    def __init__(self, store: DeliveryStore, settings: Settings) -> None:
        self.store, self.settings = store, settings
        self.health = health(settings)

    def take(self, transport: Transport, project_id: str, lane: str, count: int,
             hold_ms: int) -> tuple[Taken, list[Leased] | None]:
        """A turn's take of the project's ready deliveries (``DeliveryStore.take_ready``).

        A transport idempotent by delivery id (the inbox) leases what is free of
        them in the same script, as ``run`` would lease them all at once right
        after: the leases, for ``run``. The others lease each delivery just
        before its request leaves: None.
        """
        if not transport.idempotent:
            return self.store.take_ready(project_id, transport.kind, lane, count, hold_ms), None
        lease_ms = int(policy.policy(transport.kind, self.settings).lease_s * 1000)
        return self.store.take_lease(project_id, transport.kind, lane, count, hold_ms,
                                     lease_ms, True)

    def run(self, transport: Transport, project_id: str, delivery_ids: list[str],
            give_way: Callable[[], bool] | None = None, leased: list[Leased] | None = None,
            ) -> tuple[Counter[str], list[Leased]]:
        """Lease what is free of these deliveries, carry it, record (``leased``: what
        ``take`` leased of them already).

        ``give_way`` answers whether another project waits: a transport that
        carries several at once then leaves its slow requests running (each
        records its own outcome) and returns. Returns the outcomes recorded, by
        kind (``running``: left to record themselves), and what was leased.
        """
        chosen = policy.policy(transport.kind, self.settings)
        lease_ms = int(chosen.lease_s * 1000)
        if transport.idempotent:
            if leased is None:
                leased = self.store.lease(project_id, delivery_ids, lease_ms, True)
            return self._carry(transport, project_id, leased), leased
        caps = Caps(chosen.in_flight_per_project, chosen.in_flight_per_endpoint, BUSY_MS,
                    slots.SLOT_MS)
        if transport.parallel > 1:
            return self._carry_at_once(transport, project_id, delivery_ids, lease_ms, caps,
                                       give_way)
        # Each lease taken just before its request leaves: a lease never runs out
        # while its delivery waits behind others in the same task.
        counts: Counter[str] = Counter()
        every: list[Leased] = []
        for delivery_id in delivery_ids:
            leased, _ = self.store.lease_within(project_id, [delivery_id], lease_ms, False, caps)
            self._hold(caps, project_id, leased)
            counts += self._carry(transport, project_id, leased)
            every += leased
        return counts, every

    def _hold(self, caps: Caps, project_id: str, leased: list[Leased]) -> None:
        """Under a cap, keep these requests' slots while they run (``Slots``)."""
        if caps.per_project or caps.per_endpoint:
            slots.here().hold(self.store, project_id, leased)

    def _carry(self, transport: Transport, project_id: str,
               leased: list[Leased]) -> Counter[str]:
        if not leased:
            return Counter()
        prepared = self._prepare(transport, project_id, leased)
        ready = [p for p in prepared if isinstance(p, Delivery)]
        try:
            answers = iter(transport.deliver_all(ready))
        except Exception as e:  # a deliver_all that gave up on all of them
            answers = iter([e] * len(ready))
        outcomes: list[Outcome] = []
        for item in prepared:
            if isinstance(item, Delivery):
                outcomes.append(judge(transport, item, next(answers, None)))
            else:
                outcomes.append(item)
        return self._record(transport, project_id, leased, outcomes)

    def _carry_at_once(self, transport: Transport, project_id: str, delivery_ids: list[str],
                       lease_ms: int, caps: Caps, give_way: Callable[[], bool] | None,
                       ) -> tuple[Counter[str], list[Leased]]:
        """Carry each delivery on a thread of its own, leased just before it leaves,
        as threads are free; record outcomes as they come, so a slow receiver never
        holds up what the others answered.

        A delivery left for a cap is leased again when one of these requests
        ends, or, with none of them under way (other workers hold the slots),
        when a slot is free within BUSY_WAIT_S; when another project waits, the
        requests still under way are left to record their own outcomes, and
        what waits for a slot is left to its due time.
        """
        carriers = threads(transport.parallel)
        todo, busy = list(delivery_ids), []
        running: dict[Future[Outcome | BaseException], tuple[Leased, Delivery]] = {}
        counts: Counter[str] = Counter()
        every: list[Leased] = []
        wait_ends: float | None = None  # how long this task still waits for a slot
        while todo or running:
            taken = carriers.take(len(todo), wait_for_one=not running) if todo else 0
            if taken:
                chunk, todo = todo[:taken], todo[taken:]
                leased, left = self.store.lease_within(project_id, chunk, lease_ms, False, caps)
                self._hold(caps, project_id, leased)
                carriers.give(taken - len(leased))
                busy += left
                every += leased
                counts += self._start(transport, project_id, leased, carriers, running)
                if leased:
                    wait_ends = None
            if not running:
                if busy and not todo:
                    now = time.monotonic()
                    wait_ends = now + BUSY_WAIT_S if wait_ends is None else wait_ends
                    if now < wait_ends and not (give_way is not None and give_way()):
                        time.sleep(BUSY_POLL_S)
                        todo, busy = busy, []
                continue
            finished, _ = wait(running, timeout=WAIT_ROUND_S, return_when=FIRST_COMPLETED)
            if finished:
                done = [(*running.pop(f), f.result()) for f in finished]
                counts += self._record(transport, project_id, [d[0] for d in done],
                                       [judge(transport, d[1], d[2]) for d in done])
                todo, busy = busy + todo, []
            elif give_way is not None and give_way():
                for future, (lease, delivery) in running.items():
                    future.add_done_callback(self._later(transport, project_id, lease, delivery))
                counts["running"] += len(running)
                break
        return counts, every

    def _start(self, transport: Transport, project_id: str, leased: list[Leased],
               carriers: Threads,
               running: dict[Future[Outcome | BaseException], tuple[Leased, Delivery]],
               ) -> Counter[str]:
        """Start each leased delivery's request on a thread taken for it; record at once
        what failed before it could leave."""
        failed: list[tuple[Leased, Outcome]] = []
        for lease, item in zip(leased, self._prepare(transport, project_id, leased),
                               strict=True):
            if isinstance(item, Delivery):
                future = carriers.pool.submit(_deliver_one, transport, item)
                future.add_done_callback(lambda _: carriers.give())
                running[future] = (lease, item)
            else:
                carriers.give()
                failed.append((lease, item))
        return self._record(transport, project_id, [f[0] for f in failed],
                            [f[1] for f in failed])

    def _later(self, transport: Transport, project_id: str, lease: Leased,
               delivery: Delivery) -> Callable[[Future[Outcome | BaseException]], None]:
        """What records a request's outcome once it ends, after its task went on."""
        def record(future: Future[Outcome | BaseException]) -> None:
            try:
                self._record(transport, project_id, [lease],
                             [judge(transport, delivery, future.result())])
            except Exception as e:  # its lease runs out: the sweeper records it
                log.warning("delivery %s: outcome not recorded: %s", lease.delivery_id,
                            _error(e))
        return record

    def _prepare(self, transport: Transport, project_id: str,
                 leased: list[Leased]) -> list[Delivery | Outcome]:
        """A Delivery for each lease, or the failure that stops it before hand-off."""
        try:
            loaded = self.store.load_for_send(project_id, leased, transport.wants_message)
        except Exception as e:  # nothing was sent: every one of them failed here
            return [Outcome(OutcomeKind.FAILED, f"not sent: {_error(e)}") for _ in leased]
        out: list[Delivery | Outcome] = []
        for lease, (record, agent) in zip(leased, loaded, strict=True):
            try:
                out.append(self._delivery(transport, project_id, lease, record, agent))
            except ValidationError as e:
                refusal = from_validation(e, "transport.")
                out.append(Outcome(OutcomeKind.FAILED, f"not sent: {refusal.message}"))
            except Exception as e:  # the worker's own trouble: nothing was sent
                out.append(Outcome(OutcomeKind.FAILED, f"not sent: {_error(e)}"))
        return out

    def _delivery(self, transport: Transport, project_id: str, lease: Leased,
                  record: Json | None, agent: Json | None) -> Delivery:
        if agent is None or (transport.wants_message and record is None):
            raise LookupError("recipient or message missing")
        kind = agent["transport"].get("kind")
        if kind != transport.kind:
            raise LookupError(f"the recipient's transport is {kind}, not {transport.kind}")
        settings = transports.parse(transport.kind, agent["transport"], self.settings)
        message: Json = {}
        if record is not None and transport.wants_message:
            message = message_view(record, full=False, viewer_id=lease.agent_id)
            message["delivery_id"] = lease.delivery_id
        on_hand_off = None if transport.idempotent else self._marker(project_id, lease)
        return Delivery(lease.delivery_id, lease.attempt, project_id, agent, settings, message,
                        on_hand_off, fence=lease.fence)

    def _marker(self, project_id: str, lease: Leased) -> Any:
        def mark() -> None:
            if not self.store.mark_handed_off(project_id, lease):
                raise LeaseLost(LEASE_LOST)
        return mark

    def _record(self, transport: Transport, project_id: str, leased: list[Leased],
                outcomes: list[Outcome]) -> Counter[str]:
        if not leased:
            return Counter()
        schedule = policy.policy(transport.kind, self.settings).retry_schedule_s
        results = [result_of(schedule, lease, outcome)
                   for lease, outcome in zip(leased, outcomes, strict=True)]
        try:
            recorded = self.store.record_outcomes(
                project_id, list(zip(leased, results, strict=True)), self.health)
        finally:
            # Recorded, the slots are free; not, the requests are over all the same:
            # their slots run out, and their leases end as a lease that ran out.
            slots.give_back(self.store, project_id, leased)
        counts: Counter[str] = Counter()
        for lease, result, ok in zip(leased, results, recorded, strict=True):
            if ok:
                counts[result.kind] += 1
            else:
                counts["lease_lost"] += 1
                log.warning("delivery %s: lease lost before its outcome (%s) was recorded",
                            lease.delivery_id, result.kind)
        return counts


def judge(transport: Transport, delivery: Delivery,
          answer: Outcome | BaseException | None) -> Outcome:
    """What a transport's answer for one delivery means (the module's table)."""
    if isinstance(answer, Outcome):
        return answer
    if answer is None:
        answer = RuntimeError(f"{transport.kind} gave no answer")
    if not delivery.handed_off:
        return Outcome(OutcomeKind.FAILED, f"not sent: {_error(answer)}")
    if transport.idempotent and isinstance(answer, STORE_TROUBLE):
        outcome: Outcome = StoreAway(OutcomeKind.RETRY, f"the store was away: {_error(answer)}")
    else:
        outcome = Outcome(OutcomeKind.RETRY if transport.idempotent else OutcomeKind.UNKNOWN,
                          f"crashed after hand-off: {_error(answer)}")
    log.warning("delivery %s: %s %s", delivery.delivery_id, transport.kind, outcome.error)
    return outcome


def result_of(schedule: tuple[float, ...], lease: Leased, outcome: Outcome) -> Result:
    """What to record of an outcome: a retry waits its turn of the schedule (one that
    met the store away, a second), counted by the store's clock from when it records
    the retry (never this host's)."""
    kind, retry_in_ms = str(outcome.kind), 0
    if isinstance(outcome, StoreAway):
        retry_in_ms = STORE_AWAY_RETRY_MS
    elif outcome.kind == OutcomeKind.RETRY:
        if lease.round_attempt <= len(schedule):
            retry_in_ms = int(schedule[lease.round_attempt - 1] * MS_PER_S)
        else:
            kind = str(OutcomeKind.FAILED)
    return Result(kind, retry_in_ms, outcome.error, outcome.displayed, outcome.endpoint)
