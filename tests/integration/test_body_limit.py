"""The body limit counts the bytes received, chunked or not (docs/http-api.md: Operations/Limits).

A request body over ``COURIER_MAX_BODY_BYTES`` plus 64 KiB is 413
``BODY_TOO_LARGE`` as soon as that many bytes have arrived, before anything is
parsed, whatever the route. Without a valid token the answer is 401 from the
headers alone, before any of the body is read.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.conftest import Project
from tests.stack import Stack

MIB = 1024 * 1024
LIMIT = MIB + 64 * 1024
CHUNK = 64 * 1024
FLOOD = 100 * MIB


def _answer_to_a_flood(url: str, path: str, chunked: bool,
                       token: str | None = None) -> tuple[bytes, int]:
    """Stream up to 100 MiB at ``path``; the first line of the answer and the bytes sent."""
    parts = urlsplit(url)
    head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "Content-Type: application/json"]
    if token:
        head.append(f"Authorization: Bearer {token}")
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {FLOOD}")
    sent = 0
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        sock.setblocking(False)
        chunk = b"[" + b" " * (CHUNK - 1)
        framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk
        deadline = time.monotonic() + 30
        answer = b""
        while sent < FLOOD and time.monotonic() < deadline:
            try:
                answer += sock.recv(65536)
                if answer:
                    break
            except BlockingIOError:
                pass
            try:
                sock.send(framed)
                sent += len(chunk)
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.setblocking(True)
        sock.settimeout(10)
        while b"\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    return answer.split(b"\r\n", 1)[0], sent


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
@pytest.mark.parametrize("path", ["/v1/subscriptions", "/v1/messages", "/mcp"])
def test_a_flood_is_refused_once_the_limit_has_arrived(project: Project, path: str,
                                                       chunked: bool):
    token = project.agent("Flooder").row["token"]
    status_line, sent = _answer_to_a_flood(project.stack.api_url, path, chunked, token)
    assert status_line.startswith(b"HTTP/1.1 413"), status_line
    # refused long before the flood ended: what arrived is the limit plus socket buffers
    assert sent < 16 * MIB, sent


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_a_flood_without_a_token_is_refused_before_its_body(stack: Stack, chunked: bool):
    status_line, sent = _answer_to_a_flood(stack.api_url, "/v1/messages", chunked, "cat_bogus")
    assert status_line.startswith(b"HTTP/1.1 401"), status_line
    assert sent < 16 * MIB, sent


def test_the_refusal_is_in_the_api_shape(project: Project):
    stack = project.stack
    token = project.agent("Big").row["token"]

    def body():
        for _ in range(LIMIT // CHUNK + 2):
            yield b" " * CHUNK

    try:
        response = httpx.post(f"{stack.api_url}/v1/subscriptions", content=body(),
                              headers={"Content-Type": "application/json",
                                       "Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:  # the server may close while the client still writes
        pytest.fail(f"no answer: {exc!r}")
    assert response.status_code == 413
    assert response.json()["error"] == {
        "code": "BODY_TOO_LARGE", "message": f"the request body is over {LIMIT} bytes",
        "details": {"max_bytes": LIMIT}}


def test_a_body_just_under_the_limit_reaches_the_route(stack: Stack):
    with stack.operator() as op:
        p = op.create_project(f"/srv/limit-{time.time_ns()}")
    padded = b'{"name": "Near", "transport": {"kind": "inbox"}' + b" " * (LIMIT - 80) + b"}"
    response = httpx.post(f"{stack.api_url}/v1/projects/{p['project_id']}/agents",
                          content=padded, headers={"Authorization": f"Bearer {p['token']}",
                                                   "Content-Type": "application/json"})
    assert len(padded) <= LIMIT
    assert response.status_code == 201, response.text
