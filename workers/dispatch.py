"""The one path of a delivery through a worker, whatever its transport.

Lease (fenced), prepare (load the recipient, check its settings again, build
the message), call the transport, judge its answer, schedule retries from our
own due-time set, keep endpoint health, record under the lease's token.

What is recorded is what is known:
    an exception before the transport handed the request off   failed, at once
    an exception after it (non-idempotent transport)           unknown
    an exception after it (idempotent transport)               retried
    ``retry`` past the last wait of the schedule               failed
One delivery's trouble never stops the others of its task.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from pydantic import ValidationError

from messaging import transports
from messaging.config import Settings
from messaging.errors import from_validation
from messaging.service.views import message_view
from messaging.store.deliveries import DeliveryStore, EndpointHealth, Leased, Result
from messaging.transports import policy
from messaging.transports.base import Delivery, Outcome, OutcomeKind, Transport
from messaging.types import Json

log = logging.getLogger(__name__)

LEASE_LOST = "lease lost before hand-off"


class LeaseLost(RuntimeError):
    """Another worker owns the delivery now: the request must not leave."""


_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}


def pool(size: int) -> ThreadPoolExecutor:
    """This process's threads for transports that carry several deliveries at once
    (made after fork, never shared across it)."""
    key = (os.getpid(), size)
    if key not in _pools:
        _pools[key] = ThreadPoolExecutor(size, thread_name_prefix="carry")
    return _pools[key]


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

    def run(self, transport: Transport, project_id: str,
            delivery_ids: list[str]) -> tuple[Counter[str], list[Leased]]:
        """Lease what is free of these deliveries, carry it, record.

        Returns the outcomes recorded, by kind, and what was leased.
        """
        lease_ms = int(policy.policy(transport.kind, self.settings).lease_s * 1000)
        if transport.idempotent:
            leased = self.store.lease(project_id, delivery_ids, lease_ms, True)
            return self._carry(transport, project_id, leased), leased
        # Leases taken just before their requests leave, for as many at a time
        # as the transport carries at once: a lease never runs out while its
        # delivery waits behind others in the same task.
        step = max(1, transport.parallel)
        counts: Counter[str] = Counter()
        every: list[Leased] = []
        for at in range(0, len(delivery_ids), step):
            leased = self.store.lease(project_id, delivery_ids[at:at + step], lease_ms, False)
            if len(leased) > 1:
                counts += self._carry_at_once(transport, project_id, leased)
            else:
                counts += self._carry(transport, project_id, leased)
            every += leased
        return counts, every

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
                outcomes.append(self._judge(transport, item, next(answers, None)))
            else:
                outcomes.append(item)
        return self._record(transport, project_id, leased, outcomes)

    def _carry_at_once(self, transport: Transport, project_id: str,
                       leased: list[Leased]) -> Counter[str]:
        """Carry each delivery on a thread of its own; record outcomes as they come,
        so a slow receiver never holds up what the others answered."""
        prepared = self._prepare(transport, project_id, leased)
        ready: list[tuple[Leased, Outcome]] = []
        running: dict[Future[Outcome | BaseException], tuple[Leased, Delivery]] = {}
        for lease, item in zip(leased, prepared, strict=True):
            if isinstance(item, Delivery):
                running[pool(transport.parallel).submit(_deliver_one, transport, item)] = (
                    lease, item)
            else:
                ready.append((lease, item))
        counts: Counter[str] = Counter()
        waiting = set(running)
        while waiting:
            finished, waiting = wait(waiting, return_when=FIRST_COMPLETED)
            for future in finished:
                lease, delivery = running[future]
                ready.append((lease, self._judge(transport, delivery, future.result())))
            counts += self._record(transport, project_id, [r[0] for r in ready],
                                   [r[1] for r in ready])
            ready = []
        if ready:
            counts += self._record(transport, project_id, [r[0] for r in ready],
                                   [r[1] for r in ready])
        return counts

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

    def _judge(self, transport: Transport, delivery: Delivery,
               answer: Outcome | BaseException | None) -> Outcome:
        if isinstance(answer, Outcome):
            return answer
        if answer is None:
            answer = RuntimeError(f"{transport.kind} gave no answer")
        if not delivery.handed_off:
            return Outcome(OutcomeKind.FAILED, f"not sent: {_error(answer)}")
        log.warning("delivery %s: %s crashed after hand-off: %s", delivery.delivery_id,
                    transport.kind, _error(answer))
        if transport.idempotent:
            return Outcome(OutcomeKind.RETRY, f"crashed after hand-off: {_error(answer)}")
        return Outcome(OutcomeKind.UNKNOWN, f"crashed after hand-off: {_error(answer)}")

    def _result(self, schedule: tuple[float, ...], lease: Leased, outcome: Outcome) -> Result:
        kind, retry_at_ms = str(outcome.kind), 0
        if outcome.kind == OutcomeKind.RETRY:
            if lease.round_attempt <= len(schedule):
                wait_s = schedule[lease.round_attempt - 1]
                retry_at_ms = int((time.time() + wait_s) * 1000)
            else:
                kind = str(OutcomeKind.FAILED)
        return Result(kind, retry_at_ms, outcome.error, outcome.displayed, outcome.endpoint)

    def _record(self, transport: Transport, project_id: str, leased: list[Leased],
                outcomes: list[Outcome]) -> Counter[str]:
        schedule = policy.policy(transport.kind, self.settings).retry_schedule_s
        results = [self._result(schedule, lease, outcome)
                   for lease, outcome in zip(leased, outcomes, strict=True)]
        recorded = self.store.record_outcomes(project_id, list(zip(leased, results, strict=True)),
                                              self.health)
        counts: Counter[str] = Counter()
        for lease, result, ok in zip(leased, results, recorded, strict=True):
            if ok:
                counts[result.kind] += 1
            else:
                counts["lease_lost"] += 1
                log.warning("delivery %s: lease lost before its outcome (%s) was recorded",
                            lease.delivery_id, result.kind)
        return counts
