"""Server ids and secrets. Ids carry a prefix naming what they are; message,
delivery and agent ids also carry their project, so any id finds its store slot."""

from __future__ import annotations

import hashlib
import secrets

PROJECT_HEX = 12
_RANDOM_HEX = 16


def new_project_id() -> str:
    """A fresh project id: ``prj_`` and 12 hex digits."""
    return "prj_" + secrets.token_hex(PROJECT_HEX // 2)


def _scoped(prefix: str, project_id: str) -> str:
    return f"{prefix}_{project_id.removeprefix('prj_')}{secrets.token_hex(_RANDOM_HEX // 2)}"


def new_agent_id(project_id: str) -> str:
    """A fresh agent id of the project."""
    return _scoped("agt", project_id)


def new_message_id(project_id: str) -> str:
    """A fresh message id of the project."""
    return _scoped("msg", project_id)


def new_delivery_id(project_id: str) -> str:
    """A fresh delivery id of the project."""
    return _scoped("dlv", project_id)


def new_ref() -> str:
    """A short agent ref: 6 hex digits."""
    return secrets.token_hex(3)


def project_of(scoped_id: str) -> str | None:
    """The project id inside an agent, message or delivery id, or None if malformed."""
    prefix, sep, rest = scoped_id.partition("_")
    if not sep or prefix not in ("agt", "msg", "dlv"):
        return None
    body = rest[:PROJECT_HEX]
    if len(rest) != PROJECT_HEX + _RANDOM_HEX or not all(c in "0123456789abcdef" for c in rest):
        return None
    return "prj_" + body


def new_token(kind: str) -> str:
    """A bearer secret for an operator (``cop``), project (``cpt``) or agent (``cat``)."""
    return f"{kind}_{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> str:
    """How a token is stored: its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()
