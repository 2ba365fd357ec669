"""Projects for the operator: the list, and a new project token for a lost one."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from messaging.client import CourierAPIError, CourierClient
from messaging.store import keys
from tests.integration.conftest import Project
from tests.stack import Stack


def _all_projects(op: CourierClient, limit: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    cursor = None
    while True:
        page = op.projects(cursor=cursor, limit=limit)
        assert len(page["projects"]) <= limit
        rows += page["projects"]
        cursor = page["next_cursor"]
        if cursor is None:
            return rows


def test_the_operator_pages_through_every_project_with_its_agents_lane_and_backlog(
    project: Project, stack: Stack
):
    alice = project.agent("Alice")
    project.agent("Bob")
    project.admin.retire_agent(project.project_id, alice.id)
    with stack.operator() as op:
        others = [op.create_project(f"/srv/list/{uuid.uuid4().hex}", name="other")
                  for _ in range(3)]
        op.set_lane(others[0]["project_id"], "listed")
        rows = _all_projects(op, limit=2)
    ids = [r["project_id"] for r in rows]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    by_id = {r["project_id"]: r for r in rows}
    mine = by_id[project.project_id]
    assert mine == {"project_id": project.project_id, "project_key": project.project_key,
                    "name": mine["name"], "agents": 1, "lane": None,
                    "backlog": {"inbox": 0, "webhook": 0, **{
                        k: 0 for k in mine["backlog"] if k not in ("inbox", "webhook")}}}
    assert by_id[others[0]["project_id"]]["lane"] == "listed"
    assert all(by_id[p["project_id"]]["name"] == "other" for p in others)
    assert all("token" not in r and "token_hash" not in r for r in rows)


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 501}, {"cursor": "nonsense"}])
def test_a_bad_page_request_is_422(stack: Stack, params: dict[str, object]):
    answer = httpx.get(f"{stack.api_url}/v1/projects", params=params,
                       headers={"Authorization": f"Bearer {stack.operator_token}"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "INVALID_ARGUMENT"


def test_only_the_operator_lists_projects_or_issues_their_tokens(project: Project):
    alice = project.agent("Alice")
    for client in (project.admin, alice.api):
        for call in (lambda c: c.projects(),
                     lambda c: c.new_project_token(project.project_id)):
            with pytest.raises(CourierAPIError) as refused:
                call(client)
            assert refused.value.status == 403, refused.value
    with CourierClient(project.stack.api_url) as anonymous, pytest.raises(
            CourierAPIError) as refused:
        anonymous.projects()
    assert refused.value.status == 401
    project.admin.list_agents(project.project_id)  # the project's token still works


def test_a_new_project_token_works_at_once_and_the_old_one_never_again(project: Project):
    alice = project.agent("Alice")
    with project.stack.operator() as op:
        issued = op.new_project_token(project.project_id)
        with pytest.raises(CourierAPIError) as missing:
            op.new_project_token("prj_000000000000")
    assert missing.value.status == 404
    assert issued["project_id"] == project.project_id
    assert issued["token"] != project.token
    with pytest.raises(CourierAPIError) as old:
        project.admin.list_agents(project.project_id)
    assert old.value.status == 401
    with project.stack.client(issued["token"]) as admin:
        assert [a["agent_id"] for a in admin.list_agents(project.project_id)] == [alice.id]
        bob = admin.register_agent(project.project_id, "Bob")
    with project.stack.client(bob["token"]) as b:
        b.send(["Alice"], "after the new token", "works")
    # The agents' own tokens are untouched.
    assert alice.api.inbox()["next_cursor"] is not None


def test_concurrent_reissues_leave_exactly_one_working_project_token(project: Project):
    with project.stack.operator() as op, ThreadPoolExecutor(8) as pool:
        issued = list(pool.map(lambda _: op.new_project_token(project.project_id), range(16)))
    working = []
    for token in [project.token] + [i["token"] for i in issued]:
        with project.stack.client(token) as c:
            try:
                c.list_agents(project.project_id)
                working.append(token)
            except CourierAPIError as e:
                assert e.status == 401
    assert len(working) == 1


def test_a_project_made_before_token_hashes_were_kept_gets_a_new_token(project: Project):
    # A project as older releases stored it: no token_hash in its record.
    with project.stack.redis() as r:
        r.hdel(keys.project(project.project_id), "token_hash")
    project.admin.list_agents(project.project_id)
    with project.stack.operator() as op:
        issued = op.new_project_token(project.project_id)
    with pytest.raises(CourierAPIError) as old:
        project.admin.list_agents(project.project_id)
    assert old.value.status == 401
    with project.stack.client(issued["token"]) as admin:
        admin.list_agents(project.project_id)
