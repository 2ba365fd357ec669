"""Search indexing after dispatch, when it holds up no delivery.

A worker that dispatched deliveries puts their messages on their project's
search queue (``DeliveryStore.after_step``, in the round trip that looks at the
ring between two steps); the index is written here, from the head of each
queue, a few messages per script call:

- at the end of every delivery task, for every project with a queue, while no
  project waits on the shared delivery queues or on the task's own (lane)
  queue (as soon as one does, indexing stops and its deliveries go first), and
  for each project only while none of its own deliveries wait (on its lane);
- entries queued longer than ``search_lag_max_s`` are indexed even then, but
  no more per task than a batch per turn it served, so a flood that outlasts
  that is indexed as fast as it is delivered, that far behind;
- the sweeper does the same for every project, so nothing waits on a queue
  for the next delivery task.

A message is thus searchable a moment after its dispatch on a quiet
deployment; a burst of deliveries is indexed once it is delivered.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Sequence
from itertools import takewhile

from messaging.store.deliveries import DeliveryStore, now_ms
from messaging.store.searchindex import IndexQueues, queued_at_ms

# Entries per index call: a worker's step of a few messages, so that one call
# holds the store about a millisecond and a delivery waits behind one at most.
CHUNK = 10
# One indexing run gives way after this long (another run goes on from there).
RUN_MAX_S = 5.0
# A claim outlasts its run; it runs out by itself if its indexer died.
CLAIM_MS = 30_000


def overdue(entries: list[str], before_ms: int) -> list[str]:
    """The head of ``entries`` (oldest first) queued before ``before_ms``."""
    return list(takewhile(lambda e: queued_at_ms(e) < before_ms, entries))


def index_pending(store: DeliveryStore, queues: Sequence[str], transports: Sequence[str],
                  lag_max_s: float, overdue_budget: int,
                  projects: Sequence[str] | None = None) -> int:
    """Index what waits on the search queues of ``projects`` (every project with a
    queue when None) while no project waits on ``queues``, each while none of its
    own deliveries of ``transports`` wait; past ``lag_max_s`` in the queue, up to
    ``overdue_budget`` entries even then. Returns how many it indexed."""
    run = _Run(store.index_queues, list(queues), list(transports),
               int(lag_max_s * 1000), overdue_budget)
    todo = list(store.index_queues.pending() if projects is None else projects)
    random.shuffle(todo)  # two indexers at once mostly take different projects
    for project_id in todo:
        if run.over() or not run.project(project_id):
            break
    return run.done


class _Run:
    """One indexing run: its deadline, its claim token, what it did."""

    def __init__(self, queues: IndexQueues, delivery_queues: list[str], transports: list[str],
                 lag_max_ms: int, overdue_budget: int) -> None:
        self.queues, self.delivery_queues, self.transports = queues, delivery_queues, transports
        self.lag_max_ms, self.budget = lag_max_ms, overdue_budget
        self.token = uuid.uuid4().hex
        self.deadline = time.monotonic() + RUN_MAX_S
        self.done = 0

    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def project(self, project_id: str) -> bool:
        """Work through one project's queue; False when deliveries wait on the rings
        (the run stops)."""
        entries, go_on = self._next(project_id)
        # Claimed only with something to do: while deliveries wait, a look costs
        # one round trip per project, not a claim and its release too.
        if not entries or not self.queues.claim(project_id, self.token, CLAIM_MS):
            return go_on  # nothing to do now, or another indexer has it
        try:
            while entries:
                self.queues.index(project_id, entries)
                self.done += len(entries)
                if self.over():
                    return True
                entries, go_on = self._next(project_id)
            return go_on
        finally:
            self.queues.release(project_id, self.token)

    def _next(self, project_id: str) -> tuple[list[str], bool]:
        """The project's entries to index next (none: nothing now) and whether the run
        may go on to other projects."""
        entries, ready, waiting = self.queues.peek(project_id, CHUNK, self.transports,
                                                   self.delivery_queues)
        if not entries:
            self.queues.settle(project_id)
            return [], True
        if waiting or ready:  # deliveries first, but not for ever
            entries = overdue(entries, now_ms() - self.lag_max_ms)[:self.budget]
            self.budget -= len(entries)
            if not entries:
                return [], not waiting  # only its own waited: others may go on
        return entries, True
