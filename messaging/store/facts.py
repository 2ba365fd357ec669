"""Facts that never change once written, cached in each API process.

An agent's name, ref and bound source, and a project's key are written once
and never edited or deleted, so a cached copy can never be stale; only what
was found is cached. (A token's scope can be revoked: the store keeps it only
briefly, see ``Store.token_scope``.) This takes the sender's lookups off the
admission path: in steady state a send is one store round trip.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Generic, TypeVar

from messaging.store.schema import AgentField

K = TypeVar("K")
V = TypeVar("V")

# Entries each cache keeps; the least recently used go first.
FACTS_MAX = 100_000


class Lru(Generic[K, V]):
    """A bounded map that forgets the least recently used entry."""

    def __init__(self, size: int = FACTS_MAX) -> None:
        self.size = size
        self.data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value, now the most recently used, or None."""
        value = self.data.get(key)
        if value is not None:
            self.data.move_to_end(key)
        return value

    def drop(self, key: K) -> None:
        """Forget a key."""
        self.data.pop(key, None)

    def put(self, key: K, value: V) -> None:
        """Remember a value."""
        self.data[key] = value
        self.data.move_to_end(key)
        if len(self.data) > self.size:
            self.data.popitem(last=False)


def identity(agent: dict[str, Any], project_key: str) -> dict[str, Any]:
    """What never changes about an agent, and its project's key."""
    return {"id": agent[AgentField.ID], "name": agent[AgentField.NAME],
            "ref": agent[AgentField.REF], "bound_source": agent.get(AgentField.BOUND_SOURCE),
            "project_key": project_key}
