"""Clients that stall, flood or lie cannot knock the API over (docs/security.md).

Raw sockets on real HTTP: headers sent a byte short, bodies that stop after a
byte, bodies behind bogus tokens, thousands of MCP streams, forged
X-Forwarded-For. Health checks and other projects keep answering; what a
hostile client holds is bounded and let go of on a deadline.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import Agent, Project
from tests.stack import Proc, Stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

ANSWER_S = 1.0
STALLED = 8
DEADLINE_S = 10.0
MCP_ATTEMPTS = 2_000
MCP_STREAMS_MAX = 4
RSS_GROWTH_MAX = 20 * 1024 * 1024
FLOOD_GROWTH_MAX = 40 * 1024 * 1024
MCP_ACCEPT = "application/json, text/event-stream"


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _partial_headers(url: str) -> socket.socket:
    sock = _connect(url)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    return sock


def _one_byte_of_body(url: str, token: str | None = None) -> socket.socket:
    sock = _connect(url)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(f"POST /v1/messages HTTP/1.1\r\nHost: x\r\n{auth}"
                 "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode())
    return sock


def _answer(sock: socket.socket, timeout_s: float) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the one answer on ``sock`` (read until closed)."""
    sock.settimeout(timeout_s)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    pairs = [line.split(": ", 1) for line in lines[1:] if ": " in line]
    headers = {name.lower(): value for name, value in pairs}
    return int(lines[0].split()[1]), headers, body


def _timed_get(url: str, path: str, token: str | None = None) -> tuple[int, float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    started = time.monotonic()
    status = httpx.get(url + path, headers=headers, timeout=30).status_code
    return status, time.monotonic() - started


def _rss_bytes(proc: Proc) -> int:
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@contextmanager
def _api(stack: Stack, **settings: str) -> Iterator[tuple[Proc, str]]:
    """Another API process on the stack's store, with these settings; stopped after."""
    proc, url = stack.start_api(env={f"COURIER_{k.upper()}": v for k, v in settings.items()})
    try:
        yield proc, url
    finally:
        proc.stop()


@pytest.fixture
def other(stack: Stack) -> Iterator[Agent]:
    """An agent of another project."""
    with stack.operator() as op:
        p = op.create_project(f"/srv/other/{time.monotonic_ns()}")
    with stack.client(p["token"]) as admin:
        row = admin.register_agent(p["project_id"], "Reader")
    client = stack.client(row["token"])
    yield Agent(row, client)
    client.close()


# slow clients


def test_health_and_other_projects_answer_while_clients_stall(project: Project, other: Agent):
    url = project.stack.api_url
    stalling = project.agent("Staller")
    httpx.get(url + "/openapi.json")  # built once, on first use
    socks = [_partial_headers(url) for _ in range(STALLED)]
    socks += [_one_byte_of_body(url) for _ in range(STALLED)]
    socks += [_one_byte_of_body(url, stalling.row["token"]) for _ in range(STALLED)]
    try:
        time.sleep(0.5)  # every stalled request has reached the app
        for path, token in [("/healthz", None), ("/readyz", None),
                            ("/v1/agents/me/inbox", other.row["token"]),
                            ("/openapi.json", None)]:
            status, took_s = _timed_get(url, path, token)
            assert status == 200 and took_s < ANSWER_S, (path, status, took_s)
    finally:
        for sock in socks:
            sock.close()


def test_stalled_headers_and_bodies_are_answered_408_and_closed(project: Project):
    url = project.stack.api_url
    agent = project.agent("Staller")
    headers_sock = _partial_headers(url)
    body_sock = _one_byte_of_body(url, agent.row["token"])
    started = time.monotonic()
    try:
        for sock in (headers_sock, body_sock):
            status, headers, body = _answer(sock, DEADLINE_S + 5)
            assert status == 408, body
            assert json.loads(body)["error"]["code"] == "REQUEST_TIMEOUT"
            assert json.loads(body)["persisted"] is False
            assert headers["connection"] == "close"
        assert DEADLINE_S - 1 < time.monotonic() - started < DEADLINE_S + 5
    finally:
        headers_sock.close()
        body_sock.close()


def test_oversized_headers_are_refused_431(stack: Stack):
    sock = _connect(stack.api_url)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000)
        status, _, body = _answer(sock, 5)
        assert status == 431 and json.loads(body)["error"]["code"] == "HEADERS_TOO_LARGE"
    finally:
        sock.close()


@pytest.mark.parametrize("headers", [
    b"X-Big: " + b"a" * 70_000 + b"\r\n",  # one header
    b"".join(b"X-H%d: %s\r\n" % (n, b"a" * 100) for n in range(400)),  # many small ones
], ids=["one-header", "many-headers"])
def test_headers_over_the_cap_in_one_write_are_refused_431(stack: Stack, headers: bytes):
    sock = _connect(stack.api_url)
    try:
        # The whole request in one write, so that the server reads it in one go.
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        status, headers_out, body = _answer(sock, 5)
        assert status == 431 and json.loads(body)["error"]["code"] == "HEADERS_TOO_LARGE"
        assert headers_out["connection"] == "close"
    finally:
        sock.close()


def test_headers_under_the_cap_are_served(stack: Stack):
    sock = _connect(stack.api_url)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
                     + b"a" * 30_000 + b"\r\n\r\n")
        status, _, body = _answer(sock, 5)
        assert status == 200, body
    finally:
        sock.close()


@pytest.mark.parametrize("request_bytes", [
    b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nNot A Header\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad\x01: y\r\n\r\n",
    b"HELLO\r\n\r\n",
    b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
], ids=["length-and-chunked", "two-lengths", "header-without-colon", "control-in-name",
        "no-request-line", "unknown-version"])
def test_malformed_framing_is_answered_in_the_error_shape(stack: Stack, request_bytes: bytes):
    sock = _connect(stack.api_url)
    try:
        sock.sendall(request_bytes)
        status, headers, body = _answer(sock, 5)
        assert status == 422, body
        assert headers["content-type"] == "application/json"
        assert headers["connection"] == "close"
        answer = json.loads(body)
        assert answer["persisted"] is False
        assert answer["error"]["code"] == "INVALID_ARGUMENT"
        assert answer["error"]["details"]["field"] == "http"
        assert answer["error"]["details"]["reason"]
    finally:
        sock.close()


def test_a_broken_chunk_of_a_send_is_answered_in_the_error_shape_and_stores_nothing(
        project: Project):
    sender, recipient = project.agent("Chunker"), project.agent("Chunked To")
    body = json.dumps({"to": [recipient.label], "subject": "s", "body_md": "b"}).encode()
    sock = _connect(project.stack.api_url)
    try:
        sock.sendall(f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     f"{sender.row['token']}\r\nContent-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n".encode()
                     + b"%x\r\n" % len(body) + body + b"\r\nzz\r\n")  # not a chunk size
        status, _, answer = _answer(sock, 5)
        assert status == 422, answer
        assert json.loads(answer)["error"]["details"]["field"] == "http"
    finally:
        sock.close()
    assert recipient.api.inbox()["messages"] == []


def test_connections_from_one_address_are_capped(stack: Stack):
    with _api(stack, max_connections_per_address="6") as (_, url):
        held = [_partial_headers(url) for _ in range(6)]
        try:
            over = _connect(url)
            status, headers, body = _answer(over, 5)
            over.close()
            assert status == 429 and json.loads(body)["error"]["code"] == "RATE_LIMITED"
            assert "retry-after" in headers
            held.pop().close()
            wait_until(lambda: httpx.get(url + "/healthz", timeout=5).status_code == 200, 5,
                       what="a connection once one closed")
        finally:
            for sock in held:
                sock.close()


# long threads

THREAD_MIB = 41
THREAD_READERS = 6
THREAD_READ_S = 6.0
THREAD_GROWTH_MAX = 120 * 1024 * 1024


async def _read_pages(url: str, token: str, thread_id: str, until: float,
                      sizes: list[int]) -> None:
    """Read the thread page after page, again from its start after its last page,
    until ``until``, keeping each answer's size."""
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        params: dict[str, str] = {}
        while time.monotonic() < until:
            answer = await client.get(f"/v1/threads/{thread_id}", params=params)
            answer.raise_for_status()
            sizes.append(len(answer.content))
            page = answer.json()
            params = {"cursor": page["next_cursor"]} if page["more"] else {}


async def _watch(proc: Proc, url: str, token: str, until: float,
                 rss: list[int]) -> list[float]:
    """Until ``until``: the API's memory, and how long the other project's inbox takes."""
    took = []
    while time.monotonic() < until:
        rss.append(_rss_bytes(proc))
        took.append((await asyncio.to_thread(_timed_get, url, "/v1/agents/me/inbox", token))[1])
        await asyncio.sleep(0.05)
    return took


def test_a_41_mib_thread_is_read_in_pages_with_bounded_memory(project: Project, other: Agent):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = "word " * (1024 * 1024 // 5)  # 1 MiB
    tid = alice.api.send("Bob", "Long", body)["thread_id"]
    for _ in range(THREAD_MIB - 1):
        alice.api.send("Bob", "Long", body, thread_id=tid)
    with _api(project.stack) as (proc, url):
        other_token = other.row["token"]
        asyncio.run(_read_pages(url, bob.row["token"], tid, time.monotonic() + 1, []))
        baseline = [_timed_get(url, "/v1/agents/me/inbox", other_token)[1] for _ in range(40)]
        rss = [_rss_bytes(proc)]
        sizes: list[int] = []

        async def attack(until: float) -> list[float]:
            *_, took = await asyncio.gather(
                *(_read_pages(url, bob.row["token"], tid, until, sizes)
                  for _ in range(THREAD_READERS)),
                _watch(proc, url, other_token, until, rss))
            return took

        during = asyncio.run(attack(time.monotonic() + THREAD_READ_S))
    # Each answer is a page: a few of the messages, never the whole 41 MiB.
    assert len(sizes) > THREAD_READERS * 2 and max(sizes) < 5 * 1024 * 1024, max(sizes)
    assert max(rss) - rss[0] < THREAD_GROWTH_MAX, (rss[0], max(rss))
    p50 = statistics.median
    assert p50(during) < max(10 * p50(baseline), 0.05), (p50(baseline), p50(during))


# authentication from the headers


def test_a_body_without_a_valid_token_is_not_read(stack: Stack):
    for auth in ["", "Authorization: Bearer cat_bogus\r\n"]:
        sock = _connect(stack.api_url)
        try:
            # Headers only: the megabyte they announce never comes, and is not waited for.
            sock.sendall(f"POST /v1/messages HTTP/1.1\r\nHost: x\r\n{auth}"
                         "Content-Length: 1000000\r\n\r\n".encode())
            status, headers, body = _answer(sock, ANSWER_S * 3)
            assert status == 401 and json.loads(body)["error"]["code"] == "UNAUTHENTICATED"
            assert headers["www-authenticate"] == "Bearer"
        finally:
            sock.close()


def test_bogus_tokens_with_big_bodies_hold_no_memory(stack: Stack):
    with _api(stack) as (proc, url):
        for _ in range(20):
            httpx.get(url + "/healthz")
        before = _rss_bytes(proc)
        body = b"{" + b"x" * 1_000_000

        async def flood(i: int) -> int:
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                         f"cat_bogus_{i}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                         + body[:65536])
            status = await reader.readline()
            try:  # the rest of the megabyte, into a connection the API is closing
                writer.write(body[65536:])
                await writer.drain()
            except OSError:
                pass
            writer.close()
            return int(status.split()[1])

        async def all_of_them() -> list[int]:
            return await asyncio.gather(*(flood(i) for i in range(300)))

        statuses = asyncio.run(all_of_them())
        # 429: past the client's cap on open connections; 408: the oldest of its
        # connections still waiting for their headers, closed for a newer one.
        assert 401 in statuses and set(statuses) <= {401, 408, 429}
        # At most what the server read along with each request's headers (one socket
        # read, here the first 64 KiB) while its token was looked up; the server kept
        # 282 MiB of such a flood when it read bodies before checking the token.
        grown = _rss_bytes(proc) - before
        assert grown < FLOOD_GROWTH_MAX, grown


def test_the_operator_token_does_what_a_project_token_does(project: Project):
    with project.stack.operator() as op:
        row = op.register_agent(project.project_id, "Registered By Operator")
        assert row["token"]
        op.retire_agent(project.project_id, row["agent_id"])
    names = httpx.get(f"{project.stack.api_url}/v1/projects/{project.project_id}/names",
                      headers={"Authorization": f"Bearer {project.stack.operator_token}"})
    assert names.status_code == 200, names.text


# MCP streams


def _open_mcp(url: str, token: str) -> socket.socket:
    sock = _connect(url)
    host = url.removeprefix("http://")
    sock.sendall(f"GET /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                 f"Accept: {MCP_ACCEPT}\r\n\r\n".encode())
    return sock


def _status_line(sock: socket.socket, timeout_s: float = 10) -> int:
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(1024)
        assert chunk, "closed before an answer"
        data += chunk
    return int(data.split()[1])


def test_mcp_streams_are_capped_per_agent_and_hold_no_memory(project: Project):
    agent = project.agent("Streamer")
    token = agent.row["token"]
    with _api(project.stack) as (proc, url):
        for _ in range(20):
            httpx.get(url + "/healthz")
        before = _rss_bytes(proc)
        held: list[socket.socket] = []
        refused = 0
        try:
            for _ in range(MCP_ATTEMPTS):
                sock = _open_mcp(url, token)
                status = _status_line(sock)
                if status == 200:
                    held.append(sock)
                else:
                    assert status == 429
                    refused += 1
                    sock.close()
            assert len(held) == MCP_STREAMS_MAX
            assert refused == MCP_ATTEMPTS - MCP_STREAMS_MAX
            assert _rss_bytes(proc) - before < RSS_GROWTH_MAX
        finally:
            for sock in held:
                sock.close()


def test_an_mcp_stream_ends_when_its_agent_is_retired(project: Project):
    agent = project.agent("Leaver")
    sock = _open_mcp(project.stack.api_url, agent.row["token"])
    try:
        assert _status_line(sock) == 200
        project.admin.retire_agent(project.project_id, agent.id)
        sock.settimeout(10)
        started, data = time.monotonic(), b""
        # The stream's last chunk (the connection may stay open for another request).
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        assert time.monotonic() - started < 5
    finally:
        sock.close()


# proxy headers


def test_forwarded_addresses_from_an_untrusted_peer_are_not_believed(stack: Stack):
    def answers(url: str) -> list[int]:
        with httpx.Client(base_url=url, timeout=10) as http:
            return [http.get("/v1/agents/me/inbox", headers={
                "Authorization": "Bearer cat_bogus", "X-Forwarded-For": f"10.0.0.{n}"}
            ).status_code for n in range(40)]

    with _api(stack, rate_limit_per_s="2") as (_, url):
        codes = answers(url)
    assert 429 in codes and set(codes) <= {401, 429}
    with _api(stack, rate_limit_per_s="2", trusted_proxies="127.0.0.1") as (_, url):
        codes = answers(url)
    assert set(codes) == {401}  # from a trusted proxy, each forwarded address is its own
