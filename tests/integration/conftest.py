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
from tests.stack import Stack, served_stack


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


@contextmanager
def open_project(stack: Stack) -> Iterator[Project]:
    """A fresh project of ``stack``; its clients are closed on exit."""
    key = f"/srv/checkouts/{uuid.uuid4().hex}"
    with stack.operator() as op:
        p = op.create_project(key)
    proj = Project(stack, p["project_id"], key, p["token"])
    try:
        yield proj
    finally:
        for c in proj.clients:
            c.close()


@pytest.fixture
def project(stack: Stack) -> Iterator[Project]:
    """A new project: tests never see each other's agents or mail."""
    with open_project(stack) as proj:
        yield proj
