"""Publishing deliveries: ready sets in the store, tickets on the broker.

Fairness: a delivery is not carried by its task. It joins its project's ready
set for its transport (``make_ready``), the project joins the ring of the
queue it is served on (its lane's, or the shared one), and anonymous tickets
(``courier.deliver(transport, lane)``) are published, one per batch of a
project's ready set (what joins a partly filled batch rides on its ticket, and
what joins while a worker holds the project's turn open rides on that turn:
the store counts the held turn as one ready delivery). A worker
taking any ticket serves the next project of the ring, round robin, one batch:
a project's backlog of thousands holds up another project's new mail by one
batch per worker, not by the backlog.

A send's deliveries join their ready sets in the admission script itself; the
API hands what it made ready (and other hand-overs, made ready here) to a
``BatchPublisher``: a task on its event loop that puts the projects in their
rings and publishes their tickets. Each submission returns a future that says
whether the batch carrying it was published. An answer does not wait for it
while the publisher trusts the broker (its last publish went through, none is
overdue): the send is in the store and its outbox, and saying nothing of its
dispatch is true. Only while the publisher is in doubt (not yet heard from
the broker, its last publish failed, or one is overdue) does an answer wait
for its own publish, to say truly whether it was deferred. A failed publish
loses nothing: the delivery is already in the store's outbox, and the
sweeper hands it over again (``publish_again``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from celery import Celery
from kombu.exceptions import ChannelError

from messaging.config import Settings
from messaging.runtime.brokerclient import transport_for
from messaging.runtime.celeryconf import (
    DELIVER_TASK,
    batch_size,
    celery_config,
    courier_queues,
    queue_for,
    transport_kinds,
)
from messaging.store.deliveries import DeliveryStore
from messaging.store.store import Store

log = logging.getLogger(__name__)

# How many admitted deliveries the publisher thread takes at once.
BATCH_MAX = 400
# A delivery rides on an earlier ticket of its batch only while the broker took a
# ticket of that queue this recently; after that its publish asks the broker again,
# so a send made once the broker is gone says its dispatch was deferred.
RIDE_S = 0.1
IDLE_WAIT_S = 0.5
# A publish on its way this long puts the publisher in doubt: the broker may be hanging.
OVERDUE_S = 1.0


@dataclass(frozen=True)
class Readied:
    """What making one project's deliveries of a transport ready found."""

    project_id: str
    transport: str
    added: int
    lane: str
    count: int

    @property
    def queue(self) -> str:
        """The queue the project is served on for this transport."""
        return queue_for(self.transport, self.lane)


def grouped(items: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str], list[str]]:
    """(project, transport, delivery) items as delivery ids per (project, transport)."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for project_id, transport, delivery_id in items:
        groups[(project_id, transport)].append(delivery_id)
    return groups


class Publisher:
    """Makes deliveries ready and sends tickets; raises when the broker cannot take them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = Celery("courier-publisher", set_as_current=False)
        self.app.conf.update(celery_config(settings),
                             broker_transport=transport_for(settings.celery_broker_url))
        self._store: DeliveryStore | None = None
        # Queues whose last tickets failed to publish: what joins them next cannot
        # ride on a ticket of those, so it is counted whole.
        self._owed: set[tuple[str, str]] = set()
        # When the broker last took a ticket of each queue (monotonic seconds).
        self._heard: dict[tuple[str, str], float] = {}

    @property
    def store(self) -> DeliveryStore:
        """The store (its own connections, made on first use)."""
        if self._store is None:
            self._store = DeliveryStore.from_url(self.settings.store_url)
        return self._store

    def tickets(self, transport: str, lane: str, count: int) -> None:
        """Publish ``count`` tickets for one transport's queue (on a lane, the lane's).

        Raises:
            kombu/OSError exceptions when the broker is unreachable.
        """
        for _ in range(count):
            self.app.send_task(DELIVER_TASK, args=[transport, lane],
                               queue=queue_for(transport, lane), retry=False)

    def _before(self, r: Readied, whole: bool) -> int:
        """How many of the project's ready deliveries had their tickets already."""
        return 0 if whole or (r.transport, r.lane) in self._owed else r.count - r.added

    def joins(self, r: Readied, whole: bool = False) -> bool:
        """Whether the project must join its queue's ring.

        A project with deliveries already ready is in the ring: whoever made the
        set non-empty joins it (another API process may be a moment from doing
        so: a ticket that finds the ring empty meanwhile is made good by the
        sweeper), and a worker leaving the ring looks at the set again after
        leaving.
        """
        return self._before(r, whole) == 0

    def wanted(self, readied: Iterable[Readied], *,
               whole: bool = False) -> dict[tuple[str, str], int]:
        """The tickets made-ready deliveries need per (transport, lane).

        A project's ready deliveries have a ticket per batch: what joins a set
        that already fills part of a batch rides on that batch's ticket, so a
        flood of single sends publishes one ticket per batch, not one per send.
        ``whole`` counts a ticket for every batch of the projects' ready sets
        (when tickets may have been lost), as do queues whose last publish failed.
        """
        out: dict[tuple[str, str], int] = defaultdict(int)
        for r in readied:
            batch = batch_size(r.transport)
            out[(r.transport, r.lane)] += (math.ceil(r.count / batch)
                                           - math.ceil(self._before(r, whole) / batch))
        return out

    def due(self, wanted: dict[tuple[str, str], int]) -> list[tuple[tuple[str, str], int]]:
        """The tickets to publish now: those wanted, and one for a queue whose broker
        was not heard from for ``RIDE_S`` (a send rides on its batch's ticket only
        while the broker is known to be there). That ticket counts as heard from
        until its publish ends: batches made while it is on its way ride on it (if it
        fails, the queue is owed a whole ticket next time)."""
        now = time.monotonic()
        out = []
        for target, tickets in wanted.items():
            if not tickets and now - self._heard.get(target, 0.0) > RIDE_S:
                tickets = 1
            if tickets:
                self._heard[target] = now
            out.append((target, tickets))
        return out

    def send(self, due: list[tuple[tuple[str, str], int]]) -> int:
        """Publish the tickets ``due`` gave; how many.

        Raises:
            kombu/OSError exceptions when the broker is unreachable; the queues
            not published are owed whole counts next time.
        """
        sent = 0
        for i, (target, tickets) in enumerate(due):
            if target in self._owed:
                # What was counted as riding on a ticket that then failed to publish.
                tickets = max(tickets, 1)
            try:
                self.tickets(*target, tickets)
            except Exception:
                self._owed.update(q for q, _ in due[i:])  # this one and those not tried
                raise
            self._owed.discard(target)
            if tickets:
                self._heard[target] = time.monotonic()
            sent += tickets
        return sent

    def _ready(self, items: Iterable[tuple[str, str, str]], *,
               whole: bool = False) -> dict[tuple[str, str], int]:
        """Make (project, transport, delivery) items ready, each project in its
        queue's ring; returns the tickets they need per (transport, lane)."""
        readied = []
        for (project_id, transport), dids in grouped(items).items():
            r = Readied(project_id, transport, *self.store.make_ready(project_id, transport, dids))
            if self.joins(r, whole):
                self.store.ring_join(r.queue, project_id)
            readied.append(r)
        return self.wanted(readied, whole=whole)

    def publish_grouped(self, items: Iterable[tuple[str, str, str]]) -> int:
        """Make (project, transport, delivery) items ready and publish their tickets,
        one per batch of each project's (and one where the broker was not heard from
        for ``RIDE_S``). Returns how many were published."""
        return self.send(self.due(self._ready(items)))

    def publish_again(self, items: Iterable[tuple[str, str, str]]) -> int:
        """Hand deliveries over again (the sweeper's outbox, a retry whose time came).

        They are made ready again. Their tickets may have been lost with a broker
        outage, so each queue gets tickets for their batches, less the tickets it
        already holds (any ticket serves whichever project's turn it is): a
        backlog waiting its turn is not published over and over. Returns how
        many tickets were published.
        """
        wanted = self._ready(items, whole=True)
        depths = self.queue_depths()
        tasks = 0
        for (transport, lane), count in wanted.items():
            tickets = max(0, count - depths.get(queue_for(transport, lane), 0))
            self.tickets(transport, lane, tickets)
            tasks += tickets
        return tasks

    def rehome(self, project_id: str, transport: str, lane: str) -> int:
        """After a lane change: the project joins its queue's ring, with tickets for all its
        ready deliveries of the transport. Returns how many are ready."""
        count = self.store.ready_count(project_id, transport)
        if count:
            self.store.ring_join(queue_for(transport, lane), project_id)
            self.tickets(transport, lane, math.ceil(count / batch_size(transport)))
        return count

    def move_lane(self, project_id: str, lane: str) -> dict[str, int]:
        """Put a project on a lane ("" for the shared queues); its waiting deliveries follow.

        Returns the ready deliveries per transport that moved.
        """
        old = self.store.set_lane(project_id, lane)
        moved: dict[str, int] = {}
        for transport in transport_kinds():
            if old != lane:
                self.store.ring_drop(queue_for(transport, old), project_id)
            moved[transport] = self.rehome(project_id, transport, lane)
        return moved

    def queue_names(self) -> list[str]:
        """Every delivery queue, lanes' included, and the sweeper's."""
        return courier_queues(self.store.lanes())

    def queue_depths(self) -> dict[str, int]:
        """Tasks waiting in each Courier queue (Redis and AMQP brokers alike).

        Raises:
            kombu/OSError exceptions when the broker is unreachable.
        """
        depths: dict[str, int] = {}
        names = self.queue_names()
        with self.app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1)
            for name in names:
                # A channel each: AMQP closes a channel on a passive miss.
                channel = conn.channel()
                try:
                    declared = channel.queue_declare(queue=name, passive=True)
                    depths[name] = int(declared.message_count)
                except ChannelError:  # Redis keeps no empty queue; AMQP may not have it yet
                    depths[name] = 0
                finally:
                    channel.close()
        return depths

    def ping(self) -> bool:
        """True when the broker accepts a connection."""
        try:
            with self.app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1)
            return True
        except Exception:  # any failure to connect is "not reachable"
            return False

    def close(self) -> None:
        """Release broker and store connections."""
        self.app.close()
        if self._store is not None:
            self._store.close()


class BatchPublisher:
    """Publishes what the API admitted, in batches, from the API's event loop.

    Two stages, each a task on the loop. Rings: a send's deliveries arrive
    already ready (the admission script made them so), other hand-overs (a
    bound name, a release, a redrive, a notice) are made ready here, and the
    projects that need it join their rings, all of a batch in one store round
    trip on the API's asyncio client. Tickets: what the batches need goes to
    the broker from a thread of its own (the broker's client is synchronous),
    everything queued since the last publish at once. A project's mail is thus
    in its ring, where busy workers look between steps, without waiting for
    any broker round trip; tickets go out in the order their batches joined,
    and a batch that rides on an earlier batch's ticket is confirmed only once
    that ticket is.
    """

    def __init__(self, publisher: Publisher, store: Store) -> None:
        self.publisher = publisher
        self.store = store
        self.failures = 0
        self._pending: list[Submitted] = []
        self._wake = asyncio.Event()
        self._due: list[tuple[Due, list[asyncio.Future[bool]]]] = []
        self._due_wake = asyncio.Event()
        # When the tickets on their way to the broker left (monotonic seconds), or None.
        self._sending_since: float | None = None
        # Until a publish goes through: a failure of the broker or of ringing is known.
        self._failing = True
        self._stopping = False
        self._ringing: asyncio.Task[None] | None = None
        self._ticketing: asyncio.Task[None] | None = None
        self._broker = ThreadPoolExecutor(1, thread_name_prefix="courier-publisher")

    @property
    def ready_kinds(self) -> list[str]:
        """The transports whose deliveries admission makes ready itself."""
        return transport_kinds()

    @property
    def in_doubt(self) -> bool:
        """True while an answer should wait for its own publish: the broker has not
        taken a publish yet, the last one failed, or one has been on its way for
        ``OVERDUE_S``."""
        since = self._sending_since
        return self._failing or (since is not None and time.monotonic() - since > OVERDUE_S)

    def start(self) -> None:
        """Start publishing (on the running event loop)."""
        loop = asyncio.get_running_loop()
        self._ringing = loop.create_task(self._rings(), name="courier-publisher-rings")
        self._ticketing = loop.create_task(self._tickets(), name="courier-publisher-tickets")

    def submit(self, project_id: str, transport: str, delivery_id: str) -> asyncio.Future[bool]:
        """Queue one delivery for making ready and publishing; never blocks.

        The future becomes True once the batch carrying it is published, False
        if that publish failed (the outbox keeps the delivery).
        """
        return self._queue((project_id, transport, delivery_id))

    def submit_ready(self, project_id: str, transport: str, added: int, lane: str,
                     count: int) -> asyncio.Future[bool]:
        """Queue ``added`` deliveries the admission script made ready (``count`` ready
        now, served on ``lane``), for their ring and tickets; never blocks. The
        future is as ``submit``'s."""
        return self._queue(Readied(project_id, transport, added, lane, count))

    def _queue(self, item: Item) -> asyncio.Future[bool]:
        published: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((item, published))
        self._wake.set()
        return published

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Publish what is queued, then stop."""
        self._stopping = True
        self._wake.set()
        self._due_wake.set()
        if self._ringing is not None and self._ticketing is not None:
            try:
                await asyncio.wait_for(asyncio.gather(self._ringing, self._ticketing), timeout_s)
            except TimeoutError:
                log.warning("the publisher did not finish in %.0f s; the outbox keeps "
                            "what it had", timeout_s)
        self._broker.shutdown(wait=False)
        self.publisher.close()

    async def _rings(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending[:BATCH_MAX], self._pending[BATCH_MAX:]
                futures = [published for _, published in batch]
                try:
                    due = self.publisher.due(self.publisher.wanted(
                        await self._ready([item for item, _ in batch])))
                except Exception:  # the store: nothing of this batch is published
                    self._settle(futures, ok=False)
                    if not self._stopping:
                        await asyncio.sleep(IDLE_WAIT_S)
                    continue
                if not any(tickets for _, tickets in due) and not self._due \
                        and self._sending_since is None:
                    # It rides on tickets the broker took, none of them still on its way.
                    self._settle(futures, ok=True)
                else:
                    self._due.append((due, futures))
                    self._due_wake.set()
            if self._stopping:
                self._due_wake.set()
                return

    async def _tickets(self) -> None:
        while True:
            await self._due_wake.wait()
            self._due_wake.clear()
            while self._due:
                queued, self._due = self._due, []
                merged: dict[tuple[str, str], int] = defaultdict(int)
                for due, _ in queued:
                    for target, tickets in due:
                        merged[target] += tickets
                futures = [f for _, batch_futures in queued for f in batch_futures]
                self._sending_since = time.monotonic()
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        self._broker, self.publisher.send, list(merged.items()))
                except Exception:  # the outbox keeps them; the sweeper publishes again
                    self._settle(futures, ok=False)
                    if not self._stopping:
                        await asyncio.sleep(IDLE_WAIT_S)
                else:
                    self._failing = False
                    self._settle(futures, ok=True)
                finally:
                    self._sending_since = None
            if self._stopping and self._ringing is not None and self._ringing.done():
                return  # nothing more can be queued

    async def _ready(self, items: list[Item]) -> list[Readied]:
        """What the items made ready; deliveries not yet ready are made so. The
        projects that made a ready set non-empty join their rings."""
        readied = [item for item in items if isinstance(item, Readied)]
        loose = [item for item in items if not isinstance(item, Readied)]
        for (project_id, transport), dids in grouped(loose).items():
            readied.append(Readied(project_id, transport,
                                   *await self.store.make_ready(project_id, transport, dids)))
        # In the order their mail came: the rings serve those joining first come, first served.
        joins = list(dict.fromkeys((r.queue, r.project_id) for r in readied
                                   if self.publisher.joins(r)))
        if joins:
            await self.store.ring_join(joins)
        return readied

    def _settle(self, futures: list[asyncio.Future[bool]], *, ok: bool) -> None:
        if not ok:
            self._failing = True
            self.failures += 1
            log.warning("publish of %d deliveries failed; the outbox keeps them", len(futures))
        for published in futures:
            if not published.done():
                published.set_result(ok)


# One hand-over: a delivery to make ready (project, transport, delivery id), or what
# the admission script made ready; and the future its sender awaits.
Item = tuple[str, str, str] | Readied
Submitted = tuple[Item, asyncio.Future[bool]]
# The tickets a batch needs, per (transport, lane).
Due = list[tuple[tuple[str, str], int]]
