"""Tokens are revoked and rotated (docs/http-api.md: Authentication).

Retiring or closing an agent revokes its token at once: every face answers
401 from then on. Rotation issues a new token and revokes the old one, and a
second API process refuses the revoked token too. An event stream opened with
a token ends once that token is rotated or its agent retired, and shows no mail
that came after.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.conftest import Agent, Project

MCP_ACCEPT = "application/json, text/event-stream"
# How long another API process may still trust a token's cached scope.
TOKEN_CACHE_S = 1.0
# An idle open stream checks its token when it renews its slot (messaging.service.events).
STREAM_RENEW_S = 20.0


def _faces(url: str, token: str) -> dict[str, int]:
    """The status of one request per face with ``token``."""
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=auth, timeout=10) as http:
        codes = {
            "send": http.post("/v1/messages", json={"to": ["Bob"], "subject": "s",
                                                    "body_md": "x"}).status_code,
            "inbox": http.get("/v1/agents/me/inbox").status_code,
            "presence": http.put("/v1/agents/me/presence", json={"state": "busy"}).status_code,
            "subscribe": http.post("/v1/subscriptions", json={"target": "Bob"}).status_code,
            "mcp": http.post("/mcp", headers={"Accept": MCP_ACCEPT}, json={
                "jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code,
        }
        with http.stream("GET", "/v1/agents/me/events") as events:
            codes["events"] = events.status_code
    return codes


@pytest.mark.parametrize("action", ["retire", "close"])
def test_retiring_or_closing_revokes_the_token_on_every_face(project: Project, action: str):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    url, token = project.stack.api_url, alice.row["token"]
    assert set(_faces(url, token).values()) <= {200, 201}
    project.admin.http.post(f"/v1/projects/{project.project_id}/agents/{alice.id}/{action}")
    after = _faces(url, token)
    assert after == dict.fromkeys(after, 401), after


@pytest.mark.slow
def test_rotation_issues_a_new_token_and_revokes_the_old(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    url, old = project.stack.api_url, alice.row["token"]
    path = f"/v1/projects/{project.project_id}/agents/{alice.id}/token"
    # another API process that has seen the old token working
    _, other = project.stack.start_api()
    assert httpx.get(f"{other}/v1/agents/me/inbox",
                     headers={"Authorization": f"Bearer {old}"}).status_code == 200
    refused = httpx.post(url + path, headers={"Authorization": f"Bearer {old}"})
    assert refused.status_code == 403  # an agent cannot rotate its own token
    rotated = project.admin.http.post(path)
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()["token"]
    assert new != old and rotated.json()["agent_id"] == alice.id
    assert _faces(url, old) == dict.fromkeys(_faces(url, old), 401)
    assert set(_faces(url, new).values()) <= {200, 201}
    time.sleep(TOKEN_CACHE_S + 0.2)
    for base in (url, other):
        got = httpx.get(f"{base}/v1/agents/me/inbox", headers={"Authorization": f"Bearer {old}"})
        assert got.status_code == 401, base
        assert got.headers["www-authenticate"] == "Bearer"


def test_a_retired_agent_gets_no_new_token(project: Project):
    alice: Agent = project.agent("Alice")
    project.admin.http.post(f"/v1/projects/{project.project_id}/agents/{alice.id}/retire")
    got = project.admin.http.post(f"/v1/projects/{project.project_id}/agents/{alice.id}/token")
    assert got.status_code == 422 and got.json()["error"]["details"]["field"] == "agent_id"


def _events_until_end(lines: Iterator[str], within_s: float) -> list[str] | None:
    """The event names a stream sends until it ends or shows a message (None: still open)."""
    names: list[str] = []
    end = time.monotonic() + within_s
    for line in lines:  # heartbeats come every 15 s: the deadline is checked
        if line.startswith("event:"):
            names.append(line.partition(":")[2].strip())
            if names[-1] == "message":
                return names
        if time.monotonic() > end:
            return None
    return names


# A rotated token's stream ends when the next mail comes; a retired agent gets no mail, so
# its stream ends when it next renews its slot.
@pytest.mark.slow
@pytest.mark.parametrize(("action", "sent_status", "within_s"), [
    ("token", 201, 15), ("retire", 422, STREAM_RENEW_S + 10)])
def test_an_open_stream_ends_once_its_token_stops_admitting(
        project: Project, action: str, sent_status: int, within_s: float):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    with bob.api.http.stream("GET", "/v1/agents/me/events",
                             timeout=httpx.Timeout(10, read=30)) as events:
        lines = events.iter_lines()
        assert next(lines).startswith(": courier events after ")
        done = project.admin.http.post(
            f"/v1/projects/{project.project_id}/agents/{bob.id}/{action}")
        assert done.is_success, done.text
        sent = alice.api.http.post("/v1/messages", json={
            "to": [bob.id], "subject": f"After {action}", "body_md": "x"})
        assert sent.status_code == sent_status, sent.text
        assert _events_until_end(lines, within_s) == []


@pytest.mark.parametrize("action", ["token", "retire", "close"])
def test_the_projects_human_gets_no_token_and_never_ends(project: Project, action: str):
    got = project.admin.http.post(f"/v1/projects/{project.project_id}/agents/human/{action}")
    assert got.status_code == 404, got.text
    bob = project.agent("Bob")
    sent = bob.api.http.post("/v1/messages", json={"to": ["human"], "subject": "s",
                                                    "body_md": "x"})
    assert sent.status_code == 201, sent.text
