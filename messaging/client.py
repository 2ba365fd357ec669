"""A Python client for agent hosts: every call of docs/http-api.md, errors as exceptions.

    client = CourierClient("http://127.0.0.1:8787", token=agent_token)
    sent = client.send(to=["Bob"], subject="Handoff", body_md="# Next\n...")
    page = client.inbox(cursor=saved_cursor)
    for event in client.events():          # live: message, idle_notice, delivery
        ...
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from messaging.types import Json

DEFAULT_URL = "http://127.0.0.1:8787"
# The server sends a heartbeat every 15 s; a stream silent this long is dead.
EVENTS_READ_TIMEOUT_S = 60.0
EVENTS_RETRY_S = 1.0


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event of ``GET /v1/agents/me/events``."""

    id: str | None
    event: str
    data: Any  # the decoded JSON


class EventParser:
    """Server-Sent Events from lines given one at a time (comments and retry fields skipped)."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._name = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        """Take one line (without its line break); the event it completes, if any."""
        if line == "":
            done = None
            if self._data:
                text = "\n".join(self._data)
                try:
                    value: Any = json.loads(text)
                except ValueError:
                    value = text
                done = Event(self._id, self._name, value)
            self._id, self._name, self._data = None, "message", []
            return done
        if line.startswith(":"):
            return None
        field, _, value_text = line.partition(":")
        value_text = value_text.removeprefix(" ")
        if field == "data":
            self._data.append(value_text)
        elif field == "event":
            self._name = value_text
        elif field == "id":
            self._id = value_text
        return None


def parse_events(lines: Iterator[str]) -> Iterator[Event]:
    """Server-Sent Events from a stream of lines (comments and retry fields skipped)."""
    parser = EventParser()
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event


def _rows(answer: Json, field: str) -> list[Json]:
    """The list an API answer holds under ``field``."""
    rows: list[Json] = answer[field]
    return rows


class CourierAPIError(Exception):
    """An error answer of the API, with its code and details."""

    def __init__(self, status: int, body: Json) -> None:
        error = body.get("error") or {}
        self.status = status
        self.code: str = error.get("code", "UNKNOWN")
        self.details: Json = error.get("details") or {}
        self.persisted: bool | None = body.get("persisted")
        self.body = body
        super().__init__(f"{status} {self.code}: {error.get('message', '')}")


def error_of(response: httpx.Response) -> CourierAPIError:
    """The error of an answer that is not a 2xx, read whole: its body in the API's shape,
    or its first characters as the message."""
    try:
        body = response.json()
    except ValueError:
        body = {"error": {"code": "UNKNOWN", "message": response.text[:200]}}
    return CourierAPIError(response.status_code, body)


class CourierClient:
    """One token's view of a Courier server."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None,
                 timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def __enter__(self) -> CourierClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Json:
        """One call; a 2xx answer's JSON, else CourierAPIError.

        Raises:
            CourierAPIError: the server answered with an error.
        """
        response = self.http.request(method, path, **kwargs)
        try:
            body = response.json()
        except ValueError:
            body = {"error": {"code": "UNKNOWN", "message": response.text[:200]}}
        if not response.is_success:
            raise CourierAPIError(response.status_code, body)
        out: Json = body
        return out

    # projects and agents

    def create_project(self, project_key: str, name: str | None = None) -> Json:
        """Create a project (operator token); the answer holds its token."""
        body: Json = {"project_key": project_key}
        if name:
            body["name"] = name
        return self.request("POST", "/v1/projects", json=body)

    def projects(self, cursor: str | None = None, limit: int = 50) -> Json:
        """One page of every project (operator token): ``{"projects", "next_cursor"}``."""
        params: Json = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return self.request("GET", "/v1/projects", params=params)

    def new_project_token(self, project_id: str) -> Json:
        """A new project token (operator token); the old one stops working at once."""
        return self.request("POST", f"/v1/projects/{project_id}/token")

    def project(self, project_id: str) -> Json:
        """A project, its lane and its backlog per transport (operator or project token)."""
        return self.request("GET", f"/v1/projects/{project_id}")

    def set_lane(self, project_id: str, lane: str | None) -> Json:
        """Put a project on a lane, or back on the shared queues with None (operator token)."""
        if lane is None:
            return self.request("DELETE", f"/v1/projects/{project_id}/lane")
        return self.request("PUT", f"/v1/projects/{project_id}/lane", json={"lane": lane})

    def register_agent(self, project_id: str, name: str, transport: Json | None = None,
                       **fields: Any) -> Json:
        """Register an agent (project token); the answer holds its token."""
        body = {"name": name, "transport": transport or {"kind": "inbox"}, **fields}
        return self.request("POST", f"/v1/projects/{project_id}/agents", json=body)

    def agents_answer(self, project_id: str) -> Json:
        """The project's agents as the API answers: ``{"agents": [...]}``."""
        return self.request("GET", f"/v1/projects/{project_id}/agents")

    def list_agents(self, project_id: str) -> list[Json]:
        """The project's agents."""
        return _rows(self.agents_answer(project_id), "agents")

    def retire_agent(self, project_id: str, agent_id: str) -> Json:
        """No new mail for this agent (project token)."""
        return self.request("POST", f"/v1/projects/{project_id}/agents/{agent_id}/retire")

    def close_agent(self, project_id: str, agent_id: str) -> Json:
        """The agent's conversation is gone for good (project token)."""
        return self.request("POST", f"/v1/projects/{project_id}/agents/{agent_id}/close")

    def allow_name(self, project_id: str, name: str, ttl_s: int | None = None) -> Json:
        """Authorize a name before any agent has it (project token)."""
        body = {} if ttl_s is None else {"ttl_s": ttl_s}
        return self.request("PUT", f"/v1/projects/{project_id}/names/{quote(name, safe='')}",
                            json=body)

    def names_answer(self, project_id: str) -> Json:
        """The project's authorized names as the API answers: ``{"names": [...]}``."""
        return self.request("GET", f"/v1/projects/{project_id}/names")

    def names(self, project_id: str) -> list[Json]:
        """The project's authorized names (project token)."""
        return _rows(self.names_answer(project_id), "names")

    def end_name(self, project_id: str, name: str) -> Json:
        """End an authorization; mail waiting for it fails (project token)."""
        return self.request("DELETE", f"/v1/projects/{project_id}/names/{quote(name, safe='')}")

    def held_answer(self, project_id: str) -> Json:
        """Held deliveries as the API answers: ``{"deliveries": [...]}``."""
        return self.request("GET", f"/v1/projects/{project_id}/held")

    def held(self, project_id: str) -> list[Json]:
        """Held deliveries, oldest first, each with its message (project token)."""
        return _rows(self.held_answer(project_id), "deliveries")

    def release(self, delivery_id: str) -> Json:
        """Let a held delivery go to its recipient (project token)."""
        return self.request("POST", f"/v1/deliveries/{delivery_id}/release")

    def decline(self, delivery_id: str) -> Json:
        """Refuse a held delivery: it ends rejected (project token)."""
        return self.request("POST", f"/v1/deliveries/{delivery_id}/decline")

    def set_presence(self, state: str) -> Json:
        """Report busy, idle, exited or source_lost (agent token)."""
        return self.request("PUT", "/v1/agents/me/presence", json={"state": state})

    # idle notices and live events

    def subscribe_idle(self, target: str, message: Json | None = None,
                       ttl_s: int | None = None) -> Json:
        """One notice when ``target`` next goes idle or exits (or when ``ttl_s`` runs out).

        With ``message`` (send fields without ``to``), it is sent to the target
        now and the notice waits for the target's next idle or exit.
        """
        body: Json = {"target": target, "kind": "idle"}
        if message is not None:
            body["message"] = message
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return self.request("POST", "/v1/subscriptions", json=body)

    def subscription(self, subscription_id: str) -> Json:
        """One of this agent's subscriptions."""
        return self.request("GET", f"/v1/subscriptions/{subscription_id}")

    def events(self, last_event_id: str | None = None, reconnect: bool = False,
               read_timeout_s: float = EVENTS_READ_TIMEOUT_S) -> Iterator[Event]:
        """This agent's live events as they come, after ``last_event_id`` if given.

        With ``reconnect``, a dropped connection is opened again after the last
        event received, so nothing is lost or repeated. Close the iterator (or
        leave the ``for`` loop) to disconnect.

        Raises:
            CourierAPIError: the server refused the stream.
        """
        while True:
            try:
                with contextlib.closing(self._events_once(last_event_id, read_timeout_s)) as once:
                    for event in once:
                        if event.id is not None:
                            last_event_id = event.id
                        yield event
            except httpx.TransportError:
                if not reconnect:
                    raise
            if not reconnect:
                return
            time.sleep(EVENTS_RETRY_S)

    def _events_once(self, last_event_id: str | None, read_timeout_s: float
                     ) -> Generator[Event, None, None]:
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        timeout = httpx.Timeout(self.http.timeout.connect, read=read_timeout_s)
        with self.http.stream("GET", "/v1/agents/me/events", headers=headers,
                              timeout=timeout) as response:
            if not response.is_success:
                response.read()
                raise error_of(response)
            yield from parse_events(response.iter_lines())

    # messages

    def send(self, to: list[str] | str, subject: str | None = None, body_md: str | None = None,
             **fields: Any) -> Json:
        """Send a message (agent token); see docs/http-api.md for the fields."""
        body: Json = {"to": [to] if isinstance(to, str) else to, **fields}
        if subject is not None:
            body["subject"] = subject
        if body_md is not None:
            body["body_md"] = body_md
        return self.request("POST", "/v1/messages", json=body)

    def reply(self, message_id: str, body_md: str, **fields: Any) -> Json:
        """Reply to a message in its thread, to its sender."""
        return self.request("POST", f"/v1/messages/{message_id}/reply",
                            json={"body_md": body_md, **fields})

    def get_message(self, message_id: str) -> Json:
        """One message as this token may see it."""
        return self.request("GET", f"/v1/messages/{message_id}")

    def thread_page(self, thread_id: str, cursor: str | None = None,
                    limit: int = 50) -> Json:
        """One page of the thread: ``{"thread_id", "messages", "next_cursor", "more"}``."""
        params: Json = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return self.request("GET", f"/v1/threads/{thread_id}", params=params)

    def iter_thread(self, thread_id: str, cursor: str | None = None,
                    limit: int = 50) -> Iterator[Json]:
        """The thread's messages this token may see past the cursor, page by page."""
        while True:
            page = self.thread_page(thread_id, cursor=cursor, limit=limit)
            yield from page["messages"]
            if not page["more"]:
                return
            cursor = page["next_cursor"]

    def thread(self, thread_id: str) -> list[Json]:
        """All of the thread's messages this token may see, read page by page."""
        return list(self.iter_thread(thread_id))

    def inbox(self, cursor: str | None = None, limit: int = 50, **filters: Any) -> Json:
        """One inbox page: ``{"messages", "next_cursor"}``."""
        params: Json = {"limit": limit, **{k: v for k, v in filters.items() if v is not None}}
        if cursor:
            params["cursor"] = cursor
        for key, value in params.items():
            if isinstance(value, bool):
                params[key] = "true" if value else "false"
        return self.request("GET", "/v1/agents/me/inbox", params=params)

    def iter_inbox(self, cursor: str | None = None, limit: int = 50,
                   **filters: Any) -> Iterator[Json]:
        """Every message past the cursor, page by page."""
        while True:
            page = self.inbox(cursor=cursor, limit=limit, **filters)
            yield from page["messages"]
            if not page["messages"]:
                return
            cursor = page["next_cursor"]

    def mark_read(self, message_id: str) -> Json:
        """Mark a received message read."""
        return self.request("POST", f"/v1/messages/{message_id}/read")

    def acknowledge(self, message_id: str) -> Json:
        """Acknowledge a received message."""
        return self.request("POST", f"/v1/messages/{message_id}/ack")

    # deliveries

    def delivery(self, delivery_id: str) -> Json:
        """One delivery, stage by stage."""
        return self.request("GET", f"/v1/deliveries/{delivery_id}")

    def message_deliveries(self, message_id: str) -> list[Json]:
        """The deliveries of a message."""
        return _rows(self.request("GET", f"/v1/messages/{message_id}/deliveries"), "deliveries")

    def redrive(self, delivery_id: str) -> Json:
        """Send a delivery again on the same route with the same id (project token)."""
        return self.request("POST", f"/v1/deliveries/{delivery_id}/redrive")

    def observed(self, delivery_id: str) -> Json:
        """Tell Courier this agent's host showed the delivery."""
        return self.request("POST", f"/v1/deliveries/{delivery_id}/observed")

    def host_event(self, delivery_id: str, kind: str, detail: str | None = None) -> Json:
        """Tell Courier what else this agent's host did with the delivery (``pushed``,
        ``resume_started``, ``resume_ended``, ``resume_failed``); never an observation."""
        body: Json = {"kind": kind, **({"detail": detail} if detail is not None else {})}
        return self.request("POST", f"/v1/deliveries/{delivery_id}/host-events", json=body)

    # search

    def search(self, q: str = "", cursor: str | None = None, limit: int = 50,
               **filters: Any) -> Json:
        """One page of this agent's search, newest first: ``{"messages", "next_cursor"}``.

        Filters: ``topic``, ``sender`` (a sender name), ``since``, ``until`` (RFC 3339).
        """
        params: Json = {"q": q, "limit": limit}
        if cursor:
            params["cursor"] = cursor
        for key, value in filters.items():
            if value is not None:
                params["from" if key == "sender" else key] = value
        return self.request("GET", "/v1/agents/me/search", params=params)
