"""A fair share of one API process for each project's sends.

A project whose agents flood the API would otherwise fill its event loop: every
other project's send then waits behind dozens of the flood's requests at each
step (validation, admission). Here a project has at most a few sends being
admitted at once in each process; the rest wait their turn in arrival order,
costing nothing while they wait. Waiting for the broker to take a send's
deliveries is outside the turn, so a few at once keep a process busy: the
flooding project's own rate stays what the process can do, and another
project's send shares the process with those few, not with the whole flood.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# Sends of one project in progress at once in one API process.
SENDS_AT_ONCE = 4


class FairShare:
    """At most ``at_once`` sends of each project in progress; the rest wait in order."""

    def __init__(self, at_once: int = SENDS_AT_ONCE) -> None:
        self.at_once = at_once
        self._slots: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def turn(self, project_id: str) -> AsyncIterator[None]:
        """Inside, one of the project's sends is in progress."""
        slots, users = self._slots.get(project_id, (asyncio.Semaphore(self.at_once), 0))
        self._slots[project_id] = (slots, users + 1)
        try:
            async with slots:
                yield
        finally:
            slots, users = self._slots[project_id]
            if users == 1:
                del self._slots[project_id]  # no state kept for a quiet project
            else:
                self._slots[project_id] = (slots, users - 1)
