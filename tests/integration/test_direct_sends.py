"""Which requests the send's direct layer answers itself, and that it passes on the rest.

``DirectSends`` runs here in process, on the stack's store and broker, in
front of a stand-in for the layers beneath it that records what reaches it. A
plain send is admitted (Bob's inbox shows it, through the stack's worker)
without reaching the stand-in; every other request reaches it with its body
intact and its caller already found.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
import redis
from prometheus_client import REGISTRY

from messaging import ids
from messaging.config import Settings
from messaging.runtime.publish import BatchPublisher, Publisher
from messaging.store import keys
from messaging.store.store import Store
from messaging.web.deps import Services
from messaging.web.direct import DirectSends
from messaging.web.fairshare import FairShare
from messaging.web.guard import AUTH_SCOPE_KEY, Gate
from messaging.web.refusals import INTERNAL
from tests.asgi import StandIn
from tests.integration.conftest import Project
from tests.stack import wait_until

MAX_BYTES = 4096
SEND = {"to": ["Bob"], "subject": "Plan", "body_md": "# Plan"}


@asynccontextmanager
async def _front(project: Project) -> AsyncIterator[tuple[DirectSends, StandIn, Any]]:
    stack = project.stack
    settings = Settings(redis_url=stack.store.url, broker_url=stack.broker_url,
                        operator_token=stack.operator_token)
    store = Store.from_url(settings.store_url)
    publisher = BatchPublisher(Publisher(settings), store)
    publisher.start()
    gate = Gate(store, stack.operator_token, settings.rate_limit_per_s)
    services = Services(settings, store, publisher, stack.operator_token, gate,
                        None, None)  # type: ignore[arg-type]  # no route here reads them
    beneath = StandIn(b"beneath")
    try:
        yield DirectSends(beneath, FairShare(), MAX_BYTES), beneath, SimpleNamespace(
            state=SimpleNamespace(services=services))
    finally:
        await publisher.stop()
        await store.close()


async def _request(front: DirectSends, app: Any, token: str, body: bytes, *,
                   method: str = "POST", path: str = "/v1/messages",
                   content_types: tuple[bytes, ...] = (b"application/json",),
                   root_path: str = "") -> tuple[int, bytes]:
    headers = [(b"content-type", kind) for kind in content_types] + [
        (b"authorization", f"Bearer {token}".encode()),
        (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "method": method, "path": path, "root_path": root_path,
             "headers": headers, "client": ("127.0.0.1", 50000), "app": app}
    parts = [{"type": "http.request", "body": body[:10], "more_body": True},
             {"type": "http.request", "body": body[10:], "more_body": False}]
    answer: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return parts.pop(0) if parts else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        answer.append(message)

    await front(scope, receive, send)
    return answer[0]["status"], b"".join(m.get("body", b"") for m in answer[1:])


def _run(project: Project, requests: Any) -> Any:
    async def go() -> Any:
        async with _front(project) as (front, beneath, app):
            return await requests(front, beneath, app)
    return asyncio.run(go())


def test_a_plain_send_is_admitted_without_reaching_the_layers_beneath(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")

    async def requests(front: DirectSends, beneath: StandIn, app: Any) -> Any:
        first = await _request(front, app, alice.row["token"], json.dumps(SEND).encode())
        # A content type's parameters are the same JSON.
        second = await _request(front, app, alice.row["token"], json.dumps(SEND).encode(),
                                content_types=(b"Application/JSON; charset=utf-8",))
        return first, second, beneath.reached

    first, second, reached = _run(project, requests)
    assert reached == []
    assert [first[0], second[0]] == [201, 201]
    answers = [orjson.loads(first[1]), orjson.loads(second[1])]
    assert all(a["persisted"] and a["from"] == alice.label for a in answers)
    wait_until(lambda: {m["id"] for m in bob.api.inbox()["messages"]}
               == {a["id"] for a in answers}, what="both sends in Bob's inbox")


PASSED_ON: dict[str, dict[str, Any]] = {
    "another content type": {"content_types": (b"application/merge-patch+json",)},
    "two content types": {"content_types": (b"application/json", b"text/plain")},
    "no content type": {"content_types": ()},
    "another method": {"method": "PUT"},
    "another path": {"path": "/v1/messages/"},
    "a root path": {"root_path": "/courier"},
    "a body that is not JSON": {"body": b"{\"to\": [\"Bob\"], "},
    "a body that is not an object": {"body": b"[1, 2]"},
    "a NaN orjson refuses": {"body": b"{\"to\": [\"Bob\"], \"subject\": NaN}"},
    "a field the model refuses": {"body": json.dumps({**SEND, "colour": "red"}).encode()},
    "a wrong type": {"body": json.dumps({**SEND, "ack_required": "yes"}).encode()},
}
# Cases the front passes on before it looks at the caller.
NOT_LOOKED_AT = {"another content type", "two content types", "no content type",
                 "another method", "another path", "a root path"}


@pytest.mark.parametrize("case", sorted(PASSED_ON))
def test_any_other_request_reaches_the_layers_beneath_with_its_body(project: Project,
                                                                    case: str):
    alice = project.agent("Alice")
    project.agent("Bob")
    change = dict(PASSED_ON[case])
    body = change.pop("body", json.dumps(SEND).encode())

    async def requests(front: DirectSends, beneath: StandIn, app: Any) -> Any:
        answer = await _request(front, app, alice.row["token"], body, **change)
        return answer, beneath.reached

    answer, reached = _run(project, requests)
    assert answer == (299, b"beneath")
    assert [b for _, b in reached] == [body]
    auth = reached[0][0].get(AUTH_SCOPE_KEY)
    if case in NOT_LOOKED_AT:
        assert auth is None  # the gate beneath finds the caller, as for any route
    else:  # found once, by the front: the gate beneath takes it from the scope
        assert auth.caller is not None and auth.caller.agent_id == alice.id


def test_a_request_without_a_valid_caller_is_passed_on_unread(project: Project):
    body = json.dumps(SEND).encode()

    async def requests(front: DirectSends, beneath: StandIn, app: Any) -> Any:
        answer = await _request(front, app, "cm_nobody", body)
        return answer, beneath.reached

    answer, reached = _run(project, requests)
    assert answer == (299, b"beneath")
    # The layers beneath refuse it from its headers (guard.Authenticate): the
    # stand-in reads it here, the front did not.
    auth = reached[0][0][AUTH_SCOPE_KEY]
    assert len(reached) == 1 and reached[0][1] == body
    assert auth.caller is None and auth.refusal is not None


def test_a_body_over_the_limit_is_refused_by_the_front_and_counted(project: Project):
    alice = project.agent("Alice")
    project.agent("Bob")
    big = json.dumps({**SEND, "body_md": "x" * MAX_BYTES}).encode()

    async def requests(front: DirectSends, beneath: StandIn, app: Any) -> Any:
        before = _refused("BODY_TOO_LARGE")
        answer = await _request(front, app, alice.row["token"], big)
        return answer, beneath.reached, _refused("BODY_TOO_LARGE") - before

    (status, body), reached, counted = _run(project, requests)
    assert status == 413 and orjson.loads(body)["error"]["details"] == {"max_bytes": MAX_BYTES}
    assert reached == [] and counted == 1


def test_a_refused_send_is_answered_by_the_front_and_counted(project: Project):
    alice = project.agent("Alice")

    async def requests(front: DirectSends, beneath: StandIn, app: Any) -> Any:
        before = _refused("RECIPIENT_NOT_FOUND")
        answer = await _request(front, app, alice.row["token"],
                                json.dumps({**SEND, "to": ["Nobody"]}).encode())
        return answer, beneath.reached, _refused("RECIPIENT_NOT_FOUND") - before

    (status, body), reached, counted = _run(project, requests)
    assert status == 422 and orjson.loads(body)["error"]["code"] == "RECIPIENT_NOT_FOUND"
    assert reached == [] and counted == 1


RATE_PER_S = 5  # one request is 200 ms of a bucket


def test_a_send_taken_from_its_bucket_at_the_gate_is_not_taken_from_again(project: Project):
    # A process that found the bucket empty a moment ago takes a send's request at
    # the gate (before its body); the admission then owes nothing more.
    alice = project.agent("Alice")
    project.agent("Bob")
    bucket = keys.token_rate(project.project_id, ids.token_hash(alice.row["token"]))

    async def requests(front: DirectSends, beneath: StandIn, app: Any) -> Any:
        services = app.state.services
        services.gate = Gate(services.store, services.operator_token, RATE_PER_S)
        services.gate.tokens.empty.put(bucket, time.monotonic() + 60)
        status, _ = await _request(front, app, alice.row["token"], json.dumps(SEND).encode())
        full_at = int(await services.store.client.get(bucket))
        seconds, micros = await services.store.client.time()
        return status, full_at - (seconds * 1_000_000 + micros)

    status, ahead_us = _run(project, requests)
    assert status == 201
    assert 0 < ahead_us <= 1_000_000 // RATE_PER_S, ahead_us  # one request, not two


class ReadOnlyGate(Gate):
    """A gate whose store answers as a replica does after a failover."""

    async def authenticate(self, scope: Any, *, defer: bool = False) -> Any:
        raise redis.exceptions.ReadOnlyError("You can't write against a read only replica.")


def test_a_failure_nobody_expected_is_counted_as_the_layers_beneath_count_it(
        project: Project):
    alice = project.agent("Alice")

    async def requests(front: DirectSends, beneath: StandIn, app: Any) -> Any:
        services = app.state.services
        services.gate = ReadOnlyGate(services.store, services.operator_token, 1.0)
        before = _refused(INTERNAL)
        with pytest.raises(redis.exceptions.ReadOnlyError):  # the server answers 500
            await _request(front, app, alice.row["token"], json.dumps(SEND).encode())
        return _refused(INTERNAL) - before, beneath.reached

    counted, reached = _run(project, requests)
    assert counted == 1 and reached == []


def _refused(code: str) -> float:
    value = REGISTRY.get_sample_value("courier_refusals_total", {"code": code, "face": "http"})
    return value or 0.0
