"""Which sends the send's layer serves itself, and which go on to FastAPI's handler.

The whole app runs here in process (its lifespan too), on the stack's store and
broker; requests go in as ASGI messages, through every layer. FastAPI's handler
of the send's route is wrapped to record what reaches it: a plain send is
admitted (Bob's inbox shows it, through the stack's worker) without reaching
it; every other send reaches it with its body intact and its caller already
found.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import redis
from fastapi import FastAPI
from fastapi.routing import APIRoute
from prometheus_client import REGISTRY
from starlette.types import Receive, Scope, Send

from messaging import ids
from messaging.config import Settings
from messaging.store import keys
from messaging.web.app import create_app
from messaging.web.guard import AUTH_SCOPE_KEY, Gate
from messaging.web.refusals import INTERNAL
from tests.integration.conftest import Project
from tests.stack import wait_until

MAX_BODY_BYTES = 1024  # the raw limit is six times this and 64 KiB more
SEND = {"to": ["Bob"], "subject": "Plan", "body_md": "# Plan"}
RATE_PER_S = 5  # one request is 200 ms of a bucket


class Served:
    """The app in process, and what reached FastAPI's handler of the send's route."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.reached: list[tuple[Any, bytes]] = []
        route = next(r for r in app.router.routes if isinstance(r, APIRoute)
                     and r.path == "/v1/messages" and "POST" in r.methods)
        framework = route.app

        async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
            message = await receive()
            self.reached.append((scope.get(AUTH_SCOPE_KEY), message.get("body", b"")))
            replayed = [message]

            async def again() -> Any:
                return replayed.pop() if replayed else await receive()

            await framework(scope, again, send)

        route.app = recorded

    @property
    def services(self) -> Any:
        return self.app.state.services

    async def post(self, token: str, body: bytes, *,
                   content_types: tuple[bytes, ...] = (b"application/json",),
                   path: str = "/v1/messages") -> tuple[int, bytes]:
        headers = [(b"content-type", kind) for kind in content_types] + [
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-length", str(len(body)).encode())]
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
                 "root_path": "", "query_string": b"", "headers": headers,
                 "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080)}
        parts = [{"type": "http.request", "body": body[:10], "more_body": True},
                 {"type": "http.request", "body": body[10:], "more_body": False}]
        answer: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if parts:
                return parts.pop(0)
            await asyncio.sleep(3600)  # the client waits for its answer
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            answer.append(message)

        await self.app(scope, receive, send)
        return answer[0]["status"], b"".join(m.get("body", b"") for m in answer[1:])


@asynccontextmanager
async def _served(project: Project) -> AsyncIterator[Served]:
    stack = project.stack
    settings = Settings(redis_url=stack.store.url, broker_url=stack.broker_url,
                        operator_token=stack.operator_token, max_body_bytes=MAX_BODY_BYTES,
                        data_dir=stack.root / "in-process")
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield Served(app)


def _run(project: Project, requests: Any) -> Any:
    async def go() -> Any:
        async with _served(project) as served:
            return await requests(served)
    return asyncio.run(go())


async def _ahead_us(store: Any, bucket: str) -> int:
    """How far past the store's clock the bucket's requests reach (µs)."""
    full_at = int(await store.client.get(bucket))
    seconds, micros = await store.client.time()
    return full_at - (seconds * 1_000_000 + micros)


def _refused(code: str) -> float:
    value = REGISTRY.get_sample_value("courier_refusals_total", {"code": code, "face": "http"})
    return value or 0.0


def test_a_plain_send_is_admitted_without_reaching_the_framework(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")

    async def requests(served: Served) -> Any:
        sent = [await served.post(alice.row["token"], json.dumps(SEND).encode())
                for _ in range(2)]
        return sent, served.reached

    (first, second), reached = _run(project, requests)
    assert reached == []
    assert [first[0], second[0]] == [201, 201]
    answers = [orjson.loads(first[1]), orjson.loads(second[1])]
    assert all(a["persisted"] and a["from"] == alice.label for a in answers)
    wait_until(lambda: len(bob.api.inbox()["messages"]) == 2, what="both sends delivered")


@pytest.mark.parametrize(("body", "content_types"), [
    (b"not json", (b"application/json",)),
    (b"[1, 2]", (b"application/json",)),
    (json.dumps({**SEND, "colour": "red"}).encode(), (b"application/json",)),
    (json.dumps(SEND).encode(), (b"text/plain",)),
    (json.dumps(SEND).encode(), (b"application/json", b"application/json")),
], ids=["not json", "not an object", "refused by the model", "another type", "two types"])
def test_any_other_send_reaches_the_framework_with_its_body_and_caller(
        project: Project, body: bytes, content_types: tuple[bytes, ...]):
    alice = project.agent("Alice")
    project.agent("Bob")

    async def requests(served: Served) -> Any:
        answer = await served.post(alice.row["token"], body, content_types=content_types)
        return answer, served.reached

    (status, _), reached = _run(project, requests)
    assert status in (201, 422)
    assert [b for _, b in reached] == [body]
    auth = reached[0][0]
    assert auth.caller is not None and auth.caller.agent_id == alice.id
    assert auth.owed is None  # its request spent before the framework's handler


def test_a_body_over_the_limit_is_refused_before_the_route_and_counted(project: Project):
    alice = project.agent("Alice")
    over = json.dumps({**SEND, "body_md": "x" * (7 * MAX_BODY_BYTES + 65536)}).encode()

    async def requests(served: Served) -> Any:
        before = _refused("BODY_TOO_LARGE")
        status, body = await served.post(alice.row["token"], over)
        return status, body, _refused("BODY_TOO_LARGE") - before, served.reached

    status, body, counted, reached = _run(project, requests)
    assert status == 413 and orjson.loads(body)["error"]["code"] == "BODY_TOO_LARGE"
    assert reached == [] and counted == 1


def test_a_refused_send_is_answered_by_the_route_and_counted_once(project: Project):
    alice = project.agent("Alice")

    async def requests(served: Served) -> Any:
        before = _refused("RECIPIENT_NOT_FOUND")
        body = json.dumps({**SEND, "to": ["Nobody"]}).encode()
        status, answer = await served.post(alice.row["token"], body)
        return status, answer, _refused("RECIPIENT_NOT_FOUND") - before, served.reached

    status, body, counted, reached = _run(project, requests)
    assert status == 422 and orjson.loads(body)["error"]["code"] == "RECIPIENT_NOT_FOUND"
    assert reached == [] and counted == 1


def test_a_send_taken_from_its_bucket_at_the_gate_is_not_taken_from_again(project: Project):
    # A process that found the bucket empty a moment ago takes a send's request at
    # the gate (before its body); the admission then owes nothing more.
    alice = project.agent("Alice")
    project.agent("Bob")
    bucket = keys.token_rate(project.project_id, ids.token_hash(alice.row["token"]))

    async def requests(served: Served) -> Any:
        services = served.services
        services.gate = Gate(services.store, services.operator_token, RATE_PER_S)
        services.gate.tokens.empty.put(bucket, time.monotonic() + 60)
        status, _ = await served.post(alice.row["token"], json.dumps(SEND).encode())
        return status, await _ahead_us(services.store, bucket)

    status, ahead_us = _run(project, requests)
    assert status == 201
    assert 0 < ahead_us <= 1_000_000 // RATE_PER_S, ahead_us  # one request, not two


def test_a_send_refused_before_its_admission_spends_its_request_once(project: Project):
    alice = project.agent("Alice")
    bucket = keys.token_rate(project.project_id, ids.token_hash(alice.row["token"]))

    async def requests(served: Served) -> Any:
        services = served.services
        services.gate = Gate(services.store, services.operator_token, RATE_PER_S)
        body = json.dumps({**SEND, "sender_name": "Bob"}).encode()  # refused first
        status, answer = await served.post(alice.row["token"], body)
        return status, answer, await _ahead_us(services.store, bucket)

    status, answer, ahead_us = _run(project, requests)
    assert status == 403 and orjson.loads(answer)["error"]["code"] == "SENDER_MISMATCH"
    assert 0 < ahead_us <= 1_000_000 // RATE_PER_S, ahead_us


class ReadOnlyGate(Gate):
    """A gate whose store answers as a replica does after a failover."""

    async def authenticate(self, scope: Any, *, defer: bool = False) -> Any:
        raise redis.exceptions.ReadOnlyError("You can't write against a read only replica.")


def test_a_failure_nobody_expected_is_counted_once(project: Project):
    alice = project.agent("Alice")

    async def requests(served: Served) -> Any:
        services = served.services
        services.gate = ReadOnlyGate(services.store, services.operator_token, 1.0)
        before = _refused(INTERNAL)
        with pytest.raises(redis.exceptions.ReadOnlyError):  # the server answers 500
            await served.post(alice.row["token"], json.dumps(SEND).encode())
        return _refused(INTERNAL) - before, served.reached

    counted, reached = _run(project, requests)
    assert counted == 1 and reached == []
