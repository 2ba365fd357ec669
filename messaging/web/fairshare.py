"""A fair share of one API process for each project's requests.

A project whose agents flood the API would otherwise fill its event loop: every
other project's request then waits behind dozens of the flood's at each step
(reading, validation, authentication, admission, the answer). Here a project
has only a few requests in progress at once in each process, from the first
byte handed to the app to the last byte of the answer; the rest wait their
turn in arrival order, costing nothing while they wait.

How many depends on who else is there. A project alone in the process has up
to eight at once (each spends most of its time waiting on the store or the
publisher, so eight keep a process busy): a lone flood keeps the rate the
process can do. Once another project has been seen within the last
``PRESENT_S``, each present project has four: another project's request then
shares the event loop with four of the flood's, not eight.

Which project a request is from is known from its headers: the gate
(``guard.Authenticate``) has looked its token up before this layer runs, and
before the body is read, so a slow body holds no turn. The operator's requests
wait together; requests without a valid token (none, or any number of bogus
ones) wait with others from the same address. Event streams (SSE, MCP's
stream) stay open for hours and are not counted; they have their own caps.
Health checks (``/healthz``, ``/readyz``) never wait.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Receive, Scope, Send

from messaging.web.guard import HEALTH_PATHS, auth_of

# Requests of a project in progress at once in one API process: alone in it, and
# while other projects are there. With eight, a lone flooding project kept the rate
# it had with no limit (bench: admission). With four while another project trickled,
# that project's send -> inbox p99 under the flood was lower in each of three runs
# (median 43 ms against 54 ms with eight); two halved its time in the API but cost
# the flood a third of its rate and made twice the tickets (bench: fairness).
ALONE_AT_ONCE = 8
SHARED_AT_ONCE = 4
# A project counts as there for this long after its last request ended: one that
# sends a few times a second is there all along, not only while a request runs.
PRESENT_S = 0.3


@dataclass
class _Project:
    in_progress: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)
    last_s: float = 0.0


class FairShare:
    """Turns per key: ``alone`` at once while one key is present, ``shared`` each
    while several are; the rest wait in arrival order."""

    def __init__(self, alone: int = ALONE_AT_ONCE, shared: int = SHARED_AT_ONCE,
                 present_s: float = PRESENT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.alone, self.shared, self.present_s = alone, shared, present_s
        self.clock = clock
        self._keys: dict[str, _Project] = {}

    def at_once(self) -> int:
        """How many turns each key may have in progress now."""
        return self.alone if len(self._keys) <= 1 else self.shared

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """Inside, one of the key's requests is in progress."""
        self._forget_quiet()
        project = self._keys.setdefault(key, _Project())
        if project.waiting or project.in_progress >= self.at_once():
            granted = asyncio.get_running_loop().create_future()
            project.waiting.append(granted)
            try:
                await granted
            except asyncio.CancelledError:
                if granted.cancelled():
                    if granted in project.waiting:
                        project.waiting.remove(granted)
                else:  # its turn came as it was cancelled: pass the turn on
                    self._done(project)
                raise
        else:
            project.in_progress += 1
        try:
            yield
        finally:
            self._done(project)

    def _forget_quiet(self) -> None:
        now = self.clock()
        for key in [k for k, p in self._keys.items() if not p.in_progress
                    and not p.waiting and now - p.last_s > self.present_s]:
            del self._keys[key]

    def _done(self, project: _Project) -> None:
        project.in_progress -= 1
        project.last_s = self.clock()
        self._forget_quiet()
        # Only this project's count fell, and only its own share can have grown (to
        # the lone share, when the others went quiet): no other project has a turn
        # to give. A project with requests waiting always has one in progress.
        at_once = self.at_once()
        while project.waiting and project.in_progress < at_once:
            granted = project.waiting.popleft()
            if not granted.done():  # not cancelled while it waited
                project.in_progress += 1
                granted.set_result(None)


class ProjectShare:
    """ASGI middleware: each project's requests take turns in a ``FairShare``."""

    def __init__(self, app: ASGIApp, streams: Iterable[str],
                 share: FairShare | None = None) -> None:
        self.app = app
        self.streams = frozenset(streams)
        self.share = share or FairShare()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in HEALTH_PATHS or (
                scope["method"] == "GET" and scope["path"] in self.streams):
            await self.app(scope, receive, send)
            return
        async with self.share.turn(auth_of(scope).group):
            await self.app(scope, receive, send)
