"""Event streams cannot starve the API (docs/http-api.md: Operations/Limits, event stream).

Many open streams hold no connection the rest of the API needs: with 120
streams open across 30 agents, other agents still send and read. An agent
has at most 4 streams open. A stream starts with a comment only, so an SSE
client yields nothing empty, and no event id or cursor a client sends turns
into a 500 or an aborted stream.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx_sse
import pytest

from tests.integration.conftest import Agent, Project

STREAMS_PER_AGENT = 4
STREAM_AGENTS = 30
READ_TIMEOUT_S = 20


async def _open(http: httpx.AsyncClient, agent: Agent, opened: list[httpx.Response],
                stop: asyncio.Event) -> None:
    headers = {"Authorization": f"Bearer {agent.row['token']}"}
    async with http.stream("GET", "/v1/agents/me/events", headers=headers) as response:
        opened.append(response)
        if response.status_code != 200:
            await response.aread()
        else:
            await stop.wait()


def test_120_open_streams_leave_sends_and_reads_working(project: Project):
    listeners = [project.agent(f"Listener {n}") for n in range(STREAM_AGENTS)]
    alice, bob = project.agent("Alice"), project.agent("Bob")
    url = project.stack.api_url

    async def scenario() -> tuple[list[httpx.Response], list[int], httpx.Response]:
        stop = asyncio.Event()
        opened: list[httpx.Response] = []
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(base_url=url, limits=limits,
                                     timeout=httpx.Timeout(30)) as http:
            streams = [asyncio.create_task(_open(http, agent, opened, stop))
                       for agent in listeners for _ in range(STREAMS_PER_AGENT)]
            while len(opened) < len(streams):
                await asyncio.sleep(0.05)
            extra: list[httpx.Response] = []
            await _open(http, listeners[0], extra, stop)  # a fifth for one agent
            codes: list[int] = []
            auth_a = {"Authorization": f"Bearer {alice.row['token']}"}
            auth_b = {"Authorization": f"Bearer {bob.row['token']}"}
            for n in range(20):
                sent = await http.post("/v1/messages", headers=auth_a, json={
                    "to": ["Bob"], "subject": f"while streams are open {n}", "body_md": "x"})
                read = await http.get("/v1/agents/me/inbox", headers=auth_b)
                codes += [sent.status_code, read.status_code]
            stop.set()
            await asyncio.gather(*streams)
        return opened, codes, extra[0]

    opened, codes, fifth = asyncio.run(scenario())
    refused = [r.text for r in opened if r.status_code != 200]
    assert not refused, refused[:3]
    assert set(codes) <= {200, 201}, codes
    assert fifth.status_code == 429


def test_a_fifth_stream_is_refused_and_a_closed_one_frees_its_slot(project: Project):
    bob = project.agent("Bob")
    auth = {"Authorization": f"Bearer {bob.row['token']}"}

    async def scenario() -> list[int]:
        async with httpx.AsyncClient(base_url=project.stack.api_url, headers=auth,
                                     timeout=30) as http:
            codes: list[int] = []
            held = []
            for _ in range(STREAMS_PER_AGENT):
                ctx = http.stream("GET", "/v1/agents/me/events")
                response = await ctx.__aenter__()
                held.append(ctx)
                codes.append(response.status_code)
            fifth = await http.get("/v1/agents/me/events")
            codes.append(fifth.status_code)
            assert fifth.json()["error"]["code"] == "RATE_LIMITED"
            assert int(fifth.headers["retry-after"]) >= 1
            await held.pop().__aexit__(None, None, None)
            for _ in range(50):  # the server sees the client leave
                await asyncio.sleep(0.1)
                async with http.stream("GET", "/v1/agents/me/events") as again:
                    if again.status_code == 200:
                        codes.append(200)
                        break
            for ctx in held:
                await ctx.__aexit__(None, None, None)
            return codes

    assert asyncio.run(scenario()) == [200] * STREAMS_PER_AGENT + [429, 200]


def test_an_sse_client_gets_the_first_message_as_the_first_event(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    auth = {"Authorization": f"Bearer {bob.row['token']}"}
    with httpx.Client(base_url=project.stack.api_url, headers=auth,
                      timeout=httpx.Timeout(10, read=READ_TIMEOUT_S)) as http, \
            httpx_sse.connect_sse(http, "GET", "/v1/agents/me/events") as source:
        assert source.response.status_code == 200
        events = source.iter_sse()
        sent = alice.api.send("Bob", "First", "x")
        first = next(events)
    assert first.event == "message" and first.data, first
    assert json.loads(first.data)["id"] == sent["id"]


@pytest.mark.parametrize(("where", "value"), [
    ("header", "99999999999999999999-0"), ("header", "18446744073709551616-0"),
    ("header", "1-99999999999999999999"), ("query", "²"), ("query", "١٢-٣"),
    ("header", "-1"), ("query", "1-")])
def test_a_bad_event_id_is_a_clear_4xx(project: Project, where: str, value: str):
    bob = project.agent("Bob")
    kw: dict[str, Any] = ({"headers": {"Last-Event-ID": value}} if where == "header"
                          else {"params": {"last_event_id": value}})
    response = bob.api.http.get("/v1/agents/me/events", **kw)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"]["field"] == "Last-Event-ID"


def test_the_largest_event_id_is_a_clean_stream(project: Project):
    bob = project.agent("Bob")
    top = f"{2**64 - 1}-{2**64 - 1}"
    with bob.api.http.stream("GET", "/v1/agents/me/events", headers={"Last-Event-ID": top},
                             timeout=httpx.Timeout(10, read=READ_TIMEOUT_S)) as response:
        assert response.status_code == 200
        assert next(response.iter_lines()).startswith(": courier events after ")


@pytest.mark.parametrize("cursor", ["²", "١٢", "9" * 40, "-1", "1.5"])
def test_a_bad_inbox_cursor_is_a_clear_4xx(project: Project, cursor: str):
    bob = project.agent("Bob")
    response = bob.api.http.get("/v1/agents/me/inbox", params={"cursor": cursor})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"]["field"] == "cursor"


@pytest.mark.parametrize("cursor", ["²", "١٢", "٣", "𝟙", "9" * 40, "-1"])
@pytest.mark.parametrize("route", ["agent", "project"])
def test_a_bad_search_cursor_is_a_clear_4xx(project: Project, route: str, cursor: str):
    if route == "agent":
        http, path = project.agent("Bob").api.http, "/v1/agents/me/search"
    else:
        http, path = project.admin.http, f"/v1/projects/{project.project_id}/search"
    response = http.get(path, params={"cursor": cursor})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"]["field"] == "cursor"
