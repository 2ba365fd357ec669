"""Sends to many unknown names cost other projects nothing (docs/security.md, Sends).

Close names for unknown recipients are computed on the API's event loop. A
project of 600 agents with 60-character names, four of them sending to 100
near misses each at a steady pace (26 requests in 6 s, far under any rate
limit), runs beside another project that sends and calls `/healthz`: that
project's medians stay within 1.5x of its baseline, measured just before in
the same run (against a floor of a few milliseconds, the noise of two cores).
"""

from __future__ import annotations

import random
import statistics
import string
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Agent, Project
from tests.stack import Stack

pytestmark = pytest.mark.slow

AGENTS = 600
NAME_CHARS = 60
UNKNOWN_PER_SEND = 100
SENDERS = 4
SEND_EVERY_S = 0.9  # each sender's pace: 4 senders make about 26 sends in 6 s
FLOOD_S = 6.0
BASELINE_S = 4.0
PROBE_EVERY_S = 0.05
RATIO_MAX = 1.5
FLOOR_S = 0.01
TIMEOUT_S = 60.0


def _names(rnd: random.Random) -> list[str]:
    alphabet = string.ascii_lowercase + string.digits
    return [f"load-agent-{i:04d}-" + "".join(rnd.choice(alphabet)
                                             for _ in range(NAME_CHARS - 16))
            for i in range(AGENTS)]


def _near_miss(name: str, at: int) -> str:
    """``name`` with one character changed at ``at``."""
    return name[:at] + ("_" if name[at] != "_" else "-") + name[at + 1:]


@pytest.fixture
def other(stack: Stack) -> Iterator[tuple[Agent, Agent]]:
    """Two agents of another project: one sends to the other."""
    with stack.operator() as op:
        p = op.create_project(f"/srv/other/{time.monotonic_ns()}")
    with stack.client(p["token"]) as admin:
        rows = [admin.register_agent(p["project_id"], name) for name in ("Sender", "Reader")]
    clients = [stack.client(row["token"]) for row in rows]
    yield Agent(rows[0], clients[0]), Agent(rows[1], clients[1])
    for client in clients:
        client.close()


def _probe(url: str, sender: Agent, until: float) -> tuple[list[float], list[float]]:
    """The other project's `/healthz` and send latencies, one of each per round."""
    health, sends = [], []
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as anon:
        while time.monotonic() < until:
            started = time.monotonic()
            assert anon.get("/healthz").status_code == 200
            health.append(time.monotonic() - started)
            started = time.monotonic()
            sent = sender.api.http.post("/v1/messages", json={
                "to": ["Reader"], "subject": "Tick", "body_md": "x"})
            sends.append(time.monotonic() - started)
            assert sent.status_code == 201, sent.text
            time.sleep(PROBE_EVERY_S)
    return health, sends


def _flood(url: str, token: str, unknown: list[str], stop: threading.Event,
           answers: list[dict[str, Any]]) -> Callable[[], None]:
    def run() -> None:
        with httpx.Client(base_url=url, timeout=TIMEOUT_S,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            while not stop.is_set():
                started = time.monotonic()
                got = http.post("/v1/messages", json={
                    "to": unknown, "subject": "Near misses", "body_md": "x"})
                answers.append({"status": got.status_code, **got.json()})
                stop.wait(max(0.0, SEND_EVERY_S - (time.monotonic() - started)))
    return run


def test_sends_to_many_near_miss_names_leave_other_projects_served(
        project: Project, other: tuple[Agent, Agent]):
    url = project.stack.api_url
    rnd = random.Random(49)
    names = _names(rnd)
    assert {len(n) for n in names} == {NAME_CHARS}
    path = f"/v1/projects/{project.project_id}/agents"
    tokens = []
    for name in names:
        got = project.admin.http.post(path, json={"name": name, "transport": {"kind": "inbox"}})
        assert got.status_code == 201, got.text
        tokens.append(got.json()["token"])
    sender, _ = other

    health0, sends0 = _probe(url, sender, time.monotonic() + BASELINE_S)

    stop = threading.Event()
    answers: list[dict[str, Any]] = []
    threads = []
    for s in range(SENDERS):
        targets = rnd.sample(names, UNKNOWN_PER_SEND)
        unknown = [_near_miss(n, rnd.randrange(len(n))) for n in targets]
        threads.append(threading.Thread(
            target=_flood(url, tokens[s], unknown, stop, answers), daemon=True))
    for thread in threads:
        thread.start()
    try:
        health1, sends1 = _probe(url, sender, time.monotonic() + FLOOD_S)
    finally:
        stop.set()
        for thread in threads:
            thread.join(TIMEOUT_S)

    figures = {
        "healthz_ms": (statistics.median(health0) * 1000, statistics.median(health1) * 1000),
        "send_ms": (statistics.median(sends0) * 1000, statistics.median(sends1) * 1000),
        "flood_sends": len(answers),
    }
    for before, during in (figures["healthz_ms"], figures["send_ms"]):
        assert during <= RATIO_MAX * max(before, FLOOR_S * 1000), figures
    assert len(answers) >= SENDERS * int(FLOOD_S / SEND_EVERY_S) // 2, figures
    for answer in answers:
        assert answer["status"] == 422 and answer["error"]["code"] == "RECIPIENT_NOT_FOUND"
        assert len(answer["error"]["details"]["recipients"]) == UNKNOWN_PER_SEND
