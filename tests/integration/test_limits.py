"""One way in, limits on every face (docs/http-api.md: Authentication, Operations/Limits).

REST, the event stream, subscriptions and MCP admit their callers through the
same gate: a token over its rate gets 429 on every face, requests without a
valid token are limited per client address, and every 401 names the Bearer
scheme.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from messaging.web.bodylimit import request_cap
from tests.integration.conftest import Agent, Project
from tests.stack import Stack, make_stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

RATE_PER_S = 5
MAX_BODY_BYTES = 65_536
MCP_ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("limited"), rate_limit_per_s=str(RATE_PER_S),
                   max_body_bytes=str(MAX_BODY_BYTES))
    s.start_worker()
    yield s
    s.stop()


@pytest.fixture
def lproject(limited: Stack) -> Iterator[Project]:
    with limited.operator() as op:
        p = op.create_project(f"/srv/{uuid.uuid4().hex}")
    proj = Project(limited, p["project_id"], p["project_key"], p["token"])
    yield proj
    for c in proj.clients:
        c.close()
    time.sleep(1.1)  # the next test starts with full buckets


def mcp_call(url: str, token: str | None, name: str, args: dict[str, Any],
             n: int = 1) -> httpx.Response:
    headers = {"Accept": MCP_ACCEPT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{url}/mcp", headers=headers, json={
        "jsonrpc": "2.0", "id": n, "method": "tools/call",
        "params": {"name": name, "arguments": args}})


def burst(requests: list[tuple[str, str, dict[str, Any]]]) -> list[httpx.Response]:
    """(method, url, httpx arguments) requests sent all at once, as a busy host would."""
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as http:
            return list(await asyncio.gather(*(http.request(method, url, **kw)
                                               for method, url, kw in requests)))

    return asyncio.run(run())


def mcp_burst(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]
              ) -> list[httpx.Response]:
    """Tool calls sent all at once."""
    headers = {"Accept": MCP_ACCEPT, "Authorization": f"Bearer {token}"}
    return burst([("POST", f"{url}/mcp", {"headers": headers, "json": {
        "jsonrpc": "2.0", "id": n, "method": "tools/call",
        "params": {"name": name, "arguments": args}}}) for n, (name, args) in enumerate(calls)])


def _refused(responses: list[httpx.Response]) -> list[httpx.Response]:
    limited = [r for r in responses if r.status_code == 429]
    for r in limited:
        assert r.json()["error"]["code"] == "RATE_LIMITED"
        assert int(r.headers["retry-after"]) >= 1
    return limited


def _register(project: Project, name: str) -> Agent:
    agent = project.agent(name)
    time.sleep(1.1)  # registration spent from the project token, not the agent's
    return agent


def test_the_event_stream_and_subscriptions_are_rate_limited(lproject: Project):
    bob = _register(lproject, "Bob")
    http = bob.api.http
    answers = [http.get(f"/v1/subscriptions/sub_{n}") for n in range(3 * RATE_PER_S)]
    assert _refused(answers) and {r.status_code for r in answers} == {404, 429}
    time.sleep(1.1)
    answers = []
    for _ in range(3 * RATE_PER_S):
        with http.stream("GET", "/v1/agents/me/events") as response:
            answers.append(response)
            if response.status_code == 429:
                response.read()
    limited = _refused(answers)
    # The stream cap may answer some first: a stream the client closed is
    # counted until the server has seen it go.
    assert any("per second" in r.json()["error"]["message"] for r in limited)


def test_mcp_tool_calls_are_rate_limited_like_rest_sends(lproject: Project):
    alice, bob = _register(lproject, "Alice"), _register(lproject, "Bob")
    url = lproject.stack.api_url
    answers = mcp_burst(url, alice.row["token"], [
        ("send_message", {"to": ["Bob"], "subject": f"n{n}", "body_md": "x"})
        for n in range(4 * RATE_PER_S)])
    limited = _refused(answers)
    assert limited, [r.status_code for r in answers]
    stored = sum(1 for r in answers if r.status_code == 200 and not r.json()["result"]["isError"])
    assert stored == len(answers) - len(limited) < len(answers)
    time.sleep(1.1)
    wait_until(lambda: len(bob.api.inbox(limit=100)["messages"]) >= stored, what="the inbox")
    time.sleep(0.5)
    assert len(bob.api.inbox(limit=100)["messages"]) == stored


# Sends refused at each step of their way (the body's size, its JSON, the service's
# checks before admission, the admission script's own), a replayed one, and reads
# mixed in: every request spends one from its token's bucket, none more, whichever
# step answers it (the admission spends it in its own script, the other steps first).
SEND_WAYS = {
    "admitted": lambda n: {"json": {"to": ["Bob"], "subject": f"n{n}", "body_md": "x"}},
    "replayed": lambda n: {"json": {"to": ["Bob"], "subject": "once", "body_md": "x"},
                           "headers": {"Idempotency-Key": "same"}},
    "unknown recipient": lambda n: {"json": {"to": ["Nobody"], "subject": "s", "body_md": "x"}},
    "sender mismatch": lambda n: {"json": {"to": ["Bob"], "subject": "s", "body_md": "x",
                                           "sender_name": "Mallory"}},
    "no subject": lambda n: {"json": {"to": ["Bob"], "body_md": "x"}},
    "not JSON": lambda n: {"content": b"{", "headers": {"Content-Type": "application/json"}},
    "over the request limit": lambda n: {"content": b'{"to": ["Bob"], "body_md": "' + b"x" * (
        request_cap(MAX_BODY_BYTES)) + b'"}', "headers": {"Content-Type": "application/json"}},
    "body_md over its limit": lambda n: {"json": {"to": ["Bob"], "subject": "s",
                                                  "body_md": "x" * (MAX_BODY_BYTES + 1)}},
    "reads between sends": lambda n: {"json": {"to": ["Bob"], "subject": f"n{n}",
                                               "body_md": "x"}} if n % 2 else None,
}


@pytest.mark.parametrize("way", list(SEND_WAYS))
def test_a_send_spends_one_request_of_its_token_whichever_step_answers_it(
        lproject: Project, way: str):
    alice, bob = _register(lproject, "Alice"), _register(lproject, "Bob")
    url, auth = lproject.stack.api_url, {"Authorization": f"Bearer {alice.row['token']}"}
    requests: list[tuple[str, str, dict[str, Any]]] = []
    for n in range(3 * RATE_PER_S):
        kw = SEND_WAYS[way](n)
        if kw is None:
            requests.append(("GET", f"{url}/v1/agents/me/inbox", {"headers": auth}))
        else:
            requests.append(("POST", f"{url}/v1/messages",
                             {**kw, "headers": {**auth, **kw.get("headers", {})}}))
    t0 = time.monotonic()
    answers = burst(requests)
    took_s = time.monotonic() - t0
    limited = _refused(answers)
    codes = {r.status_code for r in answers} - {429}
    allowed = len(answers) - len(limited)
    assert RATE_PER_S <= allowed <= RATE_PER_S + 1 + int(RATE_PER_S * took_s), (
        way, [r.status_code for r in answers], took_s)
    assert len(codes) == 1 or way in ("replayed", "reads between sends"), (way, codes)
    # A send refused for its rate stored nothing: Bob holds one message per 201.
    created = sum(1 for r in answers if r.status_code == 201)
    time.sleep(1.1)
    wait_until(lambda: len(bob.api.inbox(limit=100)["messages"]) >= created,
               what="the inbox")
    assert len(bob.api.inbox(limit=100)["messages"]) == created, way


def test_a_send_refused_for_its_rate_is_no_admission_whatever_else_refuses_it(
        lproject: Project):
    alice = _register(lproject, "Alice")
    stack, url = lproject.stack, lproject.stack.api_url
    auth = {"Authorization": f"Bearer {alice.row['token']}"}
    send = {"to": ["Alice"], "subject": "s", "body_md": "x", "sender_name": "Mallory"}
    before = _counts(stack, "courier_admissions")
    answers = burst([("POST", f"{url}/v1/messages", {"headers": auth, "json": send})]
                    * 3 * RATE_PER_S)
    limited = _refused(answers)
    assert limited and {r.status_code for r in answers} == {403, 429}, answers
    assert _moved(before, _counts(stack, "courier_admissions")) == {
        "SENDER_MISMATCH": len(answers) - len(limited)}


def test_a_token_found_past_its_rate_is_refused_before_its_next_body_is_read(
        lproject: Project):
    alice = _register(lproject, "Alice")
    stack, token = lproject.stack, alice.row["token"]
    send = {"to": ["Alice"], "subject": "s", "body_md": "x"}
    answers = burst([("POST", f"{stack.api_url}/v1/messages",
                      {"headers": {"Authorization": f"Bearer {token}"}, "json": send})]
                    * 3 * RATE_PER_S)
    assert _refused(answers)
    # A send whose body never comes: its bucket is known empty, so its headers are
    # enough (the API's one process answered the 429s above).
    address = httpx.URL(stack.api_url)
    with socket.create_connection((address.host, address.port), timeout=5) as conn:
        conn.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: courier\r\n"
                     b"Authorization: Bearer " + token.encode() + b"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
        reply = conn.recv(4096)
    assert reply.startswith(b"HTTP/1.1 429"), reply[:200]


def test_requests_without_a_valid_token_are_limited_per_address(lproject: Project):
    url = lproject.stack.api_url
    faces: dict[str, tuple[str, str, dict[str, Any]]] = {
        "rest": ("GET", f"{url}/v1/agents/me/inbox", {"headers": {"Authorization": "Bearer x"}}),
        "subscriptions": ("POST", f"{url}/v1/subscriptions", {"json": {"target": "Bob"}}),
        "events": ("GET", f"{url}/v1/agents/me/events", {"headers": {"Authorization": "B x"}}),
        "mcp": ("POST", f"{url}/mcp", {"headers": {"Authorization": "Bearer x",
                                                   "Accept": MCP_ACCEPT},
                                       "json": {"jsonrpc": "2.0", "id": 1,
                                                "method": "tools/list"}}),
    }
    per_face = 2 * RATE_PER_S
    answers = burst([request for request in faces.values() for _ in range(per_face)])
    for n, face in enumerate(faces):
        codes = {r.status_code for r in answers[n * per_face:(n + 1) * per_face]}
        assert 429 in codes and codes <= {401, 429}, (face, codes)
    assert _refused(answers)
    # a valid token from the same address is not held back
    ok = httpx.get(f"{url}/v1/projects/{lproject.project_id}/agents",
                   headers={"Authorization": f"Bearer {lproject.token}"})
    assert ok.status_code == 200


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/agents/me/inbox"), ("POST", "/v1/messages"), ("GET", "/v1/agents/me/events"),
    ("POST", "/v1/subscriptions"), ("POST", "/mcp")])
def test_every_401_names_the_bearer_scheme(stack: Stack, method: str, path: str):
    response = httpx.request(method, stack.api_url + path, json={},
                             headers={"Authorization": "Bearer nope", "Accept": MCP_ACCEPT})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"


def _admitted(stack: Stack) -> float:
    text = httpx.get(stack.api_url + "/metrics").text
    found = re.search(r'^courier_admissions_total\{outcome="admitted"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_mcp_sends_are_counted_in_admissions(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    before = _admitted(project.stack)
    for tool, args in [("send_message", {"to": ["Bob"], "subject": "s", "body_md": "x"}),
                       ("send", {"to": "Bob", "message": "hello"})]:
        answer = mcp_call(project.stack.api_url, alice.row["token"], tool, args)
        assert answer.status_code == 200 and not answer.json()["result"]["isError"], answer.text
    assert _admitted(project.stack) == before + 2


def _counts(stack: Stack, family: str) -> dict[str, float]:
    """A counter family's values by its one label, from /metrics."""
    text = httpx.get(stack.api_url + "/metrics").text
    pattern = rf'^{family}_total\{{\w+="([^"]+)"\}} (\S+)$'
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)}


def _refusals(stack: Stack, face: str) -> dict[str, float]:
    """``courier_refusals_total`` of one face, by code, from /metrics."""
    text = httpx.get(stack.api_url + "/metrics").text
    pattern = rf'^courier_refusals_total\{{code="([^"]+)",face="{face}"\}} (\S+)$'
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)}


def _moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def test_rest_and_mcp_sends_move_admissions_alike(lproject: Project):
    alice, _ = _register(lproject, "Alice"), _register(lproject, "Bob")
    stack, url, token = lproject.stack, lproject.stack.api_url, alice.row["token"]
    send = {"to": ["Bob"], "subject": "s", "body_md": "x"}
    rest = [("POST", f"{url}/v1/messages",
             {"headers": {"Authorization": f"Bearer {token}"}, "json": send})] * 4 * RATE_PER_S
    faces = {"http": lambda: burst(rest),
             "mcp": lambda: mcp_burst(url, token, [("send_message", send)] * 4 * RATE_PER_S)}
    for face, run in faces.items():
        before = (_counts(stack, "courier_admissions"), _refusals(stack, face))
        answers = run()
        limited = _refused(answers)
        assert limited, (face, [r.status_code for r in answers])
        admitted = len(answers) - len(limited)
        assert _moved(before[0], _counts(stack, "courier_admissions")) == {
            "admitted": admitted}, face
        assert _moved(before[1], _refusals(stack, face)) == {
            "RATE_LIMITED": len(limited)}, face
        time.sleep(1.1)


def test_a_subscription_with_a_message_counts_as_an_admission(lproject: Project):
    alice, _ = _register(lproject, "Alice"), _register(lproject, "Bob")
    stack = lproject.stack
    message = {"subject": "s", "body_md": "x"}
    before = _counts(stack, "courier_admissions")
    made = alice.api.http.post("/v1/subscriptions", json={"target": "Bob", "message": message})
    assert made.status_code == 201, made.text
    assert _moved(before, _counts(stack, "courier_admissions")) == {"admitted": 1}
    before = _counts(stack, "courier_admissions")
    answer = mcp_call(stack.api_url, alice.row["token"], "subscribe_idle",
                      {"target": "Bob", "message": message})
    assert not answer.json()["result"]["isError"], answer.text
    assert _moved(before, _counts(stack, "courier_admissions")) == {"admitted": 1}
