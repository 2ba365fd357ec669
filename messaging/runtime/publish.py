"""Publishing deliveries: ready sets in the store, tickets on the broker.

Fairness: a delivery is not carried by its task. It joins its project's ready
set for its transport (``make_ready``), the project joins the ring of the
queue it is served on (its lane's, or the shared one), and anonymous tickets
(``courier.deliver(transport, lane)``) are published, one per batch of a
project's ready set (what joins a partly filled batch rides on its ticket). A worker
taking any ticket serves the next project of the ring, round robin, one batch:
a project's backlog of thousands holds up another project's new mail by one
batch per worker, not by the backlog.

The API hands admitted deliveries to a ``BatchPublisher``: a thread that
groups them per (project, transport), makes them ready and publishes their
tickets. Each ``submit`` returns a future that says whether the batch carrying that
delivery was published, so an answer can tell about its own send. A failed
publish loses nothing: the delivery is already in the store's outbox, and the
sweeper hands it over again (``publish_again``).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import Future

from celery import Celery
from kombu.exceptions import ChannelError

from messaging.config import Settings
from messaging.runtime.celeryconf import (
    DELIVER_TASK,
    batch_size,
    celery_config,
    courier_queues,
    queue_for,
    transport_kinds,
)
from messaging.store.deliveries import DeliveryStore

log = logging.getLogger(__name__)

# How many admitted deliveries the publisher thread takes at once.
BATCH_MAX = 400
# A delivery rides on an earlier ticket of its batch only while the broker took a
# ticket of that queue this recently; after that its publish asks the broker again,
# so a send made once the broker is gone says its dispatch was deferred.
RIDE_S = 0.1
IDLE_WAIT_S = 0.5


class Publisher:
    """Makes deliveries ready and sends tickets; raises when the broker cannot take them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = Celery("courier-publisher", set_as_current=False)
        self.app.conf.update(celery_config(settings))
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

    def _ready(self, items: Iterable[tuple[str, str, str]], *,
               whole: bool = False) -> dict[tuple[str, str], int]:
        """Make (project, transport, delivery) items ready, each project in its
        queue's ring; returns the tickets they need per (transport, lane).

        A project's ready deliveries have a ticket per batch: what joins a set
        that already fills part of a batch rides on that batch's ticket, so a
        flood of single sends publishes one ticket per batch, not one per send.
        ``whole`` counts a ticket for every batch of the projects' ready sets
        (when tickets may have been lost), as do queues whose last publish failed.
        """
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for project_id, transport, delivery_id in items:
            groups[(project_id, transport)].append(delivery_id)
        wanted: dict[tuple[str, str], int] = defaultdict(int)
        for (project_id, transport), dids in groups.items():
            added, lane, count = self.store.make_ready(project_id, transport, dids)
            self.store.ring_join(queue_for(transport, lane), project_id)
            batch = batch_size(transport)
            before = 0 if whole or (transport, lane) in self._owed else count - added
            wanted[(transport, lane)] += math.ceil(count / batch) - math.ceil(before / batch)
        return wanted

    def publish_grouped(self, items: Iterable[tuple[str, str, str]]) -> int:
        """Make (project, transport, delivery) items ready and publish their tickets,
        one per batch of each project's (and one where the broker was not heard from
        for ``RIDE_S``). Returns how many were published."""
        wanted = list(self._ready(items).items())
        tasks = 0
        for i, (target, tickets) in enumerate(wanted):
            if not tickets and time.monotonic() - self._heard.get(target, 0.0) > RIDE_S:
                tickets = 1  # ask the broker again: has it gone since the last ticket?
            try:
                self.tickets(*target, tickets)
            except Exception:
                self._owed.update(q for q, _ in wanted[i:])  # this one and those not tried
                raise
            self._owed.discard(target)
            if tickets:
                self._heard[target] = time.monotonic()
            tasks += tickets
        return tasks

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
            self._store.client.close()


# One delivery to publish (project, transport, delivery id) and what its sender awaits.
Submitted = tuple[tuple[str, str, str], Future[bool]]


class BatchPublisher:
    """A background thread that publishes what the API admitted, in batches."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.pending: queue.SimpleQueue[Submitted | None] = queue.SimpleQueue()
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="courier-publisher", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def submit(self, project_id: str, transport: str, delivery_id: str) -> Future[bool]:
        """Queue one delivery for publishing; never blocks.

        The future becomes True once the batch carrying it is published, False
        if that publish failed (the outbox keeps the delivery).
        """
        published: Future[bool] = Future()
        self.pending.put(((project_id, transport, delivery_id), published))
        return published

    def stop(self, timeout_s: float = 5.0) -> None:
        """Publish what is queued, then stop the thread."""
        self.pending.put(None)
        self._thread.join(timeout_s)
        self.publisher.close()

    def _take_batch(self) -> tuple[list[Submitted], bool]:
        try:
            first = self.pending.get(timeout=IDLE_WAIT_S)
        except queue.Empty:
            return [], False
        if first is None:
            return [], True
        batch = [first]
        while len(batch) < BATCH_MAX:
            try:
                item = self.pending.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch, stopping = self._take_batch()
            if not batch:
                continue
            try:
                self.publisher.publish_grouped(item for item, _ in batch)
                ok = True
            except Exception:  # the outbox keeps them; the sweeper publishes again
                ok = False
                self.failures += 1
                log.warning("publish of %d deliveries failed; the outbox keeps them", len(batch))
            for _, published in batch:
                published.set_result(ok)
            if not ok:
                time.sleep(IDLE_WAIT_S)
