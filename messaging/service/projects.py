"""Projects for the operator: every project at a glance, and a new project token."""

from __future__ import annotations

import json

from messaging import ids, transports
from messaging.errors import CourierError, invalid, not_found
from messaging.models import HUMAN
from messaging.service.caller import Caller, CallerKind
from messaging.store.store import Store
from messaging.types import Json


def _require_operator(caller: Caller, what: str) -> None:
    if caller.kind is not CallerKind.OPERATOR:
        raise CourierError("FORBIDDEN", f"only the operator token {what}")


async def list_projects(store: Store, caller: Caller, cursor: str | None, limit: int) -> Json:
    """``GET /v1/projects``: one page of projects in id order, each with its active
    agents, lane and backlog; ``next_cursor`` is null after the last page.

    Raises:
        CourierError: FORBIDDEN unless operator; INVALID_ARGUMENT for a malformed cursor.
    """
    _require_operator(caller, "lists projects")
    if cursor is not None and not cursor.startswith("prj_"):
        raise invalid("cursor", "pass back a next_cursor of an earlier page")
    # One more than asked: whether a page follows, without a second call.
    page = await store.project_page(cursor or "", limit + 1)
    kinds = list(transports.installed())
    rows = []
    for project, agents, ready in await store.project_summaries(page[:limit], kinds):
        if not project:
            continue  # removed between the two reads
        active = sum(1 for raw in agents if (a := json.loads(raw))["id"] != HUMAN
                     and a["status"] == "active")
        rows.append({"project_id": project["id"], "project_key": project["project_key"],
                     "name": project.get("name") or None, "agents": active,
                     "lane": project.get("lane") or None,
                     "backlog": dict(zip(kinds, ready, strict=True))})
    return {"projects": rows, "next_cursor": page[limit - 1] if len(page) > limit else None}


async def new_project_token(store: Store, caller: Caller, project_id: str) -> Json:
    """``POST /v1/projects/{project_id}/token``: a new project token (shown once); the
    old one is refused from the same moment.

    Raises:
        CourierError: FORBIDDEN unless operator; NOT_FOUND.
    """
    _require_operator(caller, "issues project tokens")
    project = await store.get_project(project_id)
    if project is None:
        raise not_found("project")
    token = ids.new_token("cpt")
    if not await store.replace_project_token(project_id, ids.token_hash(token)):
        raise not_found("project")
    return {"project_id": project_id, "project_key": project["project_key"],
            "name": project.get("name") or None, "token": token}
