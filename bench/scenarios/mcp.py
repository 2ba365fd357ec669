"""MCP against HTTP: the API's CPU per send over each face, one client, sequential sends.

One agent sends ``mcp_sends`` messages over the REST API, one after another,
and as many over one MCP session (streamable HTTP, the official client) with
the ``send_message`` tool, in turns that alternate (after a few unmeasured
sends on each face). Reported: the CPU time the API spent per send
(every process of the API's tree, read from /proc, so several API processes
count together) and the wall time per send, MCP beside HTTP. Every message
is checked exactly once.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.context import Context
from bench.population import body_md, populate
from bench.profile import profiled
from bench.verify import (
    Admitted,
    RunVoid,
    admitted_answer,
    check_exactly_once,
    wait_delivered,
)
from messaging.client import CourierClient

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(pid: int) -> float:
    """User and system CPU seconds of ``pid`` and every process below it."""
    parents: dict[int, int] = {}
    spent: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        spent[child] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    tree, grew = {pid}, True
    while grew:
        below = {p for p, parent in parents.items() if parent in tree} - tree
        grew = bool(below)
        tree |= below
    return sum(spent.get(p, 0.0) for p in tree)


# Unmeasured sends on each face first: the first requests of a process warm its caches.
WARMUP_SENDS = 20
# The measured sends of each face go in this many turns, the faces alternating, so a
# drift of the machine's speed falls on both alike.
TURNS = 6


class Faces:
    """One agent's REST client and MCP session, each sending ``send_message``'s twin, and
    the API's CPU and wall time each face's measured turns took."""

    def __init__(self, url: str, token: str, body: str, api_pid: int) -> None:
        self.url, self.token, self.body, self.api_pid = url, token, body, api_pid
        self.sent = 0
        self.spent = {face: {"cpu_s": 0.0, "wall_s": 0.0, "sends": 0} for face in ("http", "mcp")}

    def subject(self, face: str) -> str:
        self.sent += 1
        return f"{face} {self.sent}"

    async def run(self, turns: list[tuple[str, int, bool]]) -> list[Admitted]:
        """Send each turn's count over its face; a measured turn adds to ``spent``."""
        out: list[Admitted] = []
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"},
                                      timeout=30) as http, \
                Client(streamable_http_client(f"{self.url}/mcp", http_client=http)) as mcp:
            with CourierClient(self.url, self.token) as rest:
                for face, count, measured in turns:
                    cpu_s, wall_s = _tree_cpu_s(self.api_pid), time.monotonic()
                    sent = await (self._rest(rest, count) if face == "http"
                                  else self._mcp(mcp, count))
                    if measured:
                        spent = self.spent[face]
                        spent["cpu_s"] += _tree_cpu_s(self.api_pid) - cpu_s
                        spent["wall_s"] += time.monotonic() - wall_s
                        spent["sends"] += len(sent)
                    out += sent
        return out

    async def _rest(self, rest: CourierClient, count: int) -> list[Admitted]:
        return [admitted_answer(rest.send(["Bob"], self.subject("http"), self.body))
                for _ in range(count)]

    async def _mcp(self, mcp: Client, count: int) -> list[Admitted]:
        out = []
        for _ in range(count):
            result = await mcp.call_tool("send_message", {
                "to": ["Bob"], "subject": self.subject("mcp"), "body_md": self.body})
            if result.is_error or result.structured_content is None:
                raise RunVoid(f"mcp: send_message failed: {result.content[:1]}")
            out.append(admitted_answer(result.structured_content))
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
        ctx.say(f"mcp: {per_turn * TURNS} sequential sends on each face, in {TURNS} turns each")
        with profiled(api, ctx.profile_dir, "mcp-api"):
            sent = asyncio.run(faces.run(turns))
        out: dict[str, Any] = {"sends": per_turn * TURNS, "turns": TURNS}
        for face, got in faces.spent.items():
            out[face] = {"api_cpu_ms_per_send": round(1000 * got["cpu_s"] / got["sends"], 3),
                         "wall_ms_per_send": round(1000 * got["wall_s"] / got["sends"], 3)}
        with c.redis() as r:
            wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "mcp")
            inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
            check_exactly_once(r, pop.project_id, sent, "mcp", dict(inboxes))
    return out
