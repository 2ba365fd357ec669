"""A local process that floods the API with stalled connections locks no local client out.

Every local client reaches the API from loopback, so the connection caps count
them as one client with the attacker: the flood (``tests.flood``, a process of
its own, 300 sockets that send part of a request line and are opened again as
soon as the server closes them) must not take the room of `/healthz`, of a CLI
call (a new connection each time) or of an agent's client (one kept-alive
connection), and choosing another loopback source address gains nothing.
"""

from __future__ import annotations

import json
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from messaging.client import CourierClient
from tests.integration.conftest import Project
from tests.stack import ROOT, Stack, wait_until

pytestmark = pytest.mark.slow

FLOOD_SOCKETS = 300
ROUNDS = 30
# Calls under the flood against the same calls just before it, at the median: the
# flood costs the machine's CPU (both sides open and close sockets as fast as they
# can: 0.8-2.8 ms became 1.5-10 ms on two cores), but no call waits for room (the
# 10 s header deadline, or a retry after a 429).
LATENCY_RATIO_MAX = 20.0


@contextmanager
def _flood(url: str, tmp: Path, sources: str = "127.0.0.1") -> Iterator[dict[str, Any]]:
    """``tests.flood`` against ``url`` until the block ends; what it saw, after."""
    host, port = url.removeprefix("http://").split(":")
    ready = tmp / "flood-ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.flood", host, port, "--sockets", str(FLOOD_SOCKETS),
         "--sources", sources, "--ready", str(ready)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    seen: dict[str, Any] = {}
    try:
        wait_until(ready.exists, 30, what="every flood socket opened once")
        time.sleep(1.0)  # past the first round of answers: the flood in its steady state
        yield seen
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        seen.update(json.loads(out.strip().splitlines()[-1]) if out.strip() else {})


def _timed(call: Callable[[], int]) -> tuple[int | str, float]:
    started = time.monotonic()
    try:
        status: int | str = call()
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    return status, time.monotonic() - started


def _rounds(url: str, token: str, agent: CourierClient) -> dict[str, list[tuple[int | str, float]]]:
    """``ROUNDS`` of each local client's call: status and seconds of each."""
    # A new connection for each request, as each CLI call or health probe opens one.
    fresh = httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0))
    calls: dict[str, Callable[[], int]] = {
        "healthz": lambda: fresh.get("/healthz").status_code,
        "cli": lambda: fresh.get("/v1/agents/me/inbox",
                                 headers={"Authorization": f"Bearer {token}"}).status_code,
        "agent": lambda: agent.http.get("/v1/agents/me/inbox").status_code,
    }
    with fresh:
        return {name: [_timed(call) for _ in range(ROUNDS)] for name, call in calls.items()}


@pytest.mark.parametrize("processes", ["1", "2"])
def test_local_clients_are_served_while_a_local_process_floods_stalled_connections(
        project: Project, tmp_path: Path, processes: str):
    proc, url = project.stack.start_api(env={"COURIER_API_PROCESSES": processes})
    reader = project.agent("Reader")
    try:
        with CourierClient(url, reader.row["token"]) as agent:
            _rounds(url, reader.row["token"], agent)  # warm: routes and the token cached
            before = _rounds(url, reader.row["token"], agent)
            with _flood(url, tmp_path) as seen:
                during = _rounds(url, reader.row["token"], agent)
    finally:
        proc.stop()
    # The flood ran: the server closed its sockets and it opened more, many times over.
    assert seen.get("opened", 0) > 2 * FLOOD_SOCKETS, seen
    for name, results in during.items():
        failed = [status for status, _ in results if status != 200]
        assert not failed, (name, failed, seen)
        baseline = statistics.median(s for _, s in before[name])
        flooded = statistics.median(s for _, s in results)
        assert flooded < LATENCY_RATIO_MAX * baseline, (name, baseline, flooded, seen)


def _stalled(url: str, source: str) -> socket.socket:
    """A connection from ``source`` that has sent part of a request line."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
    sock.sendall(b"GET /healthz HT")
    return sock


def test_every_loopback_address_counts_as_one_client(stack: Stack):
    proc, url = stack.start_api(env={"COURIER_MAX_PENDING_CONNECTIONS_PER_ADDRESS": "4",
                                     "COURIER_RATE_LIMIT_PER_S": "2"})
    try:
        held = [_stalled(url, f"127.0.0.{n}") for n in range(1, 5)]
        held[0].settimeout(5)
        try:
            time.sleep(0.2)  # the four read, and counted, before the fifth comes
            held.append(_stalled(url, "127.0.0.9"))
            # The oldest of the five made room: they count as one client's.
            answer = held[0].recv(65536)
            assert answer.startswith(b"HTTP/1.1 408"), answer
            assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["details"] == {
                "pending_max": 4}
        finally:
            for sock in held:
                sock.close()
        codes = []
        for n in range(40):
            transport = httpx.HTTPTransport(local_address=f"127.0.0.{n + 1}")
            with httpx.Client(base_url=url, transport=transport, timeout=10) as http:
                codes.append(http.get("/v1/agents/me/inbox",
                                      headers={"Authorization": "Bearer cat_bogus"}).status_code)
        assert 429 in codes and set(codes) <= {401, 429}, codes
    finally:
        proc.stop()
