"""MCP against HTTP: the API's CPU per send over each face, one client, sequential sends.

One agent sends ``mcp_sends`` messages over the REST API, one after another,
then as many over one MCP session (streamable HTTP, the official client) with
the ``send_message`` tool. Reported: the CPU time the API spent per send
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


def _over_http(url: str, token: str, sends: int, body: str) -> list[Admitted]:
    with CourierClient(url, token) as alice:
        return [admitted_answer(alice.send(["Bob"], f"http {n}", body)) for n in range(sends)]


async def _over_mcp(url: str, token: str, sends: int, body: str) -> list[Admitted]:
    out = []
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=30) as http, \
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        for n in range(sends):
            result = await client.call_tool("send_message", {
                "to": ["Bob"], "subject": f"mcp {n}", "body_md": body})
            if result.is_error or result.structured_content is None:
                raise RunVoid(f"mcp: send_message failed: {result.content[:1]}")
            out.append(admitted_answer(result.structured_content))
    return out


def run(ctx: Context) -> dict[str, Any]:
    """The API's CPU and wall time per send, over HTTP and then over MCP."""
    s = ctx.sizes
    with ctx.cluster("mcp") as c:
        url = c.start_api_and_worker()
        api = next(p for p in c.procs if p.name == "app")
        api_pid = api.pid
        pop = populate(url, c.operator_token, ["Alice", "Bob"])
        token, body = pop.agent("Alice").token, body_md()
        out: dict[str, Any] = {"sends": s.mcp_sends}
        sent: list[Admitted] = []
        for face in ("http", "mcp"):
            ctx.say(f"mcp: {s.mcp_sends} sequential sends over {face}")
            with profiled(api, ctx.profile_dir, f"mcp-api-{face}"):
                cpu_s, wall_s = _tree_cpu_s(api_pid), time.monotonic()
                sent_now = (_over_http(url, token, s.mcp_sends, body) if face == "http"
                            else asyncio.run(_over_mcp(url, token, s.mcp_sends, body)))
                wall_s, cpu_s = time.monotonic() - wall_s, _tree_cpu_s(api_pid) - cpu_s
            out[face] = {"api_cpu_ms_per_send": round(1000 * cpu_s / s.mcp_sends, 3),
                         "wall_ms_per_send": round(1000 * wall_s / s.mcp_sends, 3)}
            sent += sent_now
        with c.redis() as r:
            wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "mcp")
            inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
            check_exactly_once(r, pop.project_id, sent, "mcp", dict(inboxes))
    return out
