"""A fair share of one API process for each project's requests.

A project whose agents flood the API would otherwise fill its event loop: every
other project's request then waits behind dozens of the flood's at each step
(reading, validation, authentication, admission, the answer). Here a project
has at most a few requests in progress at once in each process, from the first
byte handed to the app to the last byte of the answer; the rest wait their
turn in arrival order, costing nothing while they wait. A few at once keep a
process busy (each spends most of its time waiting on the store), so the
flooding project's own rate stays what the process can do, and another
project's request shares the process with those few, not with the whole flood.

Which project a request is from is known only once its token is looked up;
the gate remembers each token's project (``guard.Projects``), so a token's
later requests wait with their project's. A token not seen yet waits with
itself; requests without a token wait with others from the same address.
Event streams (SSE, MCP's stream) stay open for hours and are not counted;
they have their own caps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from starlette.types import ASGIApp, Receive, Scope, Send

from messaging.web.guard import Projects

# Requests of one project in progress at once in one API process. With eight, a
# flooding project kept the rate it had with no limit (bench: admission, fairness).
REQUESTS_AT_ONCE = 8


class FairShare:
    """At most ``at_once`` turns of each key in progress; the rest wait in order."""

    def __init__(self, at_once: int = REQUESTS_AT_ONCE) -> None:
        self.at_once = at_once
        self._slots: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """Inside, one of the key's requests is in progress."""
        slots, users = self._slots.get(key, (asyncio.Semaphore(self.at_once), 0))
        self._slots[key] = (slots, users + 1)
        try:
            async with slots:
                yield
        finally:
            slots, users = self._slots[key]
            if users == 1:
                del self._slots[key]  # no state kept for a quiet project
            else:
                self._slots[key] = (slots, users - 1)


class ProjectShare:
    """ASGI middleware: each project's requests take turns in a ``FairShare``."""

    def __init__(self, app: ASGIApp, projects: Projects, streams: Iterable[str],
                 at_once: int = REQUESTS_AT_ONCE) -> None:
        self.app = app
        self.projects = projects
        self.streams = frozenset(streams)
        self.share = FairShare(at_once)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "GET"
                                       and scope["path"] in self.streams):
            await self.app(scope, receive, send)
            return
        async with self.share.turn(self.projects.group(scope)):
            await self.app(scope, receive, send)
