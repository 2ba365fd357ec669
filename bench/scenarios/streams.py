"""Event streams: what many open streams cost everyone else.

Sends and inbox reads at fixed concurrency with no stream open, then the same
with 4 streams on each of 30 agents of the project and one stream in each of
150 other projects, all held open by a reader in this process and counting
the ``message`` events they get. Every stream must see mail sent to its
agent (one message goes into each other project), and every send and read
must answer 2xx, or the run is void.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import httpx

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadResult, LoadSpec
from bench.population import inbox_request, populate, ring, ring_sends
from bench.procs import wait_for
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, RunVoid, admitted, check_exactly_once, wait_delivered
from messaging.client import CourierClient

AGENTS = 30
PER_AGENT = 4  # the most an agent may hold open
OTHER_PROJECTS = 150
OPEN_TIMEOUT_S = 60.0


class Streams:
    """Event streams held open on a thread of their own; counts what each gets."""

    def __init__(self, url: str, tokens: list[str]) -> None:
        self.url, self.tokens = url, tokens
        self.opened = 0
        self.messages: Counter[str] = Counter()
        self.failures: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Streams:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        limits = httpx.Limits(max_connections=len(self.tokens) + 10)
        async with httpx.AsyncClient(base_url=self.url, timeout=None, limits=limits) as client:
            tasks = [asyncio.create_task(self._one(client, t)) for t in self.tokens]
            await self._stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, client: httpx.AsyncClient, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        try:
            async with client.stream("GET", "/v1/agents/me/events", headers=headers) as r:
                if r.status_code != 200:
                    self.failures.append(f"stream answered {r.status_code}")
                    return
                self.opened += 1
                async for line in r.aiter_lines():
                    if line == "event: message":
                        self.messages[token] += 1
        except httpx.HTTPError as e:
            self.failures.append(f"stream broke: {type(e).__name__}")


def _answered(result: LoadResult, what: str) -> None:
    if result.errors or any(not s.startswith("2") for s in result.statuses):
        raise RunVoid(f"{what}: {result.statuses}, {result.errors[:1]}")


def run(ctx: Context) -> dict[str, Any]:
    """Sends and reads without streams, then beside 270 open ones."""
    s = ctx.sizes
    with ctx.cluster("streams") as c:
        # Every client of the run shares one address: no cap on its connections.
        url = c.start_api_and_worker(max_connections_per_address=0)
        pop = populate(url, c.operator_token, ring(AGENTS))
        ctx.say(f"streams: {OTHER_PROJECTS} other projects")
        others = [populate(url, c.operator_token, ["Solo", "Peer"])
                  for _ in range(OTHER_PROJECTS)]
        sends = ring_sends(pop)
        reads = [inbox_request(a, 0, 10) for a in pop.agents]

        def load(what: str) -> tuple[LoadResult, LoadResult]:
            ctx.say(f"streams: sends and reads, {what}")
            sent = loadgen.run(LoadSpec(url, sends, s.concurrency, s.admission_s, s.warmup_s,
                                        keep=SEND_FIELDS))
            read = loadgen.run(LoadSpec(url, reads, s.concurrency, s.admission_s, s.warmup_s))
            _answered(read, f"reads {what}")
            return sent, read

        quiet_send, quiet_read = load("no stream open")
        tokens = [a.token for a in pop.agents for _ in range(PER_AGENT)]
        tokens += [o.agent("Solo").token for o in others]
        with Streams(url, tokens) as streams:
            wait_for(lambda: streams.opened + len(streams.failures) == len(tokens),
                     OPEN_TIMEOUT_S, "every stream to open")
            if streams.failures:
                raise RunVoid(f"streams: {streams.failures[:3]}")
            busy_send, busy_read = load(f"{len(tokens)} streams open")
            messages = [*admitted(quiet_send, "streams"), *admitted(busy_send, "streams")]
            with c.redis() as r:
                wait_delivered(r, pop.project_id, messages, s.drain_timeout_s, "streams")
                inboxes = Counter(aid for m in messages for _, aid in m.deliveries)
                check_exactly_once(r, pop.project_id, messages, "streams", dict(inboxes))
            # One message into each other project: every project's reader works,
            # however many projects have a stream open.
            for o in others:
                with CourierClient(url, o.agent("Peer").token) as peer:
                    peer.send(["Solo"], "Bench: ping", "ping")
            wait_for(lambda: all(streams.messages[t] for t in set(tokens)), 30,
                     "every stream's agent to see its mail")
            if streams.failures:
                raise RunVoid(f"streams broke under load: {streams.failures[:3]}")
            seen = sum(streams.messages.values())
    return {
        "streams": len(tokens),
        "send": {"quiet": {"per_s": round(quiet_send.per_s, 1),
                           **latency(quiet_send.latencies_ms)},
                 "streams": {"per_s": round(busy_send.per_s, 1),
                             **latency(busy_send.latencies_ms)},
                 "throughput_ratio": round(ratio(busy_send.per_s, quiet_send.per_s), 3)},
        "read": {"quiet": {"per_s": round(quiet_read.per_s, 1),
                           **latency(quiet_read.latencies_ms)},
                 "streams": {"per_s": round(busy_read.per_s, 1),
                             **latency(busy_read.latencies_ms)},
                 "throughput_ratio": round(ratio(busy_read.per_s, quiet_read.per_s), 3)},
        "message_events_seen": seen,
        "sent": len(messages),
    }
