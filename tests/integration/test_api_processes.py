"""Several API processes act as one: rate limits, stream caps and /metrics span them,
and each gives every project its fair share.

Two kinds of several: two API processes on two ports (as on two machines), and
one API of two processes on one port (``COURIER_API_PROCESSES``), whose
connections land on either process as the kernel hands them out.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bench import loadgen
from bench.population import populate, ring, ring_sends, send_request
from tests.integration.conftest import Project
from tests.stack import Proc, Stack, children, free_port, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

RATE_PER_S = 5
STREAMS_PER_AGENT = 4
REQUESTS = 20
# A project's flood: connections at once, and for how long (the other project
# sends while it runs, starting a second in).
FLOOD_CONNECTIONS = 128
FLOOD_S = 30.0  # long enough for the other's sends on a busy machine (11 s seen)
OTHER_SENDS = 40


@pytest.fixture
def two_apis(stack: Stack) -> Iterator[list[str]]:
    """Two API processes of the shared store, each rate-limiting at ``RATE_PER_S``."""
    env = {"COURIER_RATE_LIMIT_PER_S": str(RATE_PER_S)}
    started: list[Proc] = []
    urls: list[str] = []
    try:
        for _ in range(2):
            proc, url = stack.start_api(env=env)
            started.append(proc)
            urls.append(url)
        yield urls
    finally:
        for proc in started:
            proc.stop()


def _spend(urls: list[str], headers: dict[str, str], path: str) -> tuple[list[int], float]:
    """``REQUESTS`` requests, alternating between the APIs; their statuses and time taken."""
    clients = [httpx.Client(base_url=url, headers=headers, timeout=10) for url in urls]
    started = time.monotonic()
    try:
        codes = [clients[n % len(clients)].get(path).status_code for n in range(REQUESTS)]
    finally:
        for client in clients:
            client.close()
    return codes, time.monotonic() - started


def test_a_token_s_rate_is_one_budget_across_two_api_processes(project: Project,
                                                                two_apis: list[str]):
    bob = project.agent("Bob")
    codes, took_s = _spend(two_apis, {"Authorization": f"Bearer {bob.row['token']}"},
                           "/v1/agents/me/inbox")
    allowed = codes.count(200)
    # One second's burst, plus what refilled while the requests ran; apart, each
    # process would have let its own burst through (twice as many).
    assert RATE_PER_S <= allowed <= RATE_PER_S + 1 + int(RATE_PER_S * took_s), (codes, took_s)
    assert set(codes) == {200, 429}, codes


def test_an_address_without_a_token_has_one_budget_across_two_api_processes(
        two_apis: list[str]):
    codes, took_s = _spend(two_apis, {"Authorization": "Bearer cat_not_a_token"},
                           "/v1/agents/me/inbox")
    refused = codes.count(401)
    assert RATE_PER_S <= refused <= RATE_PER_S + 1 + int(RATE_PER_S * took_s), (codes, took_s)
    assert set(codes) == {401, 429}, codes


def test_an_agent_s_streams_are_capped_across_two_api_processes(project: Project,
                                                                two_apis: list[str]):
    # Each stream's request spends from the rate: a bucket of RATE_PER_S holds all five.
    bob = project.agent("Bob")
    auth = {"Authorization": f"Bearer {bob.row['token']}"}

    async def scenario() -> list[int]:
        clients = [httpx.AsyncClient(base_url=url, headers=auth, timeout=30) for url in two_apis]
        held = []
        codes: list[int] = []
        try:
            for n in range(STREAMS_PER_AGENT):
                ctx = clients[n % 2].stream("GET", "/v1/agents/me/events")
                held.append(ctx)
                codes.append((await ctx.__aenter__()).status_code)
            fifth = await clients[0].get("/v1/agents/me/events")
            codes.append(fifth.status_code)
            assert fifth.json()["error"]["code"] == "RATE_LIMITED"
        finally:
            for ctx in held:
                await ctx.__aexit__(None, None, None)
            for client in clients:
                await client.aclose()
        return codes

    assert asyncio.run(scenario()) == [200] * STREAMS_PER_AGENT + [429]


def _refusals(metrics: str, code: str) -> float:
    found = re.search(rf'^courier_refusals_total\{{code="{code}",face="http"\}} (\S+)$',
                      metrics, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("when", ["answering", "starting"])
def test_killing_the_api_s_supervisor_leaves_no_process_serving_its_port(stack: Stack,
                                                                         when: str):
    if when == "answering":
        api, url = stack.start_api(env={"COURIER_API_PROCESSES": "2"})
        serving = _serving(api)
    else:  # killed before its processes have started the app
        port = free_port()
        env = {"COURIER_API_PROCESSES": "2", "COURIER_HOST": "127.0.0.1",
               "COURIER_PORT": str(port)}
        api, url = stack.spawn("api", stack.procfile_argv("api", env), env), \
            f"http://127.0.0.1:{port}"
        serving = wait_until(lambda: len(found := _serving(api)) == 2 and found, 30, 0.005,
                             "the API's two processes")
    try:
        assert len(serving) == 2, serving
        api.popen.kill()  # SIGKILL: uvicorn's supervisor cannot stop its processes itself
        api.popen.wait(10)
        deadline = time.monotonic() + 15
        while any(Path(f"/proc/{pid}").exists() for pid in serving):
            assert time.monotonic() < deadline, "an API process outlived its supervisor"
            time.sleep(0.1)
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/healthz", timeout=2)
    finally:
        api.stop()


def _serving(api: Proc) -> list[int]:
    """The API processes uvicorn's supervisor ``api`` started."""
    return [pid for pid in children(api.popen.pid)
            if b"spawn" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def test_one_api_of_two_processes_serves_its_port_and_adds_up_its_counters(stack: Stack):
    api, url = stack.start_api(env={"COURIER_API_PROCESSES": "2"})
    try:
        serving = _serving(api)
        assert len(serving) == 2, serving
        # Each on a new connection, so that both processes answer some.
        for _ in range(REQUESTS):
            with httpx.Client(base_url=url, timeout=10) as anonymous:
                assert anonymous.get("/v1/agents/me/inbox", headers={
                    "Authorization": "Bearer cat_not_a_token"}).status_code == 401
        operator = {"Authorization": f"Bearer {stack.operator_token}"}
        seen = []
        for _ in range(6):
            with httpx.Client(base_url=url, headers=operator, timeout=10) as op:
                seen.append(_refusals(op.get("/metrics").text, "UNAUTHENTICATED"))
        assert seen == [REQUESTS] * 6, seen
    finally:
        api.stop()


def _listening(pid: int, port: int) -> set[int]:
    """The inodes of the listening TCP sockets on ``port`` that process ``pid`` holds."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                listening.add(int(fields[9]))
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(int(target[8:-1]))
    return listening & held


def test_each_api_process_listens_on_a_socket_of_its_own_and_a_new_one_too(stack: Stack):
    api, url = stack.start_api(env={"COURIER_API_PROCESSES": "2"})
    port = int(url.rsplit(":", 1)[1])
    try:
        serving = _serving(api)
        deadline = time.monotonic() + 30
        while not all(sockets := [_listening(pid, port) for pid in serving]):
            assert time.monotonic() < deadline, f"both processes listening: {sockets}"
            time.sleep(0.2)
        # One each, not one shared: the kernel spreads new connections over them.
        assert [len(s) for s in sockets] == [1, 1] and not sockets[0] & sockets[1], sockets
        assert not _listening(api.popen.pid, port)  # the supervisor claims, never listens
        os.kill(serving[0], signal.SIGKILL)
        while len(now := _serving(api)) < 2 or serving[0] in now:
            assert time.monotonic() < deadline, "the supervisor did not replace the process"
            time.sleep(0.2)
        replaced = next(pid for pid in now if pid != serving[1])
        while not _listening(replaced, port):
            assert time.monotonic() < deadline, "the new process does not listen"
            time.sleep(0.2)
        assert not _listening(replaced, port) & sockets[1]
        for _ in range(REQUESTS):  # each on a new connection: both processes answer
            assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    finally:
        api.stop()


def test_another_project_s_sends_pass_a_flood_on_an_api_of_two_processes(stack: Stack):
    api, url = stack.start_api(env={"COURIER_API_PROCESSES": "2",
                                    "COURIER_RATE_LIMIT_PER_S": "0"})
    try:
        a = populate(url, stack.operator_token, ring(8))
        b = populate(url, stack.operator_token, ["Bob", "Carol"])
        flood = loadgen.LoadSpec(url, ring_sends(a), concurrency=FLOOD_CONNECTIONS,
                                 duration_s=FLOOD_S, warmup_s=0)
        send = send_request(b.agent("Bob"), "Carol")
        b_ms = []
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(loadgen.run, flood)
            time.sleep(1.0)
            for _ in range(OTHER_SENDS):
                # A connection of its own each time: the kernel hands them to either process.
                with httpx.Client(base_url=url, timeout=30) as client:
                    started = time.perf_counter()
                    answer = client.post(send.path, headers=send.headers, content=send.body)
                    b_ms.append(1000 * (time.perf_counter() - started))
                assert answer.status_code == 201, answer.text
            assert not running.done(), "the flood ended before the other project's sends"
            flooded = running.result()
        assert set(flooded.statuses) == {"201"} and not flooded.errors, flooded.statuses
        a_ms = flooded.latencies_ms
        # A's sends wait in line behind its own few in progress in each process; B's
        # take a turn of their own at once (without the fair share, B waits as A does).
        assert statistics.median(b_ms) * 3 < statistics.median(a_ms), (
            statistics.median(b_ms), statistics.median(a_ms))
    finally:
        api.stop()
