"""Celery tasks: delivery (one transport, several deliveries) and the sweeper."""

from __future__ import annotations

import logging
import os
import time
from collections import Counter

import redis
from celery.utils.log import get_task_logger

from messaging import transports
from messaging.config import get_settings
from messaging.runtime.celeryconf import DELIVER_TASK, SWEEP_TASK, delivery_queues
from messaging.runtime.publish import Publisher
from messaging.store.deliveries import US_PER_MS, DeliveryStore, Leased, now_ms
from messaging.store.durability import Durability
from messaging.transports import policy
from messaging.transports.base import Transport
from workers.app import app
from workers.dispatch import Dispatcher
from workers.indexer import index_pending

log: logging.Logger = get_task_logger(__name__)

LEASE_EXPIRED = "the worker's lease ran out after the request was handed off; whether " \
    "the receiver got it is unknown"
LEASE_EXPIRED_NOT_SENT = "not sent: the worker stopped before handing the request off"

# A ticket serves the projects of its ring one turn each, this many turns at most
# (a turn that finds nothing ready, taken by another ticket, counts too).
TURNS_PER_TICKET = 8
# Past the search lag, the sweeper indexes this many entries per round even while
# deliveries wait (delivery tasks index more: a batch per turn they served).
SWEEP_INDEX_OVERDUE = 100
# A turn is carried a batch divided by this at a time (a step); between two
# steps it looks for another project waiting. Smaller steps let a waiting
# project in sooner; larger ones spend fewer store round trips per delivery, so
# a busy project's worker keeps up with its admissions on fewer cores (bench:
# fairness, stack, delivery).
STEPS_PER_BATCH = 10
# While no other project is in the ring, a take is up to this many steps when
# that much is ready: a project that joins waits for the takes under way.
ALONE_STEPS = 2
# A step that empties a lone project's ready set holds its turn open: the worker
# pauses this long and takes again, and mail made ready meanwhile rides on the
# turn instead of asking for a ticket (a Celery task) of its own.
HOLD_PAUSE_S = 0.003
# How long the store keeps a held turn open if its worker never takes again (it
# died): after that, new mail asks for tickets again.
HOLD_MS = 100

_store: tuple[int, DeliveryStore] | None = None
_publisher: tuple[int, Publisher] | None = None


def store() -> DeliveryStore:
    """This process's store connection (made after fork, never shared across it)."""
    global _store
    if _store is None or _store[0] != os.getpid():
        settings = get_settings()
        _store = (os.getpid(), DeliveryStore.from_url(settings.store_url,
                                                      Durability.of(settings)))
    return _store[1]


def publisher() -> Publisher:
    """This process's publisher, for the sweeper."""
    global _publisher
    if _publisher is None or _publisher[0] != os.getpid():
        _publisher = (os.getpid(), Publisher(get_settings()))
    return _publisher[1]


def summary(transport: str, project_id: str, counts: Counter[str]) -> str:
    """What a delivery task did, as Flower shows it: its outcomes by kind."""
    if not counts:
        return f"{transport} {project_id}: nothing to do (leased or recorded elsewhere)"
    told = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
    done = sum(counts.values())
    if counts.get("failed", 0) == done:
        told += " (all failed)"
    return f"{transport} {project_id}: {told}"


@app.task(name=DELIVER_TASK)
def deliver(transport: str, lane: str = "") -> str:
    """A ticket: turns on this transport's queue (on a lane, the lane's).

    Serves the project whose turn it is (round robin over the projects with
    ready deliveries): up to one batch, taken and carried a tenth of a batch at
    a time, and only while no other project waits on the queue; a step that
    empties the ready set of a project alone holds the turn open for the mail
    that comes in the next few milliseconds. Then the ticket
    goes on to the next project, if another waits, for a few turns at most.
    Leases what is free, carries it, records outcomes; then, while no
    delivery waits, indexes for search what was dispatched (``workers.indexer``).
    Returns what it recorded, by outcome, and indexed, for Flower.
    """
    carrier = transports.get(transport, get_settings())
    queue = policy.queue(carrier.kind, lane)
    told: list[str] = []
    owed = False
    turn = None
    for _ in range(TURNS_PER_TICKET):
        turn = store().ring_next(queue)
        if turn is None:
            break
        project_id, waiting = turn
        served, gave_way, unticketed = _turn(carrier, queue, lane, project_id, waiting)
        if served is not None or gave_way:
            owed = unticketed
        if served is not None:
            told.append(served)
            # Another project waiting (this turn gave way to it, or it joined while
            # the turn ran) is served by this ticket at once, rather than waiting for
            # the broker to hand a worker its own ticket, which then serves whoever
            # is next. With none, the ticket ends: the project's own newer mail has
            # tickets of its own, and serving it here would take it in smaller bites.
            if not gave_way and store().ring_others(queue, project_id) == 0:
                break
    if owed:
        # The last turn left mail that no ticket carries (it gave way, or served
        # a whole batch while more was made ready): it gets one of its own. A turn
        # followed by another that served is even with the tickets: the next
        # project's own ticket is spare now.
        publisher().tickets(carrier.kind, lane, 1)
    indexed = index_after(sorted({*delivery_queues(), queue}), carrier.batch_size * len(told))
    if indexed:
        told.append(f"indexed {indexed} for search")
    if told:
        return "; ".join(told)
    return f"{queue}: nothing waiting" if turn is None else \
        f"{queue}: nothing ready in {TURNS_PER_TICKET} turns"


def _turn(carrier: Transport, queue: str, lane: str, project_id: str,
          waiting: int) -> tuple[str | None, bool, bool]:
    """One project's turn: what it did (None when it had nothing ready, or moved
    lanes), whether it ended early because another project waits, and whether
    it leaves deliveries ready that no ticket carries.

    Those are what it left when it gave way, or what was made ready during a
    turn that served a whole batch: the publisher counted them against the
    ready set as the turn shrank it, as if this turn's ticket still covered
    them, so they ride on no ticket (what was ready when the turn began has
    the tickets of its other batches).
    """
    transport = carrier.kind
    # A project is served a tenth of a batch at a time (the transport's parallel
    # deliveries at least), up to ALONE_STEPS of them while it is alone; between
    # two takes, a look at the ring: another project waiting ends the turn, so
    # none waits behind more than one take.
    step = max(carrier.parallel, carrier.batch_size // STEPS_PER_BATCH, 1)
    counts: Counter[str] = Counter()
    done = 0
    gave_way = False
    newest_at_start = -1  # the newest ready score the turn's first take left
    in_ring = waiting
    held = False  # the last take emptied the ready set and holds the turn open
    left = 0  # what the last take left ready
    dispatcher = Dispatcher(store(), get_settings())
    while True:
        alone = waiting <= 1 and in_ring <= 1
        if held and alone:
            time.sleep(HOLD_PAUSE_S)
        size = min(min(max(step, left), ALONE_STEPS * step) if alone else step,
                   carrier.batch_size - done)
        # Held only while the turn can go on after the take; the next take closes it.
        hold_ms = HOLD_MS if alone and done + size < carrier.batch_size else 0
        taken, leased_now = dispatcher.take(carrier, project_id, lane, size, hold_ms)
        left = taken.left
        if newest_at_start < 0:
            newest_at_start = taken.newest
        if taken.moved_to is not None:
            # The project moved to another lane since it joined this ring.
            store().ring_drop(queue, project_id)
            publisher().rehome(project_id, transport, taken.moved_to)
            break
        leased: list[Leased] = []
        if taken.delivery_ids:
            more, leased = dispatcher.run(
                carrier, project_id, taken.delivery_ids,
                give_way=lambda: store().ring_others(queue, project_id) > 0, leased=leased_now)
            counts += more
            done += len(taken.delivery_ids)
        held = taken.held_open
        goes_on = (taken.left > 0 or held) and done < carrier.batch_size
        # The step's messages go on the search queue, after their outcomes, in the
        # same round trip as the look at the ring that decides whether to go on.
        in_ring = after_step(project_id, leased, queue if goes_on and waiting <= 1 else None)
        if not goes_on:
            break
        if held:
            continue  # after a pause if still alone, at once if another project waits
        if waiting > 1 or in_ring > 1:
            gave_way = True
            break
    if taken.moved_to is None and not taken.left and store().ring_leave(queue, project_id,
                                                                         transport):
        # Mail made ready while the project left the ring: its ticket may have been
        # spent on an empty ring.
        publisher().tickets(transport, lane, 1)
    unticketed = taken.moved_to is None and taken.left > 0 and (
        gave_way or taken.newest > newest_at_start)
    return (summary(transport, project_id, counts) if done else None), gave_way, unticketed


def after_step(project_id: str, leased: list[Leased], ring: str | None) -> int:
    """Queue dispatched messages for the search index, for their senders and these
    recipients (``workers.indexer`` writes it when no delivery waits), and, given
    a queue, count the projects in its ring: one round trip.

    After the outcomes are recorded, so search never delays a delivery; a failure
    to queue is logged and leaves the deliveries as recorded.
    """
    error = None
    try:
        in_ring, error = store().after_step(
            project_id, [(lease.message_id, lease.agent_id, lease.sender_id) for lease in leased],
            now_ms(), ring)
    except redis.RedisError as exc:
        if ring is not None:
            raise
        in_ring, error = 0, exc
    if error is not None:
        log.warning("search index of %s not updated: %s",
                    sorted({lease.message_id for lease in leased}), error)
    return in_ring


def index_after(queues: list[str], overdue_budget: int,
                projects: list[str] | None = None) -> int:
    """Index what waits for search while no project waits on ``queues``; how many
    entries. A failure is logged (the entries stay queued)."""
    try:
        return index_pending(store(), queues, list(transports.installed()),
                             get_settings().search_lag_max_s, overdue_budget, projects)
    except redis.RedisError as exc:
        log.warning("search indexing stopped: %s", exc)
        return 0


# No task events: a sweep every few seconds would push the delivery tasks out
# of Flower's history on a quiet deployment.
@app.task(name=SWEEP_TASK, send_events=False)
def sweep() -> int:
    """Publish again what was admitted but never dispatched, is due for a retry
    or a redrive, or whose idempotent worker died; record the outcome where a
    non-idempotent worker's lease ran out; index what waits for search.

    Every step of it goes by the store's clock, read once per project: what is
    due, which subscriptions and authorized names ran out.

    Returns how many deliveries were published again.
    """
    grace_ms = int(get_settings().outbox_grace_s * 1000)
    idempotent = [kind for kind, t in transports.installed().items() if t.idempotent]
    published = 0
    projects = store().project_ids()
    for project_id in projects:
        now = store().clock_ms(project_id)
        # Expired subscriptions first: their notices are due at once, so this
        # round publishes them.
        store().expire_subscriptions(project_id, now)
        # Authorized names that ran out: their waiting mail fails (or, for a
        # name registered meanwhile, is bound and published now).
        bound = store().expire_names(project_id, now * US_PER_MS, now)
        actions = store().sweep(project_id, grace_ms, idempotent, now)
        todo = [(project_id, a.transport, a.delivery_id) for a in actions if a.action == "publish"]
        todo += [(project_id, b.transport, b.delivery_id) for b in bound]
        for a in actions:
            if a.action != "expired":
                continue
            outcome = store().expire_lease(project_id, a.delivery_id, LEASE_EXPIRED,
                                           LEASE_EXPIRED_NOT_SENT)
            if outcome:
                log.warning("delivery %s: lease ran out; outcome %s", a.delivery_id, outcome)
        if todo:
            tickets = publisher().publish_again(todo)
            published += len(todo)
            log.info("sweeper handed %d deliveries of %s over again (%d new tickets)",
                     len(todo), project_id, tickets)
    # Every project's search queue, not only those listed as having one: on a
    # cluster, a queue's first entry and its listing may land in either order.
    queued = store().index_queues.queued(projects)
    if queued:
        index_after(delivery_queues(), SWEEP_INDEX_OVERDUE, queued)
    return published
