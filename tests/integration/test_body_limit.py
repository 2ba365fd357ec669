"""The body limit counts the bytes received, chunked or not (docs/http-api.md: Operations/Limits).

A request body over 6 x ``COURIER_MAX_BODY_BYTES`` plus 64 KiB (the largest
``body_md`` with every byte JSON-escaped, and the rest) is 413
``BODY_TOO_LARGE`` as soon as that many bytes have arrived, before anything is
parsed, whatever the route. Without a valid token the answer is 401 from the
headers alone, before any of the body is read. ``body_md`` itself is limited
on its text (UTF-8 bytes), on every face, however the JSON wrote it.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.conftest import Agent, Project
from tests.stack import Stack, project_state

MIB = 1024 * 1024
LIMIT = 6 * MIB + 64 * 1024
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
        pending = framed  # what is left of the chunk being written (a send may take part)
        while sent < FLOOD and time.monotonic() < deadline:
            try:
                answer += sock.recv(65536)
                if answer:
                    break
            except BlockingIOError:
                pass
            try:
                pending = pending[sock.send(pending):]
                if not pending:
                    sent += len(chunk)
                    pending = framed
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


# 1 MiB of text that JSON must escape: 6 MiB on the wire.
CONTROLS = "\u0001" * MIB
MCP_ACCEPT = "application/json, text/event-stream"


def _stored_body(reader: Agent, message_id: str) -> str:
    got = reader.api.http.get(f"/v1/messages/{message_id}")
    assert got.status_code == 200, got.text
    return str(got.json()["body_md"])


def test_a_body_md_at_its_limit_of_text_is_admitted_however_escaped(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.http.post("/v1/messages", json={  # the fast path
        "to": ["Bob"], "subject": "Controls", "body_md": CONTROLS})
    assert sent.status_code == 201, sent.text[:300]
    assert _stored_body(bob, sent.json()["id"]) == CONTROLS
    replied = bob.api.http.post(f"/v1/messages/{sent.json()['id']}/reply", json={
        "body_md": CONTROLS})  # a FastAPI route
    assert replied.status_code == 201, replied.text[:300]
    called = httpx.post(f"{project.stack.api_url}/mcp", timeout=60, headers={
        "Accept": MCP_ACCEPT, "Authorization": f"Bearer {alice.row['token']}"}, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "send_message",
            "arguments": {"to": ["Bob"], "subject": "Controls", "body_md": CONTROLS}}})
    assert called.status_code == 200, called.text[:300]
    result = called.json()["result"]
    assert result["isError"] is False, result
    assert _stored_body(bob, result["structuredContent"]["id"]) == CONTROLS


@pytest.mark.parametrize("text", ["\u0001", "\u00e9"], ids=["control", "two-byte"])
def test_a_body_md_one_byte_over_its_limit_of_text_is_refused(project: Project, text: str):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    before = project_state(project.stack, project.project_id)
    body_md = text * (MIB // len(text.encode())) + "x"
    assert len(body_md.encode()) == MIB + 1
    sent = alice.api.http.post("/v1/messages", json={
        "to": ["Bob"], "subject": "Over", "body_md": body_md})
    assert sent.status_code == 413, sent.text[:300]
    error = sent.json()["error"]
    assert (error["code"], error["details"]) == ("BODY_TOO_LARGE", {
        "field": "body_md", "max_bytes": MIB})
    assert sent.json()["persisted"] is False
    assert project_state(project.stack, project.project_id) == before
