"""Token changes are atomic (docs/http-api.md: Authentication).

Rotate, retire and close fired at one agent at the same moment, in every
combination, never leave a retired or closed agent with a working token: each
token ever issued to it is refused afterwards.
"""

from __future__ import annotations

import asyncio
import itertools

import httpx
import pytest

from tests.integration.conftest import Project

ROUNDS = 50
# Agents raced at once: enough to interleave, few enough for a two-core machine.
BATCH = 10
ACTIONS = ("token", "retire", "close")
# Every mix of actions that ends the agent: with retire or close, rotate or not.
MIXES = [mix for n in (2, 3) for mix in itertools.combinations(ACTIONS, n)]


async def _race(http: httpx.AsyncClient, project_id: str, mix: tuple[str, ...],
                index: int) -> tuple[str, list[str], str]:
    """Register an agent, fire ``mix`` at it at once; (agent id, every token issued, status)."""
    made = await http.post(f"/v1/projects/{project_id}/agents", json={
        "name": f"Racer {'-'.join(mix)} {index}", "transport": {"kind": "inbox"}})
    assert made.status_code == 201, made.text
    agent_id, tokens = made.json()["agent_id"], [made.json()["token"]]
    path = f"/v1/projects/{project_id}/agents/{agent_id}"
    answers = await asyncio.gather(*(http.post(f"{path}/{action}") for action in mix))
    for action, got in zip(mix, answers, strict=True):
        if action == "token" and got.status_code == 201:
            tokens.append(got.json()["token"])
        else:  # a rotation that came after the end: refused, nothing issued
            assert got.status_code in (200, 422), (action, got.status_code, got.text)
    listed = (await http.get(f"/v1/projects/{project_id}/agents")).json()["agents"]
    status = next(a["status"] for a in listed if a["agent_id"] == agent_id)
    return agent_id, tokens, status


async def _races(url: str, project: Project) -> list[tuple[str, list[str], str]]:
    auth = {"Authorization": f"Bearer {project.token}"}
    limits = httpx.Limits(max_connections=3 * BATCH)
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=30, limits=limits) as http:
        jobs = [(mix, i) for mix in MIXES for i in range(ROUNDS)]
        done = []
        for start in range(0, len(jobs), BATCH):
            done += await asyncio.gather(*(_race(http, project.project_id, mix, i)
                                           for mix, i in jobs[start:start + BATCH]))
        return done


async def _sends(url: str, tokens: list[str]) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        async def send(token: str) -> int:
            got = await http.post("/v1/messages", headers={"Authorization": f"Bearer {token}"},
                                  json={"to": ["Keeper"], "subject": "still here?",
                                        "body_md": "x"})
            return got.status_code
        return list(await asyncio.gather(*(send(t) for t in tokens)))


@pytest.mark.slow
def test_no_mix_of_rotate_retire_and_close_leaves_a_working_token(project: Project):
    project.agent("Keeper")  # a recipient a working token could reach
    url = project.stack.api_url
    raced = asyncio.run(_races(url, project))
    assert len(raced) == ROUNDS * len(MIXES) == 200
    assert {status for _, _, status in raced} <= {"retired", "closed"}
    tokens = [t for _, issued, _ in raced for t in issued]
    owners = [(agent_id, status) for agent_id, issued, status in raced for _ in issued]
    codes = asyncio.run(_sends(url, tokens))
    working = [owner for owner, code in zip(owners, codes, strict=True) if code != 401]
    assert working == [], f"{len(working)} ended agents still have a working token: {working}"
