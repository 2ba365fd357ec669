"""Client addresses: what each client is counted as, and the connections each holds.

A local process may send from any address of 127.0.0.0/8 (or ``::1``), and a
host on IPv6 is usually given a whole /64: counted address by address, such a
client would multiply its connection caps and its rate limit by the addresses
it picks. So every loopback address counts as one client (``LOOPBACK``), and
an IPv6 address counts as its /64.

``Holdings`` keeps one API process's connections per client, oldest first, by
where each stands (``State``). A connection is counted from its first read,
when it is known to be pending (part of a request's headers came, or nothing
did for a while) or active (a request under way), not from its accept: the
server accepts connections in batches, and a client whose whole request was
waiting to be read could otherwise be closed for the stalled connections
accepted just after it. Past the cap on pending connections the oldest is
closed, so stalled connections never take the room of requests; past the cap
on all of them an idle one (between requests) is closed, and only when none
is idle is the newcomer refused.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

LOOPBACK = "loopback"
IPV6_PREFIX = 64


def counted_as(address: str) -> str:
    """The client an address is counted as: ``LOOPBACK``, an IPv6 /64, or the address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:  # none given (""), or not an IP address
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return LOOPBACK
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False))
    return str(ip)


class State(StrEnum):
    """Where a connection of a client stands."""

    FRESH = "fresh"  # accepted, not read yet: not counted
    PENDING = "pending"  # part of a request's headers came, not the rest (or nothing did)
    ACTIVE = "active"  # a request's headers came: the request is under way
    IDLE = "idle"  # an answer went out; nothing of the next request yet


class Connection(Protocol):
    """What ``Holdings`` closes to make room."""

    def evict(self, state: State) -> None:
        """Close the connection, which ``Holdings`` no longer tracks (it was in ``state``;
        ``FRESH``: it had no room when it was counted)."""


C = TypeVar("C", bound=Connection)


@dataclass
class Holding(Generic[C]):
    """One client's connections in one process (in each dict the first is the oldest)."""

    fresh: dict[C, None] = field(default_factory=dict)
    pending: dict[C, None] = field(default_factory=dict)
    active: int = 0
    idle: dict[C, None] = field(default_factory=dict)

    def counted(self) -> int:
        """The connections counted against the cap: all but the fresh ones."""
        return len(self.pending) + self.active + len(self.idle)

    def group(self, state: State) -> dict[C, None]:
        """The connections in ``state`` (not ``ACTIVE``, only counted)."""
        if state is State.PENDING:
            return self.pending
        return self.idle if state is State.IDLE else self.fresh

    def __bool__(self) -> bool:
        return bool(self.fresh) or self.counted() > 0


class Holdings(Generic[C]):
    """Connections per client in one process: at most ``max_held`` counted, and as many
    fresh; at most ``max_pending`` of the counted ones pending (``0``: no cap)."""

    def __init__(self, max_held: int = 0, max_pending: int = 0) -> None:
        self.max_held, self.max_pending = max_held, max_pending
        self.clients: dict[str, Holding[C]] = {}
        self.where: dict[C, tuple[str, State]] = {}

    def opened(self, conn: C, client: str) -> None:
        """A connection accepted from ``client``: fresh, until ``count`` says what it is.

        Past ``max_held`` fresh ones, the oldest is counted as pending at once: so many
        connections came after it that its first read is late.
        """
        self._put(conn, client, State.FRESH)
        fresh = self.clients[client].fresh
        if self.max_held and len(fresh) > self.max_held:
            oldest = next(iter(fresh))
            if not self.count(oldest, State.PENDING):
                self._evict(oldest)

    def count(self, conn: C, state: State) -> bool:
        """A fresh connection (at its first read) or a counted one, now in ``state``.

        False, and nothing changed, for a fresh one when its client holds
        ``max_held`` counted connections and none of them is idle, to be closed for it.
        A connection no longer tracked (evicted, closed) is left alone.
        """
        where = self.where.get(conn)
        if where is None or where[1] is state:
            return True
        client, was = where
        held = self.clients[client]
        if was is State.FRESH and self.max_held and held.counted() >= self.max_held:
            if not held.idle:
                return False
            self._evict(next(iter(held.idle)))
        self._take(conn)
        self._put(conn, client, state)
        pending = self.clients[client].pending
        if state is State.PENDING and self.max_pending and len(pending) > self.max_pending:
            self._evict(next(iter(pending)))
        return True

    def drop(self, conn: C) -> None:
        """A connection closed (ignored if it was evicted already)."""
        if conn in self.where:
            self._take(conn)

    def held(self, client: str) -> Holding[C] | None:
        """What a client holds, if anything."""
        return self.clients.get(client)

    def _put(self, conn: C, client: str, state: State) -> None:
        held = self.clients.setdefault(client, Holding())
        self.where[conn] = (client, state)
        if state is State.ACTIVE:
            held.active += 1
        else:
            held.group(state)[conn] = None

    def _take(self, conn: C) -> None:
        client, state = self.where.pop(conn)
        held = self.clients[client]
        if state is State.ACTIVE:
            held.active -= 1
        else:
            del held.group(state)[conn]
        if not held:
            del self.clients[client]

    def _evict(self, conn: C) -> None:
        state = self.where[conn][1]
        self._take(conn)
        conn.evict(state)
