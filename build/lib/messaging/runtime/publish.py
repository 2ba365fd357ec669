"""Publishing delivery tasks to the broker, by name, one queue per transport.

The API hands admitted deliveries to a ``BatchPublisher``: a thread that
groups them per (project, transport) and publishes one task per group, off
the request's critical path. A failed publish loses nothing: the delivery is
already in the store's outbox, and the sweeper publishes it again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterable

from celery import Celery
from kombu.exceptions import ChannelError

from messaging.config import Settings
from messaging.runtime.celeryconf import DELIVER_TASK, batch_size, celery_config, queue_for

log = logging.getLogger(__name__)

# How many admitted deliveries the publisher thread takes at once.
BATCH_MAX = 400
IDLE_WAIT_S = 0.5


class Publisher:
    """Sends ``courier.deliver`` tasks; raises when the broker cannot take them."""

    def __init__(self, settings: Settings) -> None:
        self.app = Celery("courier-publisher", set_as_current=False)
        self.app.conf.update(celery_config(settings))

    def publish(self, project_id: str, transport: str, delivery_ids: list[str]) -> None:
        """Publish one task carrying these deliveries of one transport.

        Raises:
            kombu/OSError exceptions when the broker is unreachable.
        """
        self.app.send_task(
            DELIVER_TASK,
            args=[project_id, transport, delivery_ids],
            queue=queue_for(transport),
            retry=False,
        )

    def publish_grouped(self, items: Iterable[tuple[str, str, str]]) -> int:
        """Publish (project, transport, delivery) items, a transport's batch size per task."""
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for project_id, transport, delivery_id in items:
            groups[(project_id, transport)].append(delivery_id)
        tasks = 0
        for (project_id, transport), dids in groups.items():
            size = batch_size(transport)
            for start in range(0, len(dids), size):
                self.publish(project_id, transport, dids[start : start + size])
                tasks += 1
        return tasks

    def queue_depths(self) -> dict[str, int]:
        """Tasks waiting in each Courier queue (Redis and AMQP brokers alike).

        Raises:
            kombu/OSError exceptions when the broker is unreachable.
        """
        depths: dict[str, int] = {}
        with self.app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1)
            for queue in self.app.conf.task_queues:
                # A channel each: AMQP closes a channel on a passive miss.
                channel = conn.channel()
                try:
                    declared = channel.queue_declare(queue=queue.name, passive=True)
                    depths[queue.name] = int(declared.message_count)
                except ChannelError:  # Redis keeps no empty queue; AMQP may not have it yet
                    depths[queue.name] = 0
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
        """Release broker connections."""
        self.app.close()


class BatchPublisher:
    """A background thread that publishes what the API admitted, in batches."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.pending: queue.SimpleQueue[tuple[str, str, str] | None] = queue.SimpleQueue()
        self.broker_ok = True
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="courier-publisher", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def submit(self, project_id: str, transport: str, delivery_id: str) -> None:
        """Queue one delivery for publishing; never blocks."""
        self.pending.put((project_id, transport, delivery_id))

    def stop(self, timeout_s: float = 5.0) -> None:
        """Publish what is queued, then stop the thread."""
        self.pending.put(None)
        self._thread.join(timeout_s)
        self.publisher.close()

    def _take_batch(self) -> tuple[list[tuple[str, str, str]], bool]:
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
                self.publisher.publish_grouped(batch)
                self.broker_ok = True
            except Exception:  # the outbox keeps them; the sweeper publishes again
                self.broker_ok = False
                self.failures += 1
                log.warning("publish of %d deliveries failed; the outbox keeps them", len(batch))
                time.sleep(IDLE_WAIT_S)
