"""What a client address is counted as, and which connection makes room for which."""

from __future__ import annotations

import pytest

from messaging.web.addresses import LOOPBACK, Holdings, State, counted_as


@pytest.mark.parametrize(("address", "client"), [
    ("127.0.0.1", LOOPBACK), ("127.0.0.9", LOOPBACK), ("127.255.255.254", LOOPBACK),
    ("::1", LOOPBACK), ("::ffff:127.0.0.2", LOOPBACK),
    ("192.0.2.7", "192.0.2.7"), ("::ffff:192.0.2.7", "192.0.2.7"),
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"), ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
    ("", ""), ("/run/courier.sock", "/run/courier.sock"),
])
def test_a_client_is_counted_by_its_loopback_range_or_ipv6_prefix(address: str, client: str):
    assert counted_as(address) == client


class Conn:
    """A connection that remembers how it was let go."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.evicted: State | None = None

    def evict(self, state: State) -> None:
        self.evicted = state

    def __repr__(self) -> str:
        return self.name


def _opened(holdings: Holdings[Conn], n: int, state: State, client: str = "c") -> list[Conn]:
    conns = [Conn(f"{state}{i}") for i in range(n)]
    for conn in conns:
        holdings.opened(conn, client)
        assert holdings.count(conn, state)
    return conns


def test_past_the_pending_cap_the_oldest_pending_is_closed_and_nothing_else():
    holdings: Holdings[Conn] = Holdings(max_held=100, max_pending=3)
    active = _opened(holdings, 5, State.ACTIVE)
    pending = _opened(holdings, 5, State.PENDING)
    assert [c.evicted for c in pending] == [State.PENDING] * 2 + [None] * 3
    assert all(c.evicted is None for c in active)
    held = holdings.held("c")
    assert held is not None and list(held.pending) == pending[2:] and held.active == 5


def test_fresh_connections_are_not_counted_until_their_first_read():
    holdings: Holdings[Conn] = Holdings(max_held=4, max_pending=2)
    _opened(holdings, 2, State.PENDING)
    fresh = [Conn(f"fresh{i}") for i in range(4)]
    for conn in fresh:  # a batch accepted together: none of them read yet
        holdings.opened(conn, "c")
    assert all(c.evicted is None for c in fresh)
    # The batch's first is a whole request: it is served, the stalled ones make room.
    assert holdings.count(fresh[0], State.ACTIVE)
    assert holdings.count(fresh[1], State.PENDING)
    held = holdings.held("c")
    assert held is not None and held.active == 1 and len(held.pending) == 2


def test_past_the_cap_an_idle_connection_is_closed_then_a_newcomer_is_refused():
    holdings: Holdings[Conn] = Holdings(max_held=3, max_pending=0)
    active = _opened(holdings, 2, State.ACTIVE)
    assert holdings.count(active[1], State.IDLE)
    newcomer = Conn("new")
    holdings.opened(newcomer, "c")
    assert holdings.count(newcomer, State.ACTIVE)
    late = Conn("late")
    holdings.opened(late, "c")
    assert holdings.count(late, State.PENDING)  # the idle one made room
    assert active[1].evicted is State.IDLE
    refused = Conn("refused")
    holdings.opened(refused, "c")
    assert not holdings.count(refused, State.ACTIVE)  # every one busy: no room
    assert refused.evicted is None  # refused by its caller, not evicted


def test_past_the_cap_of_fresh_connections_the_oldest_is_counted_as_pending():
    holdings: Holdings[Conn] = Holdings(max_held=2, max_pending=1)
    fresh = [Conn(f"fresh{i}") for i in range(4)]
    for conn in fresh:
        holdings.opened(conn, "c")
    # fresh0 counted pending, then fresh1 (fresh0 closed past the pending cap)
    assert [c.evicted for c in fresh] == [State.PENDING, None, None, None]


def test_clients_are_capped_apart_and_forgotten_when_they_hold_nothing():
    holdings: Holdings[Conn] = Holdings(max_held=1, max_pending=1)
    a, b = Conn("a"), Conn("b")
    for conn, client in [(a, "x"), (b, "y")]:
        holdings.opened(conn, client)
        assert holdings.count(conn, State.PENDING)
    assert a.evicted is None and b.evicted is None
    holdings.drop(a)
    holdings.drop(b)
    holdings.drop(b)  # closed twice, or after an eviction: nothing to do
    assert holdings.clients == {} and holdings.where == {}
