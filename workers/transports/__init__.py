"""Transports: how a delivery reaches its recipient.

Built-ins and third-party transports alike are found through the entry point
group ``courier.transports`` (name -> class implementing ``Transport``).
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points

from workers.transports.base import Transport

ENTRY_POINT_GROUP = "courier.transports"


@lru_cache(maxsize=1)
def registry() -> dict[str, Transport]:
    """Every installed transport, by kind."""
    found: dict[str, Transport] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        transport = ep.load()()
        found[transport.kind] = transport
    return found


def get(kind: str) -> Transport:
    """The transport of a kind.

    Raises:
        KeyError: no transport of that kind is installed.
    """
    return registry()[kind]
