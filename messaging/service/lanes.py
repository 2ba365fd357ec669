"""A project's view for operators (its lane and backlog), and moving it to a lane."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from messaging import transports
from messaging.errors import CourierError, not_found
from messaging.service.caller import Caller, CallerKind
from messaging.store.store import Store
from messaging.timefmt import rfc3339
from messaging.types import Json

# Moves a project to a lane ("" for the shared queues) with its waiting
# deliveries; returns how many moved per transport (blocking: run in a thread).
LaneMover = Callable[[str, str], dict[str, int]]


async def backlog(store: Store, project_id: str) -> dict[str, int]:
    """Deliveries waiting for a worker's turn at the project, per transport."""
    counts = await store.ready_counts(list(transports.installed()), [project_id])
    return counts[project_id]


async def project_view(store: Store, caller: Caller, project_id: str) -> Json:
    """``GET /v1/projects/{project_id}`` (operator or the project's token).

    Raises:
        CourierError: FORBIDDEN, NOT_FOUND.
    """
    if not caller.sees_project(project_id):
        raise CourierError("FORBIDDEN", "only the operator or this project's token reads it")
    project = await store.get_project(project_id)
    if project is None:
        raise not_found("project")
    return {
        "project_id": project_id,
        "project_key": project["project_key"],
        "name": project["name"],
        "created_ts": rfc3339(project["created_us"]),
        "lane": project.get("lane") or None,
        "backlog": await backlog(store, project_id),
    }


async def set_lane(store: Store, move: LaneMover, caller: Caller, project_id: str,
                   lane: str) -> Json:
    """Put the project on a lane ("" takes it back to the shared queues).

    Raises:
        CourierError: FORBIDDEN unless operator; NOT_FOUND.
    """
    if caller.kind is not CallerKind.OPERATOR:
        raise CourierError("FORBIDDEN", "only the operator token moves projects between lanes")
    if await store.get_project(project_id) is None:
        raise not_found("project")
    await asyncio.to_thread(move, project_id, lane)
    return await project_view(store, caller, project_id)
