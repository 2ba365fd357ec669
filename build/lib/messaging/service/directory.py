"""Projects and agents: creation, registration, listing, retire, close, presence."""

from __future__ import annotations

from typing import Any

from messaging import ids
from messaging.config import Settings, get_settings
from messaging.errors import CourierError, not_found
from messaging.models import AgentIn, PresenceIn, ProjectIn
from messaging.service.caller import Caller
from messaging.service.sending import Dispatcher
from messaging.service.views import agent_row
from messaging.store.store import Store
from messaging.timefmt import now_us
from workers import transports

Json = dict[str, Any]


async def create_project(store: Store, caller: Caller, body: ProjectIn) -> Json:
    """Create a project and its token (shown once).

    Raises:
        CourierError: FORBIDDEN unless operator; PROJECT_EXISTS for a known key.
    """
    if caller.kind != "operator":
        raise CourierError("FORBIDDEN", "only the operator token creates projects")
    token = ids.new_token("cpt")
    project = {
        "id": ids.new_project_id(),
        "project_key": body.project_key,
        "name": body.name or body.project_key.rstrip("/").rsplit("/", 1)[-1] or "/",
        "created_us": str(now_us()),
    }
    if not await store.create_project(project, ids.token_hash(token)):
        raise CourierError(
            "PROJECT_EXISTS",
            "a project with this project_key exists; its token was shown when it was created",
            {"project_key": body.project_key},
        )
    return {
        "project_id": project["id"],
        "project_key": project["project_key"],
        "name": project["name"],
        "token": token,
    }


async def require_project(store: Store, project_id: str) -> Json:
    """A project, or 404."""
    project = await store.get_project(project_id)
    if project is None:
        raise not_found("project")
    return project


async def register_agent(
    store: Store, settings: Settings, caller: Caller, project_id: str, body: AgentIn
) -> Json:
    """Register an agent (a name may be registered again: latest wins).

    Raises:
        CourierError: FORBIDDEN, NOT_FOUND, or INVALID_ARGUMENT naming the transport field.
    """
    caller.require_project(project_id)
    await require_project(store, project_id)
    # The transport's own settings model checks it (a webhook without a secret
    # gets one); nothing is stored unless it passes.
    transport = transports.validate(body.transport.model_dump(), settings)
    now = str(now_us())
    token = ids.new_token("cat")
    agent: Json = {
        "id": ids.new_agent_id(project_id),
        "project_id": project_id,
        "name": body.name,
        "ref": "",
        "status": "active",
        "presence": None,
        "last_active_us": now,
        "registered_us": now,
        "transport": transport,
        "bound_source": body.bound_source.model_dump(exclude_none=True)
        if body.bound_source
        else None,
        "program": body.program,
        "model": body.model,
        "description": body.description,
    }
    agent = await store.register_agent(agent, ids.token_hash(token))
    answer = {**agent_row(agent), "project_id": project_id, "token": token}
    # The settings as stored (a generated webhook secret included) are shown
    # once, like the token: the receiver needs the secret to check signatures.
    answer["transport"] = transport
    return answer


async def list_agents(store: Store, caller: Caller, project_id: str) -> Json:
    """The project's agents, oldest registration first."""
    caller.require_member(project_id)
    await require_project(store, project_id)
    agents = sorted(await store.list_agents(project_id), key=lambda a: int(a["registered_us"]))
    return {"agents": [agent_row(a) for a in agents]}


async def set_status(
    store: Store, caller: Caller, project_id: str, agent_id: str, status: str
) -> Json:
    """Retire or close an agent; its history stays readable.

    Raises:
        CourierError: FORBIDDEN, or NOT_FOUND for an agent not in the project.
    """
    caller.require_project(project_id)
    agent = await store.get_agent(project_id, agent_id)
    if agent is None:
        raise not_found("agent")
    if agent["status"] == "closed" and status == "retired":
        return agent_row(agent)  # closed is final; retiring it changes nothing
    updated = await store.update_agent(project_id, agent_id, {"status": status}, None)
    if updated is None:
        raise not_found("agent")
    return agent_row(updated)


async def set_presence(
    store: Store, caller: Caller, body: PresenceIn, dispatcher: Dispatcher | None = None
) -> Json:
    """Record what the agent's host says of it; moves its activity forward.

    A change to ``idle`` or ``exited`` sends the notice of every idle
    subscription waiting on the agent, each exactly once. Their deliveries are
    published through ``dispatcher``; without one they are due in the outbox
    at once and the sweeper publishes them.
    """
    project_id, agent_id = caller.require_agent()
    now = now_us()
    grace_ms = int(get_settings().outbox_grace_s * 1000) if dispatcher is not None else 0
    updated, fired = await store.live.set_presence(
        project_id, agent_id, body.state.value, now, now // 1000 + grace_ms)
    if updated is None:
        raise not_found("agent")
    if dispatcher is not None:
        for notice in fired:
            dispatcher.submit(project_id, notice.transport, notice.delivery_id)
    return agent_row(updated)
