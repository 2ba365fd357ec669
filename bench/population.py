"""Who sends and what: a project of agents, a 1 KiB Markdown body, the send requests."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from bench.loadgen import Request
from messaging.client import CourierClient

BODY_BYTES = 1024
AGENTS = 4
SUBJECT = "Bench: handoff"
PARAGRAPH = (
    "## Handoff\n\nThe `auth.py` review is done; see the notes below. "
    "- [x] tokens hashed\n- [ ] rotate the signing key\n\n"
)


def body_md(size: int = BODY_BYTES) -> str:
    """A Markdown body of exactly ``size`` bytes (ASCII)."""
    text = PARAGRAPH * (size // len(PARAGRAPH) + 1)
    return text[:size]


@dataclass(frozen=True)
class Agent:
    """A registered agent and its token."""

    id: str
    name: str
    label: str
    token: str


@dataclass(frozen=True)
class Population:
    """One project and its agents."""

    project_id: str
    agents: list[Agent]

    def agent(self, name: str) -> Agent:
        """The agent of that name."""
        return next(a for a in self.agents if a.name == name)


def populate(api_url: str, operator_token: str, names: list[str]) -> Population:
    """A new project with one agent per name, each reporting itself running."""
    with CourierClient(api_url, operator_token) as op:
        project = op.create_project(f"/srv/bench/{uuid.uuid4().hex}")
    agents = []
    with CourierClient(api_url, project["token"]) as admin:
        for name in names:
            row = admin.register_agent(project["project_id"], name)
            agents.append(Agent(row["agent_id"], name, row["label"], row["token"]))
    return Population(project["project_id"], agents)


def ring(count: int = AGENTS) -> list[str]:
    """Names of agents that send to each other in a ring."""
    return [f"Agent{i}" for i in range(count)]


def send_request(sender: Agent, to: str) -> Request:
    """A send of the 1 KiB body from ``sender`` to ``to`` (by name)."""
    body = {"to": [to], "subject": SUBJECT, "body_md": body_md()}
    return Request("POST", "/v1/messages", {"Authorization": f"Bearer {sender.token}",
                                  "Content-Type": "application/json"}, json.dumps(body))


def ring_sends(pop: Population, names: list[str] | None = None) -> list[Request]:
    """One send per agent (of ``names``, default all), each to the next one of the ring."""
    members = [a for a in pop.agents if names is None or a.name in names]
    n = len(members)
    return [send_request(a, members[(i + 1) % n].name) for i, a in enumerate(members)]


def sends_to(pop: Population, recipient: str) -> list[Request]:
    """One send from every other agent to ``recipient``."""
    return [send_request(a, recipient) for a in pop.agents if a.name != recipient]


def inbox_request(agent: Agent, cursor: int, limit: int) -> Request:
    """A page of ``agent``'s inbox after ``cursor``."""
    return Request("GET", f"/v1/agents/me/inbox?cursor={cursor}&limit={limit}",
                   {"Authorization": f"Bearer {agent.token}"})
