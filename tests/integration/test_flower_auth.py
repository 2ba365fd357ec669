"""Flower asks for the operator token on every route, /metrics and /healthcheck included."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from flower.urls import handlers

from tests.stack import make_stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

GROUP = re.compile(r"\([^)]*\)")


def _paths() -> list[str]:
    """One path for each route of Flower's URL table, its groups filled in."""
    out = []
    for route in handlers:
        pattern = route[0] if isinstance(route, tuple) else route.regex.pattern
        path = GROUP.sub("x", pattern.rstrip("$")).replace("/?", "").replace(".*", "x")
        out.append(path if path.startswith("/") else "/" + path)
    return out


def test_every_flower_route_asks_for_the_operator_token(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    try:
        _, url = stack.start_flower(["-m", "messaging.launch.flower"])
        paths = _paths()
        assert {"/metrics", "/healthcheck", "/static/x", "/api/workers"} <= set(paths), paths
        good = ("operator", stack.operator_token)
        with httpx.Client(base_url=url, timeout=10) as http:
            for path in paths:
                for auth in (None, ("operator", "wrong"), ("someone", stack.operator_token)):
                    answer = http.get(path, auth=auth)
                    assert answer.status_code == 401, (path, auth, answer.status_code)
                    assert answer.headers["WWW-Authenticate"].startswith("Basic")
            assert http.get("/healthcheck", auth=good).text == "OK"
            metrics = http.get("/metrics", auth=good)
            assert metrics.status_code == 200 and "flower_" in metrics.text
            assert http.get("/api/queues/length", auth=good).status_code == 200
            assert http.get("/", headers={"Authorization": "Bearer " + stack.operator_token}
                            ).status_code == 401
    finally:
        stack.stop()


def test_workers_that_start_after_flower_are_listed_without_a_refresh(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    try:
        _, url = stack.start_flower(["-m", "messaging.launch.flower"])
        good = ("operator", stack.operator_token)
        with httpx.Client(base_url=url, timeout=10, auth=good) as http:
            assert http.get("/api/workers").json() == {}
            stack.start_worker(beat=False)
            listed = wait_until(lambda: http.get("/api/workers").json(), 20, 0.5,
                                "Flower to list the worker")
            assert len(listed) == 1
            [worker] = listed.values()
            assert {q["name"] for q in worker["active_queues"]} >= {"deliver.inbox"}
            # A worker that joins later is listed too.
            stack.start_worker(beat=False)
            wait_until(lambda: len(http.get("/api/workers").json()) == 2, 20, 0.5,
                       "Flower to list the second worker")
    finally:
        stack.stop()
