"""The send's layer answers a plain send exactly as FastAPI's handler does.

A body declared ``application/json`` is served by the innermost layer
(``messaging.web.sends``); the same bytes declared
``application/merge-patch+json`` (JSON too, for FastAPI) go to FastAPI's
handler. Every answer, refusals included, must
be the same: status, headers and JSON.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Project
from tests.stack import wait_until

DIRECT = "application/json"
FASTAPIS = "application/merge-patch+json"

REFUSED_BODIES = {
    "unknown field": {"to": ["Bob"], "subject": "s", "body_md": "b", "colour": "red"},
    "no recipient": {"subject": "s", "body_md": "b"},
    "a number for a list": {"to": 5, "subject": "s", "body_md": "b"},
    "a string for a boolean": {"to": ["Bob"], "subject": "s", "body_md": "b",
                               "ack_required": "true"},
    "a nested wrong type": {"to": ["Bob"], "resource_notice": {"resource_id": 5}},
    "an unknown importance": {"to": ["Bob"], "subject": "s", "body_md": "b",
                              "importance": "huge"},
    "two lines of subject": {"to": ["Bob"], "subject": "a\nb", "body_md": "b"},
    "no such recipient": {"to": ["Nobody"], "subject": "s", "body_md": "b"},
    "a sender that is not the token's": {"to": ["Bob"], "subject": "s", "body_md": "b",
                                         "sender_name": "Bob"},
}


# Headers that differ between any two answers.
PER_ANSWER = {"date"}


def _answer(project: Project, token: str, body: bytes, content_type: str,
            **headers: str) -> httpx.Response:
    client = project.client(token)
    return client.http.post("/v1/messages", content=body,
                            headers={"Content-Type": content_type, **headers})


def _post(project: Project, token: str, body: bytes, content_type: str) -> tuple[int, Any]:
    r = _answer(project, token, body, content_type)
    return r.status_code, r.json()


def _headers(r: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k not in PER_ANSWER}


@pytest.mark.parametrize("case", sorted(REFUSED_BODIES))
def test_a_refused_send_is_answered_the_same_on_both_paths(project: Project, case: str):
    alice = project.agent("Alice")
    project.agent("Bob")
    body = json.dumps(REFUSED_BODIES[case]).encode()
    direct = _post(project, alice.row["token"], body, DIRECT)
    assert direct[0] in (403, 422) and direct[1]["persisted"] is False
    assert direct == _post(project, alice.row["token"], body, FASTAPIS)


@pytest.mark.parametrize("body", [b"[1, 2]", b"not json", b"{\"to\": [\"Bob\"], ", b"",
                                  b"{\"to\": [\"Bob\"], \"subject\": NaN}"])
def test_bodies_the_direct_path_passes_on_are_refused_as_fastapi_refuses_them(
        project: Project, body: bytes):
    alice = project.agent("Alice")
    status, answer = _post(project, alice.row["token"], body, DIRECT)
    assert status == 422 and answer["error"]["code"] == "INVALID_ARGUMENT"
    assert (status, answer) == _post(project, alice.row["token"], body, FASTAPIS)


def test_an_admitted_send_is_the_same_on_both_paths(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = json.dumps({"to": ["Bob"], "subject": "Plan", "body_md": "# Plan"}).encode()
    sent = [_post(project, alice.row["token"], body, kind) for kind in (DIRECT, FASTAPIS)]
    assert [status for status, _ in sent] == [201, 201]
    different = {"id", "thread_id", "created_ts", "delivery"}
    first, second = ({k: v for k, v in answer.items() if k not in different}
                     for _, answer in sent)
    assert first == second
    wait_until(lambda: len(bob.api.inbox()["messages"]) == 2, what="both sends delivered")


def test_a_replay_and_its_headers_are_the_same_on_both_paths(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = json.dumps({"to": ["Bob"], "subject": "Plan", "body_md": "# Plan",
                       "idempotency_key": "plan-1"}).encode()
    first = _answer(project, alice.row["token"], body, DIRECT)
    assert first.status_code == 201
    replays = [_answer(project, alice.row["token"], body, kind) for kind in (DIRECT, FASTAPIS)]
    assert [r.status_code for r in replays] == [200, 200]
    assert replays[0].json() == replays[1].json()
    assert replays[0].json()["idempotent_replay"] is True
    assert _headers(replays[0]) == _headers(replays[1])
    assert _headers(first).keys() == _headers(replays[0]).keys()
    wait_until(lambda: len(bob.api.inbox()["messages"]) == 1, what="the send delivered")


def test_an_error_answer_has_the_same_headers_on_both_paths(project: Project):
    alice = project.agent("Alice")
    body = json.dumps({"to": ["Nobody"], "subject": "s", "body_md": "b"}).encode()
    answers = [_answer(project, alice.row["token"], body, kind) for kind in (DIRECT, FASTAPIS)]
    assert [r.status_code for r in answers] == [422, 422]
    assert answers[0].json() == answers[1].json()
    assert _headers(answers[0]) == _headers(answers[1])


def test_a_body_over_the_limit_is_refused_the_same_on_both_paths(project: Project):
    alice = project.agent("Alice")
    project.agent("Bob")
    over = json.dumps({"to": ["Bob"], "subject": "s",
                       "body_md": "x" * (2 * 1024 * 1024)}).encode()
    answers = [_answer(project, alice.row["token"], over, kind) for kind in (DIRECT, FASTAPIS)]
    assert [r.status_code for r in answers] == [413, 413]
    assert answers[0].json() == answers[1].json()
    assert _headers(answers[0]) == _headers(answers[1])
