"""Fixtures of the integration tests: one real stack per session, a project per test."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from messaging.client import CourierClient
from messaging.store.deliveries import DeliveryStore
from tests.receiver import Receiver
from tests.stack import Stack, make_stack, served_stack


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """A socket or file left open is reported by the test that left it, not by
    whichever later test the garbage collector happens to run in."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Store, API and one inbox worker (with beat), shared by the session's tests."""
    with served_stack(tmp_path_factory.mktemp("stack")) as s:
        yield s


@dataclass
class Project:
    """A fresh project of the shared stack, with helpers to add agents."""

    stack: Stack
    project_id: str
    project_key: str
    token: str
    clients: list[CourierClient] = field(default_factory=list)

    def client(self, token: str) -> CourierClient:
        c = self.stack.client(token)
        self.clients.append(c)
        return c

    @property
    def admin(self) -> CourierClient:
        if not hasattr(self, "_admin"):
            self._admin = self.client(self.token)
        return self._admin

    def agent(self, name: str, **fields: Any) -> Agent:
        row = self.admin.register_agent(self.project_id, name, **fields)
        return Agent(row, self.client(row["token"]))


@dataclass
class Agent:
    """A registered agent and a client acting as it."""

    row: dict[str, Any]
    api: CourierClient

    @property
    def id(self) -> str:
        return str(self.row["agent_id"])

    @property
    def label(self) -> str:
        return str(self.row["label"])


@pytest.fixture
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of the test's own with the store and the API and no worker: what is
    sent waits in its ready set."""
    s = make_stack(tmp_path_factory.mktemp("quiet"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def store(quiet: Stack) -> Iterator[DeliveryStore]:
    """The workers' side of ``quiet``'s store, as a test that takes as a worker does."""
    s = DeliveryStore.from_url(quiet.store.url)
    try:
        yield s
    finally:
        s.client.close()


def new_project(stack: Stack) -> Project:
    """A fresh project of ``stack`` (its caller closes its clients)."""
    key = f"/srv/checkouts/{uuid.uuid4().hex}"
    with stack.operator() as op:
        p = op.create_project(key)
    return Project(stack, p["project_id"], key, p["token"])


@contextmanager
def open_project(stack: Stack) -> Iterator[Project]:
    """A fresh project of ``stack``; its clients are closed on exit."""
    proj = new_project(stack)
    try:
        yield proj
    finally:
        for c in proj.clients:
            c.close()


def sent_to_bob(alice: Agent, n: int) -> list[str]:
    """The delivery ids of ``n`` sends from ``alice`` to Bob."""
    return [alice.api.send(["Bob"], f"m{i}", "x")["delivery"]["observations"][0]["delivery_id"]
            for i in range(n)]


@pytest.fixture
def project(stack: Stack) -> Iterator[Project]:
    """A new project: tests never see each other's agents or mail."""
    with open_project(stack) as proj:
        yield proj


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback (``tests.receiver``), stopped after the test."""
    r = Receiver()
    r.start()
    yield r
    r.stop()
