"""MCP against HTTP: the API's CPU per send over each face, one client, sequential sends.

One agent sends ``mcp_sends`` messages over the REST API, one after another,
and as many over one MCP session (streamable HTTP, the official client) with
the ``send_message`` tool, in turns that alternate (after a few unmeasured
sends on each face). Each face starts a send every ``PERIOD_S``: a process
that waits longer between requests spends more CPU on each (measured: the
same REST send costs about 1.6 times the CPU with 1.5 ms of idle before each),
and the MCP client takes longer between calls than the REST one, so unpaced
the ratio would weigh the two clients' pace as much as the two faces.
Reported: the CPU time the API spent per send (every thread of every process
of the API's tree, from the scheduler's nanosecond counts, so several API
processes count together) and the client's time per send, MCP beside HTTP,
and how many sends took longer than the period. Every message is checked
exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.context import Context
from bench.population import body_md, populate
from bench.procs import tree_cpu_s
from bench.profile import profiled
from bench.verify import (
    Admitted,
    RunVoid,
    admitted_answer,
    check_exactly_once,
    wait_delivered,
)
from messaging.client import CourierClient

# Unmeasured sends on each face first: the first requests of a process warm its caches.
WARMUP_SENDS = 20
# The measured sends of each face go in this many turns, the faces alternating, so a
# drift of the machine's speed falls on both alike.
TURNS = 12
# A send starts this long after the one before it on either face: longer than either
# client takes for one (about 2.5 ms over REST, 4 ms over MCP on the 2-core machine).
PERIOD_S = 0.008


class Faces:
    """One agent's REST client and MCP session, each sending ``send_message``'s twin, and
    the API's CPU and wall time each face's measured turns took."""

    def __init__(self, url: str, token: str, body: str, api_pid: int) -> None:
        self.url, self.token, self.body, self.api_pid = url, token, body, api_pid
        self.sent = 0
        self.spent = {face: {"cpu_s": 0.0, "client_s": 0.0, "sends": 0, "overran": 0}
                      for face in ("http", "mcp")}

    def subject(self, face: str) -> str:
        self.sent += 1
        return f"{face} {self.sent}"

    async def run(self, turns: list[tuple[str, int, bool]]) -> list[Admitted]:
        """Send each turn's count over its face, one every ``PERIOD_S``; a measured turn
        adds to ``spent``."""
        out: list[Admitted] = []
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"},
                                      timeout=30) as http, \
                Client(streamable_http_client(f"{self.url}/mcp", http_client=http)) as mcp:
            with CourierClient(self.url, self.token) as rest:
                async def over_rest() -> Admitted:
                    return admitted_answer(rest.send(["Bob"], self.subject("http"), self.body))

                async def over_mcp() -> Admitted:
                    result = await mcp.call_tool("send_message", {
                        "to": ["Bob"], "subject": self.subject("mcp"), "body_md": self.body})
                    if result.is_error or result.structured_content is None:
                        raise RunVoid(f"mcp: send_message failed: {result.content[:1]}")
                    return admitted_answer(result.structured_content)

                for face, count, measured in turns:
                    one = over_rest if face == "http" else over_mcp
                    cpu_s, client_s, overran = tree_cpu_s(self.api_pid), 0.0, 0
                    for _ in range(count):
                        started = time.monotonic()
                        out.append(await one())
                        took = time.monotonic() - started
                        client_s += took
                        overran += took > PERIOD_S
                        await asyncio.sleep(max(0.0, PERIOD_S - took))
                    if measured:
                        spent = self.spent[face]
                        spent["cpu_s"] += tree_cpu_s(self.api_pid) - cpu_s
                        spent["client_s"] += client_s
                        spent["sends"] += count
                        spent["overran"] += overran
        return out


def run(ctx: Context) -> dict[str, Any]:
    """The API's CPU and wall time per send over HTTP and over MCP, in alternating turns."""
    s = ctx.sizes
    with ctx.cluster("mcp") as c:
        url = c.start_api_and_worker()
        api = next(p for p in c.procs if p.name == "app")
        pop = populate(url, c.operator_token, ["Alice", "Bob"])
        faces = Faces(url, pop.agent("Alice").token, body_md(), api.pid)
        per_turn = max(1, s.mcp_sends // TURNS)
        turns = [("http", WARMUP_SENDS, False), ("mcp", WARMUP_SENDS, False)]
        turns += [(face, per_turn, True) for _ in range(TURNS) for face in ("http", "mcp")]
        ctx.say(f"mcp: {per_turn * TURNS} sequential sends on each face, in {TURNS} turns each, "
                f"one every {PERIOD_S * 1000:g} ms")
        with profiled(api, ctx.profile_dir, "mcp-api"):
            sent = asyncio.run(faces.run(turns))
        out: dict[str, Any] = {"sends": per_turn * TURNS, "turns": TURNS}
        out["period_ms"] = PERIOD_S * 1000
        for face, got in faces.spent.items():
            out[face] = {"api_cpu_ms_per_send": round(1000 * got["cpu_s"] / got["sends"], 3),
                         "client_ms_per_send": round(1000 * got["client_s"] / got["sends"], 3),
                         "sends_over_period": got["overran"]}
        with c.redis() as r:
            wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "mcp")
            inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
            check_exactly_once(r, pop.project_id, sent, "mcp", dict(inboxes))
    return out
