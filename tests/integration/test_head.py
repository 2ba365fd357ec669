"""HEAD on every GET route of the app: the GET's status and headers, no body."""

from __future__ import annotations

import re
import time

import httpx

from messaging.web.app import create_app
from messaging.web.reference import served_routes
from tests.integration.conftest import Project

# Headers that differ between any two answers, whatever the method, and the
# server's own framing of a body (a HEAD has none to frame).
PER_ANSWER = {"date", "transfer-encoding"}


def _paths(project: Project, ids: dict[str, str]) -> list[str]:
    """Every GET path of the route table, its parameters filled with real ids."""
    paths = []
    for method, path, _ in served_routes(create_app()):
        if method != "GET":
            continue
        filled = re.sub(r"\{(\w+)(:path)?\}", lambda m: ids.get(m[1], "x"), path)
        paths.append(filled)
    return paths


def _get_headers(http: httpx.Client, path: str, token: str) -> httpx.Response:
    """A GET's status and headers (a stream's body is never waited for)."""
    with http.stream("GET", path, headers={"Authorization": f"Bearer {token}"}) as answer:
        return answer


def test_every_get_route_answers_head_with_the_same_status_and_headers(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(["Bob"], "for the walk", "body")
    ids = {"project_id": project.project_id, "agent_id": alice.id, "message_id": sent["id"],
           "thread_id": sent["thread_id"],
           "delivery_id": sent["delivery"]["observations"][0]["delivery_id"],
           "subscription_id": "sub_x", "name": "Carol", "path": "index.html"}
    paths = _paths(project, ids)
    assert "/healthz" in paths and "/v1/projects" in paths and len(paths) > 15
    tokens = {"operator": project.stack.operator_token, "project": project.token,
              "agent": bob.row["token"]}
    compared = set()
    with httpx.Client(base_url=project.stack.api_url, timeout=10) as http:
        for path in paths:
            for kind, token in tokens.items():
                got = _get_headers(http, path, token)
                head = http.head(path, headers={"Authorization": f"Bearer {token}"})
                where = f"HEAD {path} ({kind} token)"
                assert head.status_code == got.status_code, where
                assert head.content == b"", where
                differ = {name for name in {*got.headers, *head.headers} - PER_ANSWER
                          if got.headers.get(name) != head.headers.get(name)}
                if path == "/metrics":  # its figures move between two answers
                    differ -= {"content-length"}
                assert not differ, (where, {n: (got.headers.get(n), head.headers.get(n))
                                            for n in differ})
                compared.add((path, got.status_code))
    assert ("/healthz", 200) in compared and ("/v1/projects", 200) in compared
    assert (f"/v1/messages/{sent['id']}", 200) in compared


def test_head_on_an_event_stream_ends_at_once_and_the_connection_goes_on(project: Project):
    alice = project.agent("Alice")
    headers = {"Authorization": f"Bearer {alice.row['token']}"}
    with httpx.Client(base_url=project.stack.api_url, timeout=5) as http:
        for _ in range(6):  # more than the open streams an agent may hold
            began = time.monotonic()
            head = http.head("/v1/agents/me/events", headers=headers)
            assert head.status_code == 200, head.text
            assert head.headers["content-type"].startswith("text/event-stream")
            assert time.monotonic() - began < 2
        assert http.get("/healthz").text == "ok\n"


def _forbidden_count(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    found = re.search(r'^courier_refusals_total\{code="FORBIDDEN",face="http"\} (\S+)$', text,
                      re.MULTILINE)
    return float(found[1]) if found else 0.0


def test_a_refused_head_is_counted_like_the_refused_get(project: Project):
    headers = {"Authorization": f"Bearer {project.token}"}  # a project token: 403 here
    with httpx.Client(base_url=project.stack.api_url, timeout=5) as http:
        before = _forbidden_count(http)
        for _ in range(3):
            assert http.head("/v1/projects", headers=headers).status_code == 403
        assert _forbidden_count(http) == before + 3
