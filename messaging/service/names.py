"""Names not yet registered: authorize, list and end them (the project's token)."""

from __future__ import annotations

from messaging.errors import invalid, not_found
from messaging.models import NameAllowIn, check_agent_name, normal_name
from messaging.service.caller import Caller
from messaging.service.directory import require_project
from messaging.store.store import Store
from messaging.timefmt import now_us, rfc3339
from messaging.types import Json


def _checked(name: str) -> str:
    try:
        return check_agent_name(name)
    except ValueError as exc:
        raise invalid("name", str(exc)) from None


def _row(record: Json) -> Json:
    return {"name": record["name"], "expires_ts": rfc3339(int(record["expires_ms"]) * 1000),
            "waiting": int(record.get("waiting", 0))}


async def allow(store: Store, caller: Caller, project_id: str, name: str,
                body: NameAllowIn) -> Json:
    """Authorize a name (or renew it): mail to it waits for its first agent until it runs out.

    Raises:
        CourierError: FORBIDDEN, NOT_FOUND, INVALID_ARGUMENT naming ``name``.
    """
    caller.require_project(project_id)
    await require_project(store, project_id)
    now = now_us()
    record = await store.names.allow(project_id, _checked(name),
                                     now // 1000 + body.ttl_s * 1000, now)
    return {"name": record["name"], "expires_ts": rfc3339(int(record["expires_ms"]) * 1000)}


async def list_names(store: Store, caller: Caller, project_id: str) -> Json:
    """The project's authorized names, soonest expiry first, with their waiting mail."""
    caller.require_project(project_id)
    await require_project(store, project_id)
    records = sorted(await store.names.records(project_id), key=lambda r: int(r["expires_ms"]))
    return {"names": [_row(r) for r in records]}


async def end(store: Store, caller: Caller, project_id: str, name: str) -> Json:
    """End an authorization: what waits for it fails, nothing is dispatched.

    Raises:
        CourierError: FORBIDDEN; NOT_FOUND when the name is not authorized.
    """
    caller.require_project(project_id)
    await require_project(store, project_id)
    name = normal_name(name)
    if await store.names.end(project_id, name, now_us()) != "ok":
        raise not_found("authorized name")
    return {"name": name, "deleted": True}
