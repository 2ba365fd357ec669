"""Who is calling: bearer tokens to a caller with a scope."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from enum import StrEnum

from messaging import ids
from messaging.errors import forbidden, unauthenticated
from messaging.store.store import Store


class CallerKind(StrEnum):
    """The three kinds of token."""

    OPERATOR = "operator"  # creates projects, reads everything
    PROJECT = "project"  # manages the agents of one project, reads its deliveries
    AGENT = "agent"  # acts as one agent


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one request."""

    kind: CallerKind
    project_id: str | None = None
    agent_id: str | None = None

    def require_agent(self) -> tuple[str, str]:
        """The (project, agent) of an agent token.

        Raises:
            CourierError: FORBIDDEN for any other token.
        """
        if self.kind is not CallerKind.AGENT or not self.project_id or not self.agent_id:
            raise forbidden("this call takes an agent token")
        return self.project_id, self.agent_id

    def require_project(self, project_id: str) -> None:
        """Allow the project token of ``project_id``, or the operator (who may do what any
        project's token may).

        Raises:
            CourierError: FORBIDDEN for any other token.
        """
        if not self.sees_project(project_id):
            raise forbidden("this call takes the project's token or the operator's")

    def require_member(self, project_id: str) -> None:
        """Allow the operator, the project's token, or any agent of it.

        Raises:
            CourierError: FORBIDDEN for a token of another project.
        """
        if self.kind is not CallerKind.OPERATOR and self.project_id != project_id:
            raise forbidden("this token belongs to another project")

    def sees_project(self, project_id: str) -> bool:
        """True for the operator and the project's own token."""
        return self.kind is CallerKind.OPERATOR or (
            self.kind is CallerKind.PROJECT and self.project_id == project_id
        )


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


async def authenticate(store: Store, operator_token: str, token: str | None,
                       token_hash: str | None = None) -> Caller:
    """Resolve a bearer token (whose ``ids.token_hash`` the caller may have already) to
    its caller.

    Raises:
        CourierError: UNAUTHENTICATED when the token is missing or unknown.
    """
    if token is None:
        raise unauthenticated("send Authorization: Bearer <token>")
    if hmac.compare_digest(token.encode(), operator_token.encode()):
        return Caller(CallerKind.OPERATOR)
    scope = await store.token_scope(token_hash or ids.token_hash(token))
    kind = scope.get("kind")
    if kind == CallerKind.PROJECT:
        return Caller(CallerKind.PROJECT, project_id=scope["project_id"])
    if kind == CallerKind.AGENT:
        agent = await store.identity(scope["project_id"], scope["agent_id"])
        if agent is not None:
            return Caller(CallerKind.AGENT, scope["project_id"], scope["agent_id"])
    raise unauthenticated("unknown token")
