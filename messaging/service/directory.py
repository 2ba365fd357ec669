"""Projects and agents: creation, registration, listing, retire, close, presence."""

from __future__ import annotations

from messaging import ids, transports
from messaging.config import Settings
from messaging.errors import CourierError, invalid, not_found
from messaging.models import HUMAN, AgentIn, PresenceIn, ProjectIn
from messaging.service.caller import Caller
from messaging.service.human import ensure_human
from messaging.service.sending import DeliveryPublisher
from messaging.service.views import agent_row
from messaging.store.store import Store
from messaging.timefmt import now_us
from messaging.types import Json


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
    await ensure_human(store, project["id"])
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


async def _parent(store: Store, project_id: str, parent_id: str | None) -> Json | None:
    """The parent agent a registration names: an active agent of the project."""
    if parent_id is None:
        return None
    parent = await store.get_agent(project_id, parent_id) if ids.project_of(
        parent_id) == project_id else None
    if parent is None or parent["status"] != "active":
        raise invalid("parent", "must be the agent id of an active agent of this project")
    return parent


async def register_agent(
    store: Store, settings: Settings, caller: Caller, project_id: str, body: AgentIn,
    dispatcher: DeliveryPublisher | None = None,
) -> Json:
    """Register an agent (a name may be registered again: latest wins).

    The first agent of an authorized name takes the mail waiting for it.

    Raises:
        CourierError: FORBIDDEN, NOT_FOUND, or INVALID_ARGUMENT naming the transport field
            or the parent.
    """
    caller.require_project(project_id)
    await require_project(store, project_id)
    parent = await _parent(store, project_id, body.parent)
    # The transport's own settings model checks it (a webhook without a secret
    # gets one); nothing is stored unless it passes.
    transport = transports.validate(body.transport.model_dump(), settings)
    now = str(now_us())
    token = ids.new_token("cat")
    agent_id = ids.new_agent_id(project_id)
    agent: Json = {
        "id": agent_id,
        "project_id": project_id,
        "name": body.name,
        "ref": "",
        "status": "active",
        "presence": None,
        "last_active_us": now,
        "registered_us": now,
        "used_us": now,
        "parent": parent["id"] if parent else None,
        "root": (parent.get("root") or parent["id"]) if parent else agent_id,
        "inbound": body.inbound.value,
        "transport": transport,
        "bound_source": body.bound_source.model_dump(exclude_none=True)
        if body.bound_source
        else None,
        "program": body.program,
        "model": body.model,
        "description": body.description,
    }
    agent = await store.register_agent(agent, ids.token_hash(token))
    await _bind_waiting(store, settings, project_id, agent["name"], dispatcher)
    answer = {**agent_row(agent), "project_id": project_id, "token": token}
    # The settings as stored (a generated webhook secret included) are shown
    # once, like the token: the receiver needs the secret to check signatures.
    answer["transport"] = transport
    return answer


async def _bind_waiting(
    store: Store, settings: Settings, project_id: str, name: str,
    dispatcher: DeliveryPublisher | None,
) -> None:
    """Bind the mail waiting for a name that an agent just took, and publish it."""
    if not await store.names.is_authorized(project_id, name):
        return
    now = now_us()
    grace_ms = int(settings.outbox_grace_s * 1000) if dispatcher is not None else 0
    for bound in await store.names.bind(project_id, name, now, now // 1000 + grace_ms):
        if dispatcher is not None:
            dispatcher.submit(project_id, bound.transport, bound.delivery_id)


async def list_agents(store: Store, caller: Caller, project_id: str) -> Json:
    """The project's agents, oldest registration first."""
    caller.require_member(project_id)
    await require_project(store, project_id)
    agents = sorted((a for a in await store.list_agents(project_id) if a["id"] != HUMAN),
                    key=lambda a: int(a["registered_us"]))
    return {"agents": [agent_row(a) for a in agents]}


async def set_status(
    store: Store, caller: Caller, project_id: str, agent_id: str, status: str
) -> Json:
    """Retire or close an agent; its history stays readable.

    Raises:
        CourierError: FORBIDDEN, or NOT_FOUND for an agent not in the project.
    """
    caller.require_project(project_id)
    # Retired or closed, the agent acts no more: its token stops working at once,
    # in the same store step as the status, so no rotation can slip in between.
    # The project's human is no agent of the list: it is never retired, closed or given a token.
    updated = None if agent_id == HUMAN else await store.end_agent(project_id, agent_id, status)
    if updated is None:
        raise not_found("agent")
    return agent_row(updated)


async def rotate_token(store: Store, caller: Caller, project_id: str, agent_id: str) -> Json:
    """Issue the agent a new token and revoke the old one (project token).

    Raises:
        CourierError: FORBIDDEN, NOT_FOUND, or INVALID_ARGUMENT for an agent
            that is retired or closed (it has no token any more).
    """
    caller.require_project(project_id)
    token = ids.new_token("cat")
    outcome, agent = ("missing", None) if agent_id == HUMAN else await store.rotate_agent_token(
        project_id, agent_id, ids.token_hash(token))
    if agent is None:
        raise not_found("agent")
    if outcome != "ok":
        raise invalid("agent_id", f"the agent is {agent['status']}: it takes no token")
    return {**agent_row(agent), "project_id": project_id, "token": token}


async def set_presence(
    store: Store, settings: Settings, caller: Caller, body: PresenceIn,
    dispatcher: DeliveryPublisher | None = None,
) -> Json:
    """Record what the agent's host says of it; moves its activity forward.

    A change to ``idle`` or ``exited`` sends the notice of every idle
    subscription waiting on the agent, each exactly once. Their deliveries are
    published through ``dispatcher``; without one they are due in the outbox
    at once and the sweeper publishes them.
    """
    project_id, agent_id = caller.require_agent()
    now = now_us()
    grace_ms = int(settings.outbox_grace_s * 1000) if dispatcher is not None else 0
    updated, fired = await store.live.set_presence(
        project_id, agent_id, body.state.value, now, now // 1000 + grace_ms,
        int(settings.presence_ttl_s * 1_000_000))
    if updated is None:
        raise not_found("agent")
    if dispatcher is not None:
        for notice in fired:
            if notice.transport:  # held notices wait for the project's human
                dispatcher.submit(project_id, notice.transport, notice.delivery_id)
    return agent_row(updated)
